import { setFlagsFromString } from 'node:v8';

/**
 * When V8 compiles a pooled host's JavaScript: as each module loads, or at each function's first
 * call (V8's default, `lazy`). A function first called during a launch is compiled during it, and
 * a launch's path is all first calls — the host's run path, the guest worker's, the component's
 * glue — so a pooled host, which waits for its session with nothing to do, compiles them ahead:
 * it boots with `--no-lazy` (given by a refilling pool), and preloads its expected component's glue in an
 * eager window. Worth ~4 ms of a launch's ~20 to the guest's first instruction, on these machines.
 *
 * Everything else is loaded lazily: an agent's modules are mostly code no session runs, and
 * compiled whole they would stay in every idle session (~14 MB). Once the session starts the host
 * compiles lazily for good. The flag is the process's, every thread's: a window is opened only
 * while nothing else loads. A host booted without `--no-lazy` (a fresh one, `mur run`'s warm one,
 * whose boot is on its launch's way) is never eager.
 */

const pooled = process.execArgv.includes('--no-lazy');
let eager = pooled;
let openWindows = 0;
let started = false;

function compileEagerly(next: boolean): void {
  if (next === eager) return;
  eager = next;
  setFlagsFromString(next ? '--no-lazy' : '--lazy');
}

/** Loads what only some sessions run (an agent's modules) lazily; a pooled host's boot ends here if it had not. */
export function loadLazily<T>(load: () => Promise<T>): Promise<T> {
  if (openWindows === 0) compileEagerly(false);
  return load();
}

/** Compiles eagerly until `loading` settles (a pooled host preloading its expected glue), unless its session has started. */
export function eagerWhile(loading: Promise<unknown>): void {
  if (!pooled || started) return;
  openWindows += 1;
  compileEagerly(true);
  void loading
    .catch(() => {})
    .then(() => {
      openWindows -= 1;
      if (openWindows === 0) compileEagerly(false);
    });
}

/** The session has started: from now on the host compiles lazily, whatever window was open. */
export function compileLazilyForGood(): void {
  started = true;
  compileEagerly(false);
}
