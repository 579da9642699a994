/** How much of a buffer is worked on between two turns of the event loop. */
const SLICE_BYTES = 8 * 1024 * 1024;

/**
 * Hands `bytes` to `take` a slice at a time, letting the event loop go between slices: a hash or a
 * checksum of hundreds of MiB taken at once held it, and every other staging with it, for a second.
 */
export async function inSlices(bytes: Uint8Array, take: (slice: Uint8Array) => void): Promise<void> {
  for (let offset = 0; offset < bytes.byteLength; offset += SLICE_BYTES) {
    if (offset > 0) await new Promise((resolve) => setImmediate(resolve));
    take(bytes.subarray(offset, offset + SLICE_BYTES));
  }
}
