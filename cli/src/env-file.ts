import { readFileSync } from 'node:fs';
import path from 'node:path';

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
    const closing = raw.indexOf(quote, 1);
    // Quoted, and nothing but a comment after the closing quote: the quoted text.
    if (closing > 0 && /^\s*(#.*)?$/.test(raw.slice(closing + 1))) return raw.slice(1, closing);
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
    try {
      Object.assign(merged, parseEnvFile(readFileSync(path.join(projectDir, '.env'), 'utf8')));
    } catch {
      // no .env: nothing to add
    }
  }
  for (const [key, value] of Object.entries(env)) if (value !== undefined) merged[key] = value;
  return merged;
}
