import { spawnSync } from 'node:child_process';

/** The value at `fraction` (0.5 the median, 0.99 the p99) of `values`, nearest-rank. */
export function percentile(values: number[], fraction: number): number {
  const sorted = [...values].sort((left, right) => left - right);
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))] as number;
}

/**
 * The machine's speed this hour, as one figure: the median wall time of a bare `node -e 0`. The
 * machines these benches run on vary by half between hours, so a figure is read beside this one.
 * It runs with PATH alone, as the processes the benches time do: a variable such as
 * `NODE_EXTRA_CA_CERTS`, set in some shells, makes node read and parse certificates before its
 * first line (~30–50 ms here), which would say the machine is slower than what is measured.
 */
export function nodeStartMs(runs = 11): number {
  const times: number[] = [];
  for (let run = 0; run < runs; run += 1) {
    const started = performance.now();
    spawnSync(process.execPath, ['-e', '0'], { env: { PATH: process.env.PATH ?? '' } });
    times.push(performance.now() - started);
  }
  return percentile(times, 0.5);
}
