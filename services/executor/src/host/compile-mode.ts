import { setFlagsFromString } from 'node:v8';

/**
 * When V8 compiles a pooled host's JavaScript: as each module loads, or at each function's first
 * call (V8's default, `lazy`). A function first called during a launch is compiled during it, and
 * a launch's path is all first calls — the host's run path, the guest worker's, the component's
 * glue — so a pooled host, which waits for its session with nothing to do, compiles them ahead:
 * it boots with `--no-lazy` (given by a refilling pool), and has its worker preload the expected
 * capsule's glue in an eager window. Worth ~4 ms of a launch's ~20 to the guest's first
 * instruction, on these machines.
 *
 * Everything else loads lazily: an agent's modules are mostly code no session runs, and compiled
 * whole they would stay in every idle session (~14 MB), so an agent's driver glue is preloaded
 * lazily too (with its code cache), beside them. Once the session starts the host compiles lazily
 * for good. The flag is the process's, every thread's, so a window never overlaps a lazy load; a
 * function another thread is compiling as the flag changes is compiled either way, which only
 * decides when. A host booted without `--no-lazy` (a fresh one, `mur run`'s warm one, whose boot
 * is on its launch's way) is never eager.
 */
const pooled = process.execArgv.includes('--no-lazy');
let eager = pooled;
let started = false;
/** The one window open, if any: a later one replaces it, and only its own end closes it. */
let window: object | undefined;
/** How many lazy loads are under way: no window opens meanwhile. */
let lazyLoads = 0;

function compileEagerly(next: boolean): void {
  if (next === eager) return;
  eager = next;
  setFlagsFromString(next ? '--no-lazy' : '--lazy');
}

/**
 * Loads what only some sessions run (an agent's modules) lazily: an open window is shut first
 * (what it was loading goes on, compiled lazily), and none opens until the load is done. A pooled
 * host's eager boot ends here if it had not ended.
 */
export function loadLazily<T>(load: () => Promise<T>): Promise<T> {
  window = undefined;
  compileEagerly(false);
  lazyLoads += 1;
  const loading = load();
  const done = (): void => {
    lazyLoads -= 1;
  };
  void loading.then(done, done);
  return loading;
}

/**
 * Compiles eagerly until `loading` settles (a pooled host preloading its expected glue), unless
 * its session has started or a lazy load is under way. A window opened after it replaces it.
 */
export function eagerWhile(loading: Promise<unknown>): void {
  if (!pooled || started || lazyLoads > 0) return;
  const mine = {};
  window = mine;
  compileEagerly(true);
  const close = (): void => {
    if (window !== mine) return;
    window = undefined;
    compileEagerly(false);
  };
  void loading.then(close, close);
}

/** The session has started: from now on the host compiles lazily, whatever window was open. */
export function compileLazilyForGood(): void {
  started = true;
  window = undefined;
  compileEagerly(false);
}
