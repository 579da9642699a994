import { readFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The project's `.env` (upstream's rules): `KEY=VALUE` lines, `#` comments, surrounding quotes
 * stripped, and never overriding a variable the environment already sets.
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
    let value = body.slice(equals + 1).trim();
    if (value.length >= 2 && ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'")))) value = value.slice(1, -1);
    values[key] = value;
  }
  return values;
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
