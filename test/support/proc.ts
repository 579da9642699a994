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

/**
 * The state letter of each thread of `pid` (`R`, `S`, `T`…; none once it has gone): the field after
 * the command name in each `task/<tid>/stat`, found after its last `)` since the name may hold any.
 */
export function threadStates(pid: number): string[] {
  let threads: string[];
  try {
    threads = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  return threads.flatMap((thread) => {
    const stat = procFile(pid, `task/${thread}/stat`);
    return stat === undefined ? [] : [stat.charAt(stat.lastIndexOf(')') + 2)];
  });
}
