import { readFileSync } from 'node:fs';

/**
 * A process's start time as the kernel records it: field 22 of `/proc/<pid>/stat`, counted after
 * the last `)` because the command name in field 2 may itself contain spaces and parentheses.
 * Together with the pid it names one process, not whichever process holds that pid now.
 */
export function startTokenFromStat(stat: string): string | undefined {
  const close = stat.lastIndexOf(')');
  if (close === -1) return undefined;
  // Fields after the command name start at field 3 (state); field 22 is the 20th of them.
  const fields = stat
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  return fields[19];
}

export function processStartToken(pid: number): string | undefined {
  try {
    return startTokenFromStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}
