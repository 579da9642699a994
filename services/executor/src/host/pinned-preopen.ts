import { closeSync, constants, openSync, realpathSync } from 'node:fs';

/**
 * The preopens of this host's guests, each pinned as a descriptor of its directory the first time a
 * guest is given it, and held for the host's life (one session's): what the shim is given as the
 * preopen is `/proc/self/fd/<n>`, not the directory's path.
 *
 * The shim resolves its preopen's path again at every access. A scope is a directory inside the
 * workdir, which the session's own tools (a shell command, a WASM tool with the whole workdir) can
 * rename and replace with a link: followed by its path, a hook's or a tool's preopen — the capsule's
 * own, scoped — then led to `/proc/self`, whose `mem` holds what the host keeps from its guests (a
 * probe read the inference key there). A descriptor stays with the directory it was opened on,
 * wherever that is moved. The path is judged once, when pinned: it must resolve to itself, as the
 * executor made it (a link planted in its place, or above it, before the guest's first call is
 * refused). The descriptors are few (a preopen per scope) and opened in the host's main thread,
 * so a guest worker that is ended holds none.
 */
const pinned = new Map<string, string>();

export class UnpinnablePreopen extends Error {}

/** The preopen to give the shim for `dir` (an absolute path as the executor made it). */
export function pinnedPreopen(dir: string): string {
  const held = pinned.get(dir);
  if (held !== undefined) return held;
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch (error) {
    throw new UnpinnablePreopen(`the preopened directory '${dir}' cannot be opened: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  const through = `/proc/self/fd/${fd}`;
  let real: string | undefined;
  try {
    real = realpathSync(through);
  } catch {
    real = undefined;
  }
  if (real !== dir) {
    closeSync(fd);
    throw new UnpinnablePreopen(
      `the preopened directory '${dir}' resolves to '${real ?? '?'}': something in the sandbox replaced it, or a directory above it, with a link, so the guest is not given it`,
    );
  }
  pinned.set(dir, through);
  return through;
}
