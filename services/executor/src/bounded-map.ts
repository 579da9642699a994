/**
 * The most entries the executor keeps in bookkeeping keyed by what a capsule host chose (a task's
 * id, a context's): an honest host names a handful at a time, and a host is the capsule's to
 * break — one naming endless tasks that never end would grow the executor's memory until it
 * failed every session on it.
 */
export const HOST_KEYS_REMEMBERED = 256;

/** Sets `key` as the newest entry, forgetting the oldest once there are more than `limit`. */
export function rememberBounded<V>(map: Map<string, V>, key: string, value: V, limit = HOST_KEYS_REMEMBERED): void {
  map.delete(key);
  map.set(key, value);
  for (const oldest of map.keys()) {
    if (map.size <= limit) break;
    map.delete(oldest);
  }
}
