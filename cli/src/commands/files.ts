import { type Stats, promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFileEntry, type SessionFilesReply, type SessionLocation } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { askExecutor, directoryEntries, locateSession, removedIfInterrupted, sessionFileChunks, writeSessionFile } from '@murmur/shared/node';
import { type Output, TerminalSafeStream, UsageError, formatBytes, table } from '../output.js';
import { openRuntime } from '../runtime.js';

export interface FilesOptions {
  out?: string;
  json?: boolean;
}

/**
 * `mur files <session> [path]`: a session's workdir, through the executor that holds it. A
 * directory is listed; a file is written to stdout (to a terminal, as text with its control
 * characters shown), or with `--out` copied to a local path (a directory is copied whole).
 * Read-only, and never beyond the workdir.
 */
export async function filesCommand(sessionId: string, relative: string | undefined, options: FilesOptions, output: Output): Promise<number> {
  if (!process.env.MURMUR_NATS_URL?.trim()) {
    throw new MurmurError('E-BUS-005', 'mur files reads a session on the stack, and MURMUR_NATS_URL names none', {
      hint: "point MURMUR_NATS_URL at the stack's NATS; a session run in-process keeps its workdir on this machine (<capsule dir>/workdir/<session>)",
    });
  }
  if (options.out !== undefined && options.out.trim() === '')
    throw new UsageError('--out names nothing', { hint: 'name the file or directory to copy to, e.g. --out ./result.txt' });
  // --json is a listing's form: a copy's report or a file's bytes under it would be no JSON a
  // script reading stdout could parse, and saying nothing of it let one think it was.
  if (options.json && options.out !== undefined)
    throw new UsageError('--json and --out cannot be given together: --json prints a directory listing, --out copies', {
      hint: 'leave out --json to copy, or --out to list the directory as JSON',
    });
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
      if (copied.skipped.length > 0) {
        const shown = copied.skipped.slice(0, SKIPPED_SHOWN).map(tableCell).join(', ');
        const more = copied.skipped.length > SKIPPED_SHOWN ? `, and ${copied.skipped.length - SKIPPED_SHOWN} more` : '';
        const one = copied.skipped.length === 1;
        output.err(
          `mur: left out ${copied.skipped.length} entr${one ? 'y' : 'ies'} that ${one ? 'is' : 'are'} neither a file nor a directory, or no path can name (a link, a FIFO, a device, a name that is not UTF-8 or holds a control character): ${shown}${more}`,
        );
      }
      if (copied.refused.length > 0) {
        const more = copied.refused.length > SKIPPED_SHOWN ? `; and ${copied.refused.length - SKIPPED_SHOWN} more` : '';
        output.err(
          `mur: left out ${copied.refused.length} entr${copied.refused.length === 1 ? 'y' : 'ies'} the session's executor would not read: ${copied.refused.slice(0, SKIPPED_SHOWN).map(tableCell).join('; ')}${more}`,
        );
      }
      return 0;
    }
    if (options.json && reply.type !== 'directory')
      throw new UsageError(`--json prints a directory listing, and '${reply.path}' is a file`, {
        hint: `leave out --json to print the file, or copy it with --out <path>`,
      });
    if (reply.type === 'directory') {
      const entries: SessionFileEntry[] = [];
      for await (const entry of directoryEntries(runtime.bus, location, reply)) entries.push(entry);
      if (options.json) output.out(JSON.stringify({ type: 'directory', path: reply.path, entries }));
      else
        for (const line of table(
          ['TYPE', 'SIZE', 'MODIFIED', 'NAME'],
          entries.map((entry) => [
            entry.type,
            entry.type === 'file' ? String(entry.size) : '-',
            entry.modified_at,
            tableCell(entry.type === 'directory' ? `${entry.name}/` : entry.name),
          ]),
        ))
          output.out(line);
      return 0;
    }
    // A capsule wrote this file: on a terminal its control characters are shown, never acted on,
    // as `mur run` shows its output; to a pipe or a file the bytes go as they are.
    const terminal = process.stdout.isTTY ? { decoder: new TextDecoder(), safe: new TerminalSafeStream() } : undefined;
    for await (const chunk of sessionFileChunks(runtime.bus, location, wanted, { first: reply }))
      process.stdout.write(terminal ? terminal.safe.write(terminal.decoder.decode(chunk, { stream: true })) : chunk);
    if (terminal) process.stdout.write(terminal.safe.write(terminal.decoder.decode()) + terminal.safe.end());
    return 0;
  } finally {
    await runtime.close();
  }
}

/**
 * Copies what `reply` names to `target`, whole or not at all: a file by rename; a directory built
 * beside the target first and then moved in, after every entry it would replace was checked, so a
 * copy that fails (a file where a directory must go, the bus gone mid-way) leaves nothing behind.
 */
/** What a copy wrote, and the entries it left out (each by its path in the workdir). */
interface Copied {
  files: number;
  bytes: number;
  skipped: string[];
  /** Entries the executor would not read (a path too long, permissions the session set, gone meanwhile), each with why. */
  refused: string[];
}

/**
 * What the executor says of one entry of a directory being copied that is that entry's alone: the
 * rest of the copy goes on without it, and the entry is named with the reason. A guest decides
 * what its workdir holds, and one unreadable file of its making kept every other from being copied.
 */
const ENTRY_REFUSALS = new Set(['E-SES-002', 'E-IO-001', 'E-IO-002', 'E-IO-003']);

/** How many left-out entries a copy names; the rest it counts. */
const SKIPPED_SHOWN = 5;

/**
 * A name as one cell of a line: a line break or a tab in a guest's file name would start a row or
 * a column of its own making, so each is shown as its escape (the terminal's controls are the
 * output's to show).
 */
function tableCell(name: string): string {
  return name.replace(/[\n\r\t]/g, (control) => (control === '\n' ? '\\n' : control === '\r' ? '\\r' : '\\t'));
}

/** A path or a reason as a left-out line shows it: a guest's 1 000-level tree made paths of kilobytes. */
function cutShort(text: string): string {
  return text.length > 240 ? `${text.slice(0, 160)}…${text.slice(-60)}` : text;
}

async function copyOut(bus: Bus, location: SessionLocation, reply: SessionFilesReply, target: string): Promise<Copied> {
  try {
    if (reply.type === 'file') {
      const into = await fileTarget(target, reply.path);
      await fs.mkdir(path.dirname(into), { recursive: true });
      return { files: 1, bytes: await writeSessionFile(bus, location, reply.path, into, { first: reply }), skipped: [], refused: [] };
    }
    // Followed once, as the file branch does: a link to a directory is that directory.
    const existing = await fs.stat(target).catch(() => undefined);
    if (existing && !existing.isDirectory()) throw notADirectory(target, reply.path, existing);
    // Staged inside a directory that exists (its own filesystem, and writable where the copy goes
    // anyway), else beside the one to be made, which is then renamed into place.
    if (!existing) await fs.mkdir(path.dirname(target), { recursive: true });
    // Named by the target's first characters only: a target's own name near the 255 bytes a name
    // may have left no room for the prefix and mkdtemp's suffix, and the copy failed ENAMETOOLONG.
    const stem = Array.from(path.basename(target)).slice(0, STAGING_NAME_STEM).join('');
    const staging = await fs.mkdtemp(existing ? path.join(target, STAGING_PREFIX) : path.join(path.dirname(target), `.${stem}${STAGING_PREFIX}`));
    // Interrupted (Ctrl-C) in the middle, the staging directory goes with the process.
    const release = removedIfInterrupted(staging);
    try {
      const copied = await copyTree(bus, location, reply, staging);
      if (existing) await moveInto(staging, target, reply.path);
      else {
        // mkdtemp makes it 0700; a directory made by the copy gets the modes any other would.
        await fs.chmod(staging, 0o777 & ~process.umask());
        await fs.rename(staging, target);
      }
      return copied;
    } finally {
      await fs.rm(staging, { recursive: true, force: true });
      release();
    }
  } catch (error) {
    if (error instanceof MurmurError || !(error as NodeJS.ErrnoException).code) throw error;
    throw new MurmurError('E-IO-003', `cannot copy ${reply.path} to ${target}: ${(error as NodeJS.ErrnoException).code}`, {
      path: target,
      hint: 'name a directory that can be written, or a path that does not exist yet',
    });
  }
}

/**
 * Where a copied file goes for `--out target`: into a directory; over a file, or through a link to
 * one (the file it points to replaced whole, the link kept); or at a path that is not there yet.
 * A file is written whole by a rename, which would put a regular file in the place of a device, a
 * FIFO, a socket or a link to nothing — `--out /dev/null` made /dev/null a file of the capsule's
 * bytes — so those are refused, and stdout is where to send a file to them.
 */
async function fileTarget(target: string, what: string): Promise<string> {
  const here = await fs.lstat(target).catch(() => undefined);
  if (!here) return target;
  const followed = here.isSymbolicLink() ? await fs.stat(target).catch(() => undefined) : here;
  if (followed?.isDirectory()) return path.join(target, path.basename(what));
  if (followed?.isFile()) return here.isSymbolicLink() ? await fs.realpath(target) : target;
  const kind = !followed ? 'a symbolic link to nothing' : nodeKind(followed);
  throw new MurmurError('E-IO-003', `--out ${target} is ${kind}, where mur files writes ${what} as a file, whole, by a rename`, {
    path: target,
    hint: `to send the file there, leave --out out and redirect stdout: mur files <session> ${what} > ${target}`,
  });
}

function nodeKind(stat: Stats): string {
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isSocket()) return 'a socket';
  return 'neither a file nor a directory';
}

/** The name a directory copy is staged under before it is moved into place. */
const STAGING_PREFIX = '.mur-files-';
/** Characters of the target's name its staging directory keeps: at 4 bytes each, with the prefix and suffix, within 255 bytes. */
const STAGING_NAME_STEM = 48;

function notADirectory(target: string, what: string, there: Stats): MurmurError {
  return new MurmurError('E-IO-003', `--out ${target} is ${there.isFile() ? 'a file' : nodeKind(there)}, and ${what} is a directory`, {
    path: target,
    hint: 'name a directory (made when absent), or a path that does not exist yet',
  });
}

/** The directory `reply` names, copied into the empty directory `into`. */
async function copyTree(bus: Bus, location: SessionLocation, reply: SessionFilesReply & { type: 'directory' }, into: string): Promise<Copied> {
  let files = 0;
  let bytes = 0;
  const skipped: string[] = [];
  const refused: string[] = [];
  for await (const entry of directoryEntries(bus, location, reply)) {
    const child = reply.path === '.' ? entry.name : `${reply.path}/${entry.name}`;
    if (entry.type === 'other') {
      skipped.push(child);
      continue;
    }
    const childReply = await askExecutor(bus, location, { path: child }).catch((error: unknown) => {
      if (!(error instanceof MurmurError && ENTRY_REFUSALS.has(error.code))) throw error;
      refused.push(`${cutShort(child)} (error[${error.code}]: ${cutShort(error.message)})`);
      return undefined;
    });
    if (childReply === undefined) continue;
    const destination = path.join(into, entry.name);
    if (childReply.type === 'file') {
      bytes += await writeSessionFile(bus, location, childReply.path, destination, { first: childReply, exclusive: true });
      files += 1;
    } else {
      await fs.mkdir(destination);
      const copied = await copyTree(bus, location, childReply, destination);
      files += copied.files;
      bytes += copied.bytes;
      skipped.push(...copied.skipped);
      refused.push(...copied.refused);
    }
  }
  return { files, bytes, skipped, refused };
}

/**
 * Moves the copied tree `from` into the existing directory `to`, a file replacing a file and a
 * directory merged into a directory. Every clash (a file where a directory would go, or the other
 * way) is found before anything moves.
 */
async function moveInto(from: string, to: string, what: string): Promise<void> {
  const clashes: string[] = [];
  const check = async (source: string, destination: string): Promise<void> => {
    for (const entry of await fs.readdir(source, { withFileTypes: true })) {
      const there = await fs.lstat(path.join(destination, entry.name)).catch(() => undefined);
      if (!there) continue;
      if (entry.isDirectory() !== there.isDirectory()) clashes.push(path.join(destination, entry.name));
      else if (entry.isDirectory()) await check(path.join(source, entry.name), path.join(destination, entry.name));
    }
  };
  await check(from, to);
  if (clashes.length > 0) {
    throw new MurmurError(
      'E-IO-003',
      `cannot copy ${what} into ${to}: ${clashes.join(', ')} ${clashes.length === 1 ? 'is' : 'are'} in the way (a file where a directory goes, or the other way)`,
      {
        path: to,
        hint: 'move those aside, or copy to a path that does not exist yet',
      },
    );
  }
  const move = async (source: string, destination: string): Promise<void> => {
    for (const entry of await fs.readdir(source, { withFileTypes: true })) {
      const target = path.join(destination, entry.name);
      if (entry.isDirectory() && (await fs.lstat(target).catch(() => undefined))) await move(path.join(source, entry.name), target);
      else await fs.rename(path.join(source, entry.name), target);
    }
  };
  await move(from, to);
}
