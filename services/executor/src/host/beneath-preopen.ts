import fs, { constants } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import path from 'node:path';

/**
 * Every path a guest's `wasi:filesystem` touches is held beneath the guest's preopen when the
 * system acts on it, not only when preview2-shim checked it.
 *
 * The shim checks a path's components one by one (no `..` above the preopen, no link leading out
 * of it) and then hands the whole path to `node:fs`, which the kernel walks again. Between the two,
 * a tool of the session, or a second instance of the guest, can rename a directory the shim has
 * just judged and leave a link in its place (to `/proc/self`, or `../..` to the rest of the
 * workdir): the guest then opens the host's own `mem`, lists its descriptors, or removes and
 * renames entries outside the scope it was given. So the directory a path names its entry in is
 * opened first and judged by where it really is (its descriptor's link in `/proc/self/fd`, beneath
 * the preopen's, read then), and the entry is reached through that descriptor, never through a link
 * in its last component: the shim has already followed every link it was asked to, so one found
 * there now was planted since. A raced path fails `EPERM` (the guest sees `not-permitted`) or finds
 * the link itself; it never reaches outside.
 *
 * The shim calls `node:fs` by name at each call, so while one of its filesystem methods runs in
 * this worker (`holdBeneathPreopen` wraps them), the functions it uses are these; at any other
 * time they are node's own, for the worker's own code. The real ones are taken here, before.
 */

const real = {
  closeSync: fs.closeSync,
  fstatSync: fs.fstatSync,
  linkSync: fs.linkSync,
  lutimesSync: fs.lutimesSync,
  mkdirSync: fs.mkdirSync,
  opendirSync: fs.opendirSync,
  openSync: fs.openSync,
  readlinkSync: fs.readlinkSync,
  realpathNative: fs.realpathSync.native,
  renameSync: fs.renameSync,
  rmdirSync: fs.rmdirSync,
  symlinkSync: fs.symlinkSync,
  unlinkSync: fs.unlinkSync,
  utimesSync: fs.utimesSync,
};

/**
 * The directory this worker's guest was given as its preopen (`imports.ts` names it when it makes
 * the guest's filesystem). Unset, as for a guest with no filesystem, nothing is reached.
 */
let preopen: string | undefined;

/** How deep this thread is in the shim's filesystem methods: above 0, `node:fs` holds paths beneath the preopen. */
let inShim = 0;

export class OutsidePreopen extends Error {
  readonly code = 'EPERM';
  constructor(what: string) {
    super(`'${what}' is not beneath the guest's preopen: something in the sandbox moved it while the guest used it`);
  }
}

/** Where the preopen is now (a real path): it can be moved, with its descriptor. */
function preopenNow(what: string): { root: string; real: string } {
  if (preopen === undefined) throw new OutsidePreopen(what);
  try {
    return { root: preopen, real: real.realpathNative(preopen) };
  } catch {
    throw new OutsidePreopen(what);
  }
}

/** Whether descriptor `fd` is directory `dir` itself (`exact`) or one beneath it, now. */
function isBeneathNow(fd: number, dir: string, exact: boolean): boolean {
  let where: string;
  try {
    where = real.readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return false;
  }
  return where === dir || (!exact && where.startsWith(dir === '/' ? '/' : `${dir}/`));
}

/**
 * Calls `act` with a path to `entry` that the kernel resolves through a descriptor of its directory,
 * judged beneath the preopen; the preopen itself is reached through the path it was given as (a
 * pinned descriptor's, `pinned-preopen.ts`). A trailing `/` is kept, for the calls that mean it.
 */
function throughParent<T>(entry: string, act: (through: string) => T): T {
  const { root, real: rootNow } = preopenNow(entry);
  const slash = entry.length > 1 && entry.endsWith('/') ? '/' : '';
  const bare = slash ? entry.slice(0, -1) : entry;
  // As `.` of the directory, so that no call takes the preopen itself for an entry to remove or replace.
  if (bare === rootNow) return act(`${root}/.`);
  const dirFd = real.openSync(path.dirname(bare), constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    if (!isBeneathNow(dirFd, rootNow, false)) throw new OutsidePreopen(entry);
    return act(`/proc/self/fd/${dirFd}/${path.basename(bare)}${slash}`);
  } finally {
    real.closeSync(dirFd);
  }
}

/**
 * Opens `file`, a path the shim resolved within the preopen, only if it still lies there (the shim's
 * open reaches the system through `in-thread-io.ts`, which calls this): through its directory's
 * descriptor and never through a link in its last component, so nothing outside the preopen is
 * opened, created or truncated.
 */
export function openBeneath(file: string, flags: number): number {
  const { real: rootNow } = preopenNow(file);
  if (file === rootNow) {
    // The preopen itself (`.`): it has no parent within the preopen, so it is judged once open.
    const fd = real.openSync(`${preopen}/.`, flags);
    if (!isBeneathNow(fd, rootNow, true)) {
      real.closeSync(fd);
      throw new OutsidePreopen(file);
    }
    return fd;
  }
  return throughParent(file, (through) => real.openSync(through, flags | constants.O_NOFOLLOW));
}

/** Linux's `O_PATH` (the same on x86_64 and aarch64), which node does not name: a descriptor to stat, opening nothing. */
const O_PATH = 0o10000000;

/**
 * The metadata of the entry `through` names, never of what a link there leads to: a trailing `/`
 * (which makes the kernel follow a last link) asks for a directory instead.
 */
function statOf(through: string, options?: fs.StatSyncOptions): fs.Stats | fs.BigIntStats {
  const directory = through.length > 1 && through.endsWith('/');
  const fd = real.openSync(directory ? through.slice(0, -1) : through, O_PATH | constants.O_NOFOLLOW | (directory ? constants.O_DIRECTORY : 0));
  try {
    return real.fstatSync(fd, options as fs.StatOptions & { bigint: false });
  } finally {
    real.closeSync(fd);
  }
}

type PathArgs<F> = F extends (path: fs.PathLike, ...rest: infer R) => infer T ? { rest: R; result: T } : never;

/**
 * What the shim is given for each `node:fs` call that takes a path. Those that would follow a link
 * in the last component (`stat`, `utimes`, `opendir`) do not: the shim resolved it already, and one
 * there now was planted since, so its own metadata is what the guest gets, or its open fails.
 */
const beneath = {
  lstatSync: (file: string, options?: fs.StatSyncOptions) => throughParent(file, (through) => statOf(through, options)),
  statSync: (file: string, options?: fs.StatSyncOptions) => throughParent(file, (through) => statOf(through, options)),
  readlinkSync: (file: string, ...rest: PathArgs<typeof fs.readlinkSync>['rest']) => throughParent(file, (through) => real.readlinkSync(through, ...rest)),
  mkdirSync: (dir: string, ...rest: PathArgs<typeof fs.mkdirSync>['rest']) => throughParent(dir, (through) => real.mkdirSync(through, ...rest)),
  rmdirSync: (dir: string) => throughParent(dir, (through) => real.rmdirSync(through)),
  unlinkSync: (file: string) => throughParent(file, (through) => real.unlinkSync(through)),
  symlinkSync: (target: string, file: string) => throughParent(file, (through) => real.symlinkSync(target, through)),
  lutimesSync: (file: string, atime: fs.TimeLike, mtime: fs.TimeLike) => throughParent(file, (through) => real.lutimesSync(through, atime, mtime)),
  utimesSync: (file: string, atime: fs.TimeLike, mtime: fs.TimeLike) => throughParent(file, (through) => real.lutimesSync(through, atime, mtime)),
  renameSync: (from: string, to: string) => throughParent(from, (fromThrough) => throughParent(to, (toThrough) => real.renameSync(fromThrough, toThrough))),
  linkSync: (existing: string, made: string) =>
    throughParent(existing, (existingThrough) => throughParent(made, (madeThrough) => real.linkSync(existingThrough, madeThrough))),
  opendirSync: (dir: string, ...rest: PathArgs<typeof fs.opendirSync>['rest']) =>
    throughParent(dir, (through) => {
      const fd = real.openSync(through, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
      try {
        return real.opendirSync(`/proc/self/fd/${fd}`, ...rest);
      } finally {
        real.closeSync(fd);
      }
    }),
};

let installed = false;

/** Set on a `Descriptor` prototype whose methods are held: a second guest's imports in the worker find it done. */
const HELD = Symbol('murmur.heldBeneathPreopen');

/** `node:fs`'s function `name`: node's own, or, inside one of the shim's filesystem methods, `beneath`'s. */
function installDispatchers(): void {
  if (installed) return;
  installed = true;
  const mutable = fs as unknown as Record<string, unknown>;
  for (const [name, held] of Object.entries(beneath) as Array<[keyof typeof beneath, (...args: unknown[]) => unknown]>) {
    const own = mutable[name] as (...args: unknown[]) => unknown;
    const dispatcher = function dispatch(this: unknown, ...args: unknown[]): unknown {
      return inShim > 0 ? held(...args) : own.apply(this, args);
    };
    // `realpathSync.native` and the like hang off some of these; the worker's own code keeps them.
    Object.assign(dispatcher, own);
    mutable[name] = dispatcher;
  }
  // The shim, loaded as ES modules outside the bundle, sees `node:fs` through its named exports.
  syncBuiltinESMExports();
}

/**
 * Holds the shim's filesystem (its `Descriptor` class, and the directory streams it makes) beneath
 * `dir` from now on in this worker, which runs one guest: every method of the class, while it runs,
 * reaches the system only through `beneath`.
 */
export function holdBeneathPreopen(descriptor: { prototype: object }, dir: string | undefined): void {
  confineOpensTo(dir);
  installDispatchers();
  const prototype = descriptor.prototype as Record<string | symbol, unknown>;
  if (prototype[HELD]) return;
  prototype[HELD] = true;
  for (const name of Object.getOwnPropertyNames(prototype)) {
    const method = Object.getOwnPropertyDescriptor(prototype, name)?.value;
    if (name === 'constructor' || typeof method !== 'function') continue;
    prototype[name] = function heldBeneath(this: unknown, ...args: unknown[]): unknown {
      // A backslash is a byte of a name on Linux, as wasmtime takes it; the shim turns it into a
      // separator, and `a\b.txt` was written as `a/b.txt`. Refused (`invalid`), never written
      // somewhere the guest did not name. (Every string a Descriptor method takes is a path.)
      if (args.some((arg) => typeof arg === 'string' && arg.includes('\\'))) throw 'invalid';
      inShim += 1;
      try {
        return method.apply(this, args);
      } finally {
        inShim -= 1;
      }
    };
  }
}

/** Sets the preopen without a filesystem to hold (a guest given none): nothing is reached. */
export function confineOpensTo(dir: string | undefined): void {
  preopen = dir === '' ? undefined : dir;
}
