/**
 * Why a `fetch` could not get a response, in the words an operator can act on: undici's cause
 * (`ECONNREFUSED`, `ENOTFOUND`, …) rather than its generic "fetch failed".
 */
export function fetchFailureReason(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}
