import { readFileSync, readdirSync } from 'node:fs';

/** The pid of every process there is now, as `/proc` lists them. */
export function processIds(): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number);
}

/** `/proc/<pid>/<file>`, or undefined when the process has gone or is not ours to read. */
export function procFile(pid: number, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined;
  }
}
