import path from 'node:path';
import { MurmurError } from '@murmur/shared';
import { readSmallTextFileSync, refuseDanglingLink } from '@murmur/shared/node';

/** A project's `.env` is a handful of lines: one past this is not read. */
const ENV_FILE = { what: '.env', maxBytes: 1024 * 1024 };

/**
 * The project's `.env` (upstream's rules): `KEY=VALUE` lines, `#` comments, surrounding quotes
 * stripped, and never overriding a variable the environment already sets. A comment may follow a
 * value, as dotenv files are written (`A="abc" # why`, `B=plain # why`): after a quoted value's
 * closing quote, or after whitespace in an unquoted one — never inside quotes, so `"a # b"` keeps
 * its `#`. Without this, the comment became part of the value a capsule was given.
 */
export function parseEnvFile(text: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const rawLine of text.split(/\r?\n/)) {
    const line = rawLine.trim();
    if (line === '' || line.startsWith('#')) continue;
    const body = line.startsWith('export ') ? line.slice(7).trim() : line;
    const equals = body.indexOf('=');
    if (equals <= 0) continue;
    const key = body.slice(0, equals).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) continue;
    values[key] = envValue(body.slice(equals + 1).trim());
  }
  return values;
}

function envValue(raw: string): string {
  const quote = raw[0];
  if (quote === '"' || quote === "'") {
    // The closing quote is the first with nothing but a comment after it (`"say "hi""` keeps its
    // inner quotes, `"a" # it's "b"` is `a`); with none, the value is as written, quotes and all.
    for (let closing = raw.indexOf(quote, 1); closing > 0; closing = raw.indexOf(quote, closing + 1)) {
      if (/^\s*(#.*)?$/.test(raw.slice(closing + 1))) return raw.slice(1, closing);
    }
    return raw;
  }
  if (raw.startsWith('#')) return '';
  const comment = raw.search(/\s#/);
  return comment === -1 ? raw : raw.slice(0, comment).trimEnd();
}

/** The environment `mur run` works with: its own, plus the project's `.env` beneath it. */
export function environmentWithEnvFile(projectDir: string | undefined, env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const merged: Record<string, string> = {};
  if (projectDir) {
    const file = path.join(projectDir, '.env');
    let text: string | undefined;
    try {
      text = readSmallTextFileSync(file, ENV_FILE);
    } catch (error) {
      // A FIFO, a device, a file past the bound: refused by what it is (a FIFO waited for a writer for ever).
      if (error instanceof MurmurError) throw error;
      const code = (error as NodeJS.ErrnoException).code;
      // No .env: nothing to add. One that is there and cannot be read is said, not passed over:
      // the capsule would run without the values its author put there. A link to nothing is there.
      if (code === 'ENOENT') refuseDanglingLink(file, 'read', 'restore what the link names, remove the link, or run with --no-env-file');
      if (code !== 'ENOENT')
        throw new MurmurError('E-IO-002', `cannot read ${file}: ${code ?? (error as Error).message}`, {
          path: file,
          hint: code === 'EISDIR' ? '.env is a directory: move it, or run with --no-env-file' : `check that you may read ${file}, or run with --no-env-file`,
        });
    }
    if (text !== undefined) Object.assign(merged, parseEnvFile(text));
  }
  for (const [key, value] of Object.entries(env)) if (value !== undefined) merged[key] = value;
  return merged;
}
