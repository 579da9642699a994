/**
 * Why a `fetch` could not get a response, in the words an operator can act on: undici's cause
 * (`ECONNREFUSED`, `ENOTFOUND`, …) rather than its generic "fetch failed".
 */
export function fetchFailureReason(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  // undici's own word for a port it will not connect to says neither which nor why.
  if (cause?.message === 'bad port') return `it is ${FETCH_BLOCKED_PORT}`;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}

/** What a port in `FETCH_BLOCKED_PORTS` is, in the words every refusal of one uses. */
export const FETCH_BLOCKED_PORT = "a port fetch clients will not connect to (the Fetch standard's blocked ports)";

/**
 * The ports the Fetch standard forbids a client to connect to (fetch.spec.whatwg.org, "port
 * blocking"): browsers and Node's `fetch` refuse them whatever answers there. A door on one could
 * be reached by curl, but not by a browser, a JavaScript A2A client, or `mur`'s own calls to a door
 * (`mur watch`, `mur ps`, a child's completion), so a session's door is never put on one.
 */
export const FETCH_BLOCKED_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137,
  139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049,
  3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);
