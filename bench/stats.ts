/** The value at `fraction` (0.5 the median, 0.99 the p99) of `values`, nearest-rank. */
export function percentile(values: number[], fraction: number): number {
  const sorted = [...values].sort((left, right) => left - right);
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))] as number;
}
