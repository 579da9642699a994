/**
 * How much of its guests' output a capsule host holds at once: a guest that writes without pause
 * is slowed to the pace its output is carried away, rather than leaving it queued in the host.
 *
 * A guest's stdout and stderr are written in its worker thread and posted to the host's main
 * thread, which logs them and sends the capsule's own on to the executor. Posting never waits, so
 * a guest that writes in a loop outpaced the main thread: its writes queued between the threads
 * and in the channel's buffer, and a capsule host grew past a gigabyte in seconds (and its main
 * thread, behind that queue, ended the guest at its deadline seconds late). The gate is one shared
 * word: the bytes posted and not yet carried away (logged, and handed to the kernel on the way to
 * the executor). A write waits while the word is past `OUTPUT_IN_FLIGHT_BYTES`, as a write to a
 * full pipe would; the deadline that terminates the worker ends that wait with it.
 */

/** What one guest worker may have in flight at once: a few hundred writes of a busy guest. */
export const OUTPUT_IN_FLIGHT_BYTES = 1024 * 1024;

/** The word is an Int32: what one write counts for is capped well below its range. */
const MOST_COUNTED = 64 * 1024 * 1024;

/**
 * The shared word: one per guest worker, for the worker's life. What a worker ended mid-write left
 * counted on it (a post the main thread never read) ends with it, and never holds up another.
 */
export function createOutputGate(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(4));
}

/** What a write of `bytes` counts for on the gate; the worker and the main thread count alike. */
function countedBytes(bytes: number): number {
  return Math.min(bytes, MOST_COUNTED);
}

/** The worker's side: waits while too much is in flight, then counts the write it is about to post. */
export function enterOutputGate(gate: Int32Array, bytes: number): void {
  for (let inFlight = Atomics.load(gate, 0); inFlight > OUTPUT_IN_FLIGHT_BYTES; inFlight = Atomics.load(gate, 0)) {
    Atomics.wait(gate, 0, inFlight);
  }
  Atomics.add(gate, 0, countedBytes(bytes));
}

/** The main thread's side: a write has been carried away; a worker waiting on the gate looks again. */
export function leaveOutputGate(gate: Int32Array, bytes: number): void {
  Atomics.sub(gate, 0, countedBytes(bytes));
  Atomics.notify(gate, 0);
}
