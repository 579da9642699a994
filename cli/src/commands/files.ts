import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFilesReply, type SessionLocation } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { askExecutor, locateSession, sessionFileBytes, sessionFileChunks, writeFileAtomic } from '@murmur/shared/node';
import { type Output, formatBytes, table } from '../output.js';
import { openRuntime } from '../runtime.js';

export interface FilesOptions {
  out?: string;
  json?: boolean;
}

/**
 * `mur files <session> [path]`: a session's workdir, through the executor that holds it. A
 * directory is listed; a file is written to stdout, or with `--out` copied to a local path (a
 * directory is copied whole). Read-only, and never beyond the workdir.
 */
export async function filesCommand(sessionId: string, relative: string | undefined, options: FilesOptions, output: Output): Promise<number> {
  if (!process.env.MURMUR_NATS_URL?.trim()) {
    throw new MurmurError('E-BUS-005', 'mur files reads a session on the stack, and MURMUR_NATS_URL names none', {
      hint: "point MURMUR_NATS_URL at the stack's NATS; a session run in-process keeps its workdir on this machine (<capsule dir>/workdir/<session>)",
    });
  }
  const runtime = await openRuntime();
  try {
    const location = await locateSession(runtime.bus, sessionId);
    const wanted = relative ?? '';
    const reply = await askExecutor(runtime.bus, location, { path: wanted });
    if (options.out !== undefined) {
      const copied = await copyOut(runtime.bus, location, reply, path.resolve(options.out));
      output.out(
        `copied ${copied.files} file${copied.files === 1 ? '' : 's'} (${formatBytes(copied.bytes)}) from ${sessionId}:${reply.path} to ${path.resolve(options.out)}`,
      );
      return 0;
    }
    if (reply.type === 'directory') {
      if (options.json) output.out(JSON.stringify(reply));
      else
        for (const line of table(
          ['TYPE', 'SIZE', 'MODIFIED', 'NAME'],
          reply.entries.map((entry) => [
            entry.type,
            entry.type === 'file' ? String(entry.size) : '-',
            entry.modified_at,
            entry.type === 'directory' ? `${entry.name}/` : entry.name,
          ]),
        ))
          output.out(line);
      return 0;
    }
    for await (const chunk of sessionFileChunks(runtime.bus, location, wanted, { first: reply })) process.stdout.write(chunk);
    return 0;
  } finally {
    await runtime.close();
  }
}

async function copyOut(bus: Bus, location: SessionLocation, reply: SessionFilesReply, target: string): Promise<{ files: number; bytes: number }> {
  if (reply.type === 'file') {
    const bytes = await sessionFileBytes(bus, location, reply.path, reply);
    const into = (await fs.stat(target).catch(() => undefined))?.isDirectory() ? path.join(target, path.basename(reply.path)) : target;
    await fs.mkdir(path.dirname(into), { recursive: true });
    await writeFileAtomic(into, bytes);
    return { files: 1, bytes: bytes.length };
  }
  await fs.mkdir(target, { recursive: true });
  let files = 0;
  let bytes = 0;
  for (const entry of reply.entries) {
    if (entry.type === 'other') continue;
    const child = reply.path === '.' ? entry.name : `${reply.path}/${entry.name}`;
    const copied = await copyOut(bus, location, await askExecutor(bus, location, { path: child }), path.join(target, entry.name));
    files += copied.files;
    bytes += copied.bytes;
  }
  return { files, bytes };
}
