// `npm run images`: builds every image docker-compose.yml uses, from this checkout, without a
// container registry. Run it after `npm ci && npm run build`.
//
//   murmur/base:bookworm       Debian bookworm with bubblewrap, nats-server and ca-certificates.
//                              Reused while its label records the same package list; otherwise
//                              built FROM debian:bookworm-slim when that can be pulled (or is
//                              already here), else from a root filesystem made by debootstrap
//                              (mirror: MURMUR_DEBIAN_MIRROR) and `docker import`ed.
//   murmur/runtime:<tag>       the base + the host's node binary + the app (tag: MURMUR_IMAGE_TAG,
//                              default latest), built by `docker build` from a context staged in
//                              .cache/images/runtime. The app goes in as ONE deterministic tar
//                              (sorted names, fixed mtime, owner 0), so an unchanged tree is a
//                              cache hit, and the legacy builder hashes one file, not thousands.
//
// The app is the root package.json, the runtime workspaces' package.json and built output, the
// default artifacts (drivers/dist/store) and their components transpiled (drivers/dist/transpiled),
// the docker/ scripts, and node_modules pruned to the production dependency closure of those
// workspaces, computed offline from package-lock.json.
//
// Options:
//   --stage-only     only write .cache/images/runtime/app.tar (no docker); the root Dockerfile
//                    uses this to get the same app layout on a machine with a registry
//   --rebuild-base   rebuild murmur/base:bookworm even when a matching one exists
//
// Environment: MURMUR_IMAGE_TAG, MURMUR_DEBIAN_MIRROR, MURMUR_PULL_TIMEOUT_SECS (default 15).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
  createWriteStream,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cacheRoot = path.join(root, '.cache', 'images');
const contextDir = path.join(cacheRoot, 'runtime');

const BASE_IMAGE = 'murmur/base:bookworm';
const BASE_PACKAGES = ['bubblewrap', 'ca-certificates', 'nats-server'];
const BASE_FROM = 'debian:bookworm-slim';
const RUNTIME_IMAGE = `murmur/runtime:${process.env.MURMUR_IMAGE_TAG?.trim() || 'latest'}`;
const MIRROR = process.env.MURMUR_DEBIAN_MIRROR?.trim() || 'http://deb.debian.org/debian';
const PULL_TIMEOUT_MS = (Number(process.env.MURMUR_PULL_TIMEOUT_SECS) || 15) * 1000;
const LABEL_PACKAGES = 'org.murmur.base.packages';
const LABEL_SOURCE = 'org.murmur.base.source';
const LABEL_CONTEXT = 'org.murmur.runtime.context';

/** The workspaces the runtime image runs; their package.json and what each ships. */
const RUNTIME_WORKSPACES = {
  wit: ['index.js', 'index.d.ts', 'murmur'],
  shared: ['dist'],
  'services/roost': ['dist'],
  'services/stager': ['dist'],
  'services/executor': ['dist'],
  'services/door': ['dist'],
  'services/watcher': ['dist', 'static'],
  cli: ['dist', 'bin'],
};
/**
 * Built files the image leaves out: mur's startup snapshot is for the node that built it (the
 * image's node is another file, so `cli/bin/mur` would not use it), and changes with every build.
 */
const BUILT_NOT_SHIPPED = new Set(['cli/dist/snapshot']);
/** What must exist before anything is built, each with the file that proves it. */
const BUILT_OUTPUTS = [
  'shared/dist/index.js',
  'services/roost/dist/index.js',
  'services/stager/dist/index.js',
  'services/executor/dist/index.js',
  'services/door/dist/index.js',
  'services/watcher/dist/index.js',
  'cli/dist/main.js',
  'drivers/dist/store',
  'drivers/dist/transpiled',
];

/**
 * Packages the walk does not enter although a runtime dependency lists them: jco lists its whole
 * toolchain, and the runtime uses only `transpile` (the stager) and preview2-shim (the executor).
 */
const NOT_SHIPPED = new Map([
  ['typescript', "jco's `types` command; type declarations are not needed at run time"],
  ['typescript-compiler-api', "the same (jco's alias of typescript)"],
  ['@bytecodealliance/componentize-js', 'builds components from JavaScript: guest-kit and the drivers build only'],
  ['@bytecodealliance/componentize-js-0-19-3', 'the same, older version'],
  ['componentize-qjs', "jco's componentize command"],
  ['rolldown', "jco's bundle command"],
  ['binaryen', "wasm-opt and wasm2js: jco's optimize and asm modes, which staging does not use"],
  ['@bytecodealliance/jco-std', "jco's run and serve commands"],
  // The capsule host's MCP tool server loads @modelcontextprotocol/sdk's server/index,
  // server/streamableHttp and types only; these serve the SDK's Express helpers, client and OAuth.
  ['express', "@modelcontextprotocol/sdk's Express helpers"],
  ['cors', "@modelcontextprotocol/sdk's Express helpers"],
  ['express-rate-limit', "@modelcontextprotocol/sdk's OAuth router"],
  ['raw-body', "@modelcontextprotocol/sdk's SSE server transport (and Express's body-parser)"],
  ['jose', "@modelcontextprotocol/sdk's OAuth client"],
  ['pkce-challenge', "@modelcontextprotocol/sdk's OAuth client"],
  ['eventsource', "@modelcontextprotocol/sdk's SSE client"],
  ['eventsource-parser', "@modelcontextprotocol/sdk's SSE client"],
]);
/** Development tools that must never be in the image; finding one in the closure is a bug. */
const NEVER_SHIPPED = ['typescript', 'vitest', 'vite', 'esbuild', 'tsx', 'testcontainers', '@a2a-js/sdk', 'express', '@bytecodealliance/componentize-js'];

/** 2000-01-01T00:00:00Z: every entry of app.tar carries this mtime. */
const FIXED_MTIME = 946684800;
const TAR_FORMAT = 'murmur-app-tar/2 (GNU tar)';

const args = new Set(process.argv.slice(2));
for (const arg of args) {
  if (!['--stage-only', '--rebuild-base', '--help', '-h'].includes(arg)) fail(`unknown option ${arg} (see --help)`);
}
if (args.has('--help') || args.has('-h')) {
  const header = readFileSync(fileURLToPath(import.meta.url), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('//'));
  process.stdout.write(`${header.map((line) => line.replace(/^\/\/ ?/, '')).join('\n')}\n`);
  process.exit(0);
}

const started = Date.now();

function log(message) {
  process.stdout.write(`[images] ${message}\n`);
}

function seconds(since) {
  return `${((Date.now() - since) / 1000).toFixed(1)}s`;
}

function fail(message) {
  process.stderr.write(`[images] error: ${message}\n`);
  process.exit(1);
}

function megabytes(bytes) {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/**
 * Runs a command. Output goes to `logFile` when given (and `onLine` sees each line), else it is
 * collected. Resolves with the exit code (null after a timeout) and the collected output.
 */
function run(command, commandArgs, options = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, commandArgs, {
      cwd: options.cwd ?? root,
      env: options.env ?? process.env,
      stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
    const logStream = options.logFile ? createWriteStream(options.logFile) : undefined;
    let stdout = '';
    let stderr = '';
    let pending = '';
    const onData = (chunk, which) => {
      const text = chunk.toString();
      if (which === 'stdout') stdout += text;
      else stderr += text;
      logStream?.write(chunk);
      if (options.onLine) {
        pending += text;
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) options.onLine(line.replace(/\r$/, ''));
      }
    };
    child.stdout.on('data', (chunk) => onData(chunk, 'stdout'));
    child.stderr.on('data', (chunk) => onData(chunk, 'stderr'));
    let timedOut = false;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          child.kill('SIGKILL');
        }, options.timeoutMs)
      : undefined;
    if (options.stdin) options.stdin(child.stdin);
    child.on('error', (error) => {
      stderr += error.message;
    });
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      if (pending && options.onLine) options.onLine(pending);
      logStream?.end();
      resolve({ code: timedOut ? null : code, timedOut, stdout, stderr });
    });
  });
}

async function mustRun(what, command, commandArgs, options = {}) {
  const result = await run(command, commandArgs, options);
  if (result.code !== 0) {
    const tail = (result.stderr || result.stdout).trim().split('\n').slice(-15).join('\n');
    fail(
      `${what} failed (${command} ${commandArgs.join(' ')}: ${result.timedOut ? 'timed out' : `exit ${result.code}`})${options.logFile ? `; full log: ${path.relative(root, options.logFile)}` : ''}\n${tail}`,
    );
  }
  return result;
}

/** `docker image inspect`, or undefined when there is no such image. */
async function inspectImage(ref) {
  const result = await run('docker', ['image', 'inspect', ref]);
  if (result.code !== 0) return undefined;
  return JSON.parse(result.stdout)[0];
}

// ---------------------------------------------------------------------------------------------
// Preconditions

function checkBuilt() {
  if (!existsSync(path.join(root, 'package-lock.json'))) fail('package-lock.json is missing');
  if (!existsSync(path.join(root, 'node_modules'))) fail('node_modules is missing: run `npm ci && npm run build` first');
  const missing = BUILT_OUTPUTS.filter((file) => !existsSync(path.join(root, file)));
  if (missing.length > 0) fail(`the build output is missing (${missing.join(', ')}): run \`npm run build\` first`);
  // A hint, not a refusal: sources edited after the last build.
  const stale = [];
  for (const workspace of Object.keys(RUNTIME_WORKSPACES)) {
    const buildInfo = path.join(root, workspace, 'tsconfig.tsbuildinfo');
    const sources = path.join(root, workspace, 'src');
    if (!existsSync(buildInfo) || !existsSync(sources)) continue;
    const built = statSync(buildInfo).mtimeMs;
    if (newestMtime(sources) > built) stale.push(workspace);
  }
  if (stale.length > 0) log(`warning: sources changed after the last build in ${stale.join(', ')}; run \`npm run build\` to ship them`);
}

function newestMtime(dir) {
  let newest = 0;
  for (const dirent of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, dirent.name);
    if (dirent.isDirectory()) newest = Math.max(newest, newestMtime(full));
    else newest = Math.max(newest, lstatSync(full).mtimeMs);
  }
  return newest;
}

async function checkDocker() {
  const result = await run('docker', ['version', '--format', '{{.Server.Version}}'], { timeoutMs: 20_000 });
  if (result.code !== 0) fail(`cannot reach the Docker daemon (docker version: ${(result.stderr || 'timed out').trim().split('\n')[0]}); is dockerd running?`);
  return result.stdout.trim();
}

// ---------------------------------------------------------------------------------------------
// The production dependency closure, from package-lock.json

/** The package name at a lockfile key: `node_modules/a/node_modules/@s/b` → `@s/b`. */
function nameOf(key) {
  const index = key.lastIndexOf('node_modules/');
  return index < 0 ? key : key.slice(index + 'node_modules/'.length);
}

/** Node's lookup: `<from>/node_modules/<name>`, then each enclosing node_modules, then the root's. */
function resolveInLock(packages, from, name) {
  let base = from;
  for (;;) {
    const candidate = base === '' ? `node_modules/${name}` : `${base}/node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (base === '') return undefined;
    const nested = base.lastIndexOf('/node_modules/');
    if (nested >= 0) base = base.slice(0, nested);
    else if (base.startsWith('node_modules/')) base = '';
    else base = path.posix.dirname(base) === '.' ? '' : path.posix.dirname(base);
  }
}

function productionClosure() {
  const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8'));
  if (!lock.packages || lock.lockfileVersion < 2) fail('package-lock.json has no "packages" section (lockfileVersion 2 or 3 is needed)');
  const packages = lock.packages;
  const workspaces = new Set(Object.keys(RUNTIME_WORKSPACES));
  const included = new Set();
  const links = new Map();
  const notShipped = new Set();
  const absentOptional = [];
  const queue = [];
  for (const workspace of workspaces) {
    if (!packages[workspace]) fail(`package-lock.json does not list the workspace ${workspace}: run \`npm install\``);
    queue.push(workspace);
  }
  const visit = (from, name, optional) => {
    if (NOT_SHIPPED.has(name)) {
      notShipped.add(name);
      return;
    }
    const key = resolveInLock(packages, from, name);
    if (key === undefined) {
      if (optional) return;
      fail(`package-lock.json cannot resolve ${name} (needed by ${from}): run \`npm install\``);
    }
    const entry = packages[key];
    if (entry.link) {
      if (!workspaces.has(entry.resolved))
        fail(
          `${from} depends on the workspace ${entry.resolved} (${name}), which the runtime image does not ship; add it to RUNTIME_WORKSPACES in scripts/images.mjs`,
        );
      links.set(key, entry.resolved);
      return;
    }
    if (included.has(key)) return;
    if (!existsSync(path.join(root, key, 'package.json'))) {
      if (optional || entry.optional) {
        absentOptional.push(key);
        return;
      }
      fail(`${key} is in package-lock.json but not installed: run \`npm ci\``);
    }
    included.add(key);
    queue.push(key);
  };
  while (queue.length > 0) {
    const key = queue.shift();
    const entry = packages[key];
    for (const name of Object.keys(entry.dependencies ?? {})) visit(key, name, false);
    for (const name of Object.keys(entry.optionalDependencies ?? {})) visit(key, name, true);
    for (const name of Object.keys(entry.peerDependencies ?? {})) visit(key, name, entry.peerDependenciesMeta?.[name]?.optional === true);
  }
  // Every runtime workspace is reachable as @murmur/<name> from anywhere in the tree.
  for (const [key, entry] of Object.entries(packages)) {
    if (entry.link && workspaces.has(entry.resolved)) links.set(key, entry.resolved);
  }
  const leaked = [...included].filter((key) => NEVER_SHIPPED.includes(nameOf(key)) || NEVER_SHIPPED.includes(packages[key].name));
  if (leaked.length > 0) fail(`the production closure contains development packages: ${leaked.join(', ')}`);
  return { packages: [...included].sort(), links, notShipped: [...notShipped].sort(), absentOptional };
}

// ---------------------------------------------------------------------------------------------
// The app's file list and the deterministic tar

function collectApp() {
  const entries = new Map();
  const addDirectoryChain = (name) => {
    for (let dir = path.posix.dirname(name); dir !== '.'; dir = path.posix.dirname(dir)) {
      if (entries.has(dir)) break;
      entries.set(dir, { name: dir, type: 'dir', mode: 0o755 });
    }
  };
  const add = (name, source, topLevelNodeModules = false) => {
    if (BUILT_NOT_SHIPPED.has(name)) return;
    const stat = lstatSync(source);
    addDirectoryChain(name);
    if (stat.isSymbolicLink()) {
      const target = readlinkSync(source);
      if (path.isAbsolute(target))
        fail(`${path.relative(root, source)} is a symbolic link to an absolute path (${target}), which would not exist in the image`);
      entries.set(name, { name, type: 'symlink', mode: 0o777, linkname: target });
    } else if (stat.isDirectory()) {
      entries.set(name, { name, type: 'dir', mode: 0o755 });
      for (const child of readdirSync(source).sort()) {
        if (topLevelNodeModules && child === 'node_modules') continue; // nested packages are entries of their own
        add(`${name}/${child}`, path.join(source, child));
      }
    } else if (stat.isFile()) {
      entries.set(name, { name, type: 'file', mode: stat.mode & 0o111 ? 0o755 : 0o644, size: stat.size, mtimeMs: stat.mtimeMs, source });
    }
    // sockets, fifos and devices are not shipped
  };
  const fromRoot = (relative, topLevelNodeModules = false) => add(relative, path.join(root, relative), topLevelNodeModules);

  fromRoot('package.json');
  for (const [workspace, shipped] of Object.entries(RUNTIME_WORKSPACES)) {
    fromRoot(`${workspace}/package.json`);
    for (const item of shipped) fromRoot(`${workspace}/${item}`);
  }
  fromRoot('drivers/dist/store');
  fromRoot('drivers/dist/transpiled');
  for (const file of readdirSync(path.join(root, 'docker')).sort()) {
    if (file.endsWith('.sh') || file.endsWith('.mjs')) fromRoot(`docker/${file}`);
  }
  const closure = productionClosure();
  for (const key of closure.packages) {
    const before = entries.size;
    fromRoot(key, true);
    if (entries.size === before) fail(`${key} is empty`);
  }
  for (const [key, target] of closure.links) {
    addDirectoryChain(key);
    entries.set(key, { name: key, type: 'symlink', mode: 0o777, linkname: path.posix.relative(path.posix.dirname(key), target) });
  }
  return { entries: [...entries.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)), closure };
}

function fingerprintOf(entries) {
  const hash = createHash('sha256').update(`${TAR_FORMAT}\n`);
  for (const entry of entries)
    hash.update(`${entry.name}\0${entry.type}\0${entry.mode}\0${entry.size ?? ''}\0${entry.mtimeMs ?? ''}\0${entry.linkname ?? ''}\n`);
  return hash.digest('hex');
}

/**
 * Writes the entries with GNU tar, deterministically: exactly the names given, in their (sorted)
 * order, no recursion, owner 0, one fixed mtime, modes normalised to 0755/0644, and the GNU format
 * (whose long-name records carry no access or change times, unlike PAX's).
 */
async function writeTar(entries, file) {
  const list = `${file}.list`;
  writeFileSync(list, entries.map((entry) => `${entry.name}\n`).join(''));
  try {
    await mustRun('tar of the app', 'tar', [
      '--create',
      '--file',
      file,
      '--directory',
      root,
      '--no-recursion',
      '--format=gnu',
      '--numeric-owner',
      '--owner=0',
      '--group=0',
      `--mtime=@${FIXED_MTIME}`,
      '--mode=u=rwX,go=rX',
      '--verbatim-files-from',
      '--files-from',
      list,
    ]);
  } finally {
    rmSync(list, { force: true });
  }
  const bytes = readFileSync(file);
  return { sha256: createHash('sha256').update(bytes).digest('hex'), bytes: bytes.length };
}

function readState(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Writes .cache/images/runtime/app.tar unless the same tree was packed last time. */
async function stageApp() {
  const since = Date.now();
  mkdirSync(contextDir, { recursive: true });
  const { entries, closure } = collectApp();
  const fingerprint = fingerprintOf(entries);
  const tarFile = path.join(contextDir, 'app.tar');
  const stateFile = path.join(cacheRoot, 'app-state.json');
  const files = entries.filter((entry) => entry.type === 'file');
  const total = files.reduce((sum, entry) => sum + entry.size, 0);
  const modulesBytes = files.filter((entry) => entry.name.startsWith('node_modules/')).reduce((sum, entry) => sum + entry.size, 0);
  const summary = `${files.length} files, ${megabytes(total)} (node_modules: ${closure.packages.length} packages, ${megabytes(modulesBytes)})`;
  const state = readState(stateFile);
  if (state?.fingerprint === fingerprint && existsSync(tarFile) && statSync(tarFile).size === state.bytes) {
    log(`app unchanged: ${summary}; reusing ${path.relative(root, tarFile)} (${seconds(since)})`);
    return state.sha256;
  }
  log(
    `production closure: ${closure.packages.length} packages; not shipped (jco toolchain): ${closure.notShipped.join(', ') || 'none'}; ${closure.absentOptional.length} optional packages for other platforms absent`,
  );
  const temporary = `${tarFile}.tmp`;
  const { sha256, bytes } = await writeTar(entries, temporary);
  renameSync(temporary, tarFile);
  writeFileSync(stateFile, `${JSON.stringify({ fingerprint, sha256, bytes }, null, 2)}\n`);
  log(`packed the app: ${summary} into ${path.relative(root, tarFile)} (${megabytes(bytes)}, sha256 ${sha256.slice(0, 12)}) (${seconds(since)})`);
  return sha256;
}

// ---------------------------------------------------------------------------------------------
// The base image

async function ensureBase(rebuild) {
  const wanted = BASE_PACKAGES.join(',');
  const existing = await inspectImage(BASE_IMAGE);
  const recorded = existing?.Config?.Labels?.[LABEL_PACKAGES];
  if (existing && recorded === wanted && !rebuild) {
    log(`${BASE_IMAGE}: reusing ${existing.Id.slice(7, 19)} (packages ${wanted}, from ${existing.Config.Labels[LABEL_SOURCE] ?? 'unknown'})`);
    return { id: existing.Id, replaced: undefined };
  }
  log(
    `${BASE_IMAGE}: ${existing ? (rebuild ? 'rebuilding (--rebuild-base)' : `rebuilding (its packages are ${recorded ?? 'not recorded'}, want ${wanted})`) : 'not present, building'}`,
  );
  const since = Date.now();
  if (await baseFromRegistry()) {
    log(`${BASE_IMAGE}: built FROM ${BASE_FROM} (${seconds(since)})`);
  } else {
    await baseFromDebootstrap();
    log(`${BASE_IMAGE}: built with debootstrap (${seconds(since)})`);
  }
  const built = await inspectImage(BASE_IMAGE);
  // The base this one replaces goes once nothing is built on it (after the runtime is rebuilt).
  return { id: built.Id, replaced: existing && existing.Id !== built.Id ? existing.Id : undefined };
}

/** FROM debian:bookworm-slim with apt-get; false when that image can be neither pulled nor found here. */
async function baseFromRegistry() {
  const since = Date.now();
  log(`trying docker pull ${BASE_FROM} (timeout ${PULL_TIMEOUT_MS / 1000}s)`);
  const pulled = await run('docker', ['pull', '--quiet', BASE_FROM], { timeoutMs: PULL_TIMEOUT_MS });
  if (pulled.code === 0) log(`pulled ${BASE_FROM} (${seconds(since)})`);
  else {
    const reason = pulled.timedOut ? 'timed out' : (pulled.stderr.trim().split('\n').pop() ?? `exit ${pulled.code}`);
    if (!(await inspectImage(BASE_FROM))) {
      log(`no registry: ${reason} (${seconds(since)}); falling back to debootstrap`);
      return false;
    }
    log(`cannot pull ${BASE_FROM} (${reason}); using the copy already here`);
  }
  const dir = path.join(cacheRoot, 'base');
  mkdirSync(dir, { recursive: true });
  copyFileSync(path.join(root, 'docker', 'base.Dockerfile'), path.join(dir, 'Dockerfile'));
  await dockerBuild(
    BASE_IMAGE,
    dir,
    [
      '--build-arg',
      `PACKAGES=${BASE_PACKAGES.join(' ')}`,
      '--label',
      `${LABEL_PACKAGES}=${BASE_PACKAGES.join(',')}`,
      '--label',
      `${LABEL_SOURCE}=${BASE_FROM}`,
    ],
    'base',
  );
  return true;
}

async function baseFromDebootstrap() {
  const sudo = process.getuid?.() === 0 ? [] : ['sudo'];
  const asRoot = (what, command, commandArgs, options) => mustRun(what, sudo[0] ?? command, sudo.length ? [command, ...commandArgs] : commandArgs, options);
  const found = await run('sh', ['-c', 'command -v debootstrap || test -x /usr/sbin/debootstrap']);
  if (found.code !== 0)
    fail('neither a registry nor debootstrap is available: install debootstrap (apt-get install debootstrap) or make debian:bookworm-slim pullable');
  const rootfs = mkdtempSync(path.join(os.tmpdir(), 'murmur-rootfs-'));
  const logFile = path.join(cacheRoot, 'debootstrap.log');
  try {
    let since = Date.now();
    log(`debootstrap --variant=minbase --include=${BASE_PACKAGES.join(',')} bookworm ${rootfs} ${MIRROR} (log: ${path.relative(root, logFile)})`);
    let retrieved = 0;
    await asRoot('debootstrap', 'debootstrap', ['--variant=minbase', `--include=${BASE_PACKAGES.join(',')}`, 'bookworm', rootfs, MIRROR], {
      logFile,
      env: { ...process.env, PATH: `${process.env.PATH}:/usr/sbin:/sbin` },
      onLine: (line) => {
        if (/^I: Retrieving [a-z0-9]/.test(line) && !/^I: Retrieving (InRelease|Release|Packages)/.test(line)) retrieved += 1;
        // Its phases, not one line per package.
        if (
          /^[WE]: /.test(line) ||
          /^I: (Resolving|Checking component|Installing core|Unpacking required|Configuring required|Unpacking the base|Configuring the base|Base system)/.test(
            line,
          )
        ) {
          log(`  debootstrap: ${line.slice(3)}${/Unpacking required/.test(line) ? ` (${retrieved} packages retrieved)` : ''}`);
        }
      },
    });
    log(`debootstrap finished (${seconds(since)})`);
    since = Date.now();
    // apt's package lists and caches, logs, and documentation other than the copyright files.
    const clean = [
      'cd "$1"',
      'rm -rf var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/lib/dpkg/*-old var/log/* usr/share/man/* usr/share/info/* usr/share/locale/*',
      'find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete',
      'find usr/share/doc -mindepth 1 -type d -empty -delete',
      'mkdir -p var/lib/apt/lists/partial var/cache/apt/archives/partial',
      'test -x usr/bin/setpriv || { echo "setpriv (util-linux) is missing from the root filesystem" >&2; exit 1; }',
    ].join(' && ');
    await asRoot('cleaning the root filesystem', 'sh', ['-c', clean, 'clean', rootfs]);
    const size = await run(sudo[0] ?? 'du', sudo.length ? ['du', '-sb', rootfs] : ['-sb', rootfs]);
    log(`cleaned the root filesystem: ${megabytes(Number(size.stdout.split(/\s/)[0]) || 0)} (${seconds(since)})`);
    since = Date.now();
    const changes = [
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      'ENV LANG=C.UTF-8',
      `LABEL ${LABEL_PACKAGES}=${BASE_PACKAGES.join(',')} ${LABEL_SOURCE}=debootstrap`,
      'CMD ["/bin/sh"]',
    ];
    const tarCommand = `set -o pipefail; ${sudo.join(' ')} tar --numeric-owner -C "$1" -c . | docker import ${changes.map((change) => `--change '${change}'`).join(' ')} - "$2"`;
    await mustRun('docker import', 'bash', ['-c', tarCommand, 'import', rootfs, BASE_IMAGE]);
    log(`docker import ${BASE_IMAGE} (${seconds(since)})`);
  } finally {
    await run(sudo[0] ?? 'rm', sudo.length ? ['rm', '-rf', rootfs] : ['-rf', rootfs]);
  }
}

// ---------------------------------------------------------------------------------------------
// The runtime image

async function dockerBuild(tag, dir, extraArgs, name) {
  const logFile = path.join(cacheRoot, `build-${name}.log`);
  await mustRun(`docker build of ${tag}`, 'docker', ['build', '--force-rm', '-t', tag, ...extraArgs, dir], {
    logFile,
    onLine: (line) => {
      if (/^Step \d+\/\d+ : /.test(line)) log(`  ${line.length > 110 ? `${line.slice(0, 107)}...` : line}`);
      else if (/^#\d+ \[.*\] /.test(line) || /^ ---> Using cache/.test(line)) log(`  ${line.trim()}`);
    },
  });
}

/** Copies a file into the context when its content (or, for the big node binary, size and mtime) differs. */
function stageFile(source, target, bySize = false) {
  const from = statSync(source);
  if (existsSync(target)) {
    const to = statSync(target);
    if (bySize ? to.size === from.size && Math.abs(to.mtimeMs - from.mtimeMs) < 1 : readFileSync(target).equals(readFileSync(source))) return false;
  }
  copyFileSync(source, `${target}.tmp`);
  if (bySize) utimesSync(`${target}.tmp`, from.atime, from.mtime);
  renameSync(`${target}.tmp`, target);
  return true;
}

function fileDigest(file) {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

async function ensureRuntime(baseId, appSha256) {
  const since = Date.now();
  const node = realpathSync(process.execPath);
  stageFile(path.join(root, 'docker', 'runtime.Dockerfile'), path.join(contextDir, 'Dockerfile'));
  stageFile(path.join(root, 'docker', 'prepare-image.sh'), path.join(contextDir, 'prepare-image.sh'));
  if (stageFile(node, path.join(contextDir, 'node'), true)) log(`copied ${node} (node ${process.version}, ${megabytes(statSync(node).size)}) into the context`);
  const nodeStat = statSync(path.join(contextDir, 'node'));
  const context = createHash('sha256')
    .update(`base ${baseId}\n`)
    .update(`Dockerfile ${fileDigest(path.join(contextDir, 'Dockerfile'))}\n`)
    .update(`prepare-image.sh ${fileDigest(path.join(contextDir, 'prepare-image.sh'))}\n`)
    .update(`node ${process.version} ${nodeStat.size} ${nodeStat.mtimeMs}\n`)
    .update(`app.tar ${appSha256}\n`)
    .digest('hex');
  const existing = await inspectImage(RUNTIME_IMAGE);
  if (existing?.Config?.Labels?.[LABEL_CONTEXT] === context) {
    log(`${RUNTIME_IMAGE}: up to date (${existing.Id.slice(7, 19)}, ${megabytes(existing.Size)}) (${seconds(since)})`);
    return;
  }
  log(`${RUNTIME_IMAGE}: docker build from ${path.relative(root, contextDir)}`);
  await dockerBuild(RUNTIME_IMAGE, contextDir, ['--label', `${LABEL_CONTEXT}=${context}`], 'runtime');
  const built = await inspectImage(RUNTIME_IMAGE);
  log(`${RUNTIME_IMAGE}: built ${built.Id.slice(7, 19)}, ${megabytes(built.Size)} (${seconds(since)})`);
  if (existing && existing.Id !== built.Id) {
    // The image this one replaces, now untagged (unless something else still uses it).
    const removed = await run('docker', ['image', 'rm', existing.Id]);
    if (removed.code === 0) log(`removed the previous ${RUNTIME_IMAGE} (${existing.Id.slice(7, 19)})`);
  }
  const verifySince = Date.now();
  await mustRun(`verifying ${RUNTIME_IMAGE}`, 'docker', ['run', '--rm', '--network', 'none', RUNTIME_IMAGE, 'node', 'docker/verify-image.mjs'], {
    onLine: (line) => line && log(`  verify: ${line}`),
  });
  log(`${RUNTIME_IMAGE}: verified (${seconds(verifySince)})`);
}

// ---------------------------------------------------------------------------------------------

checkBuilt();
if (args.has('--stage-only')) {
  await stageApp();
  log(`done in ${seconds(started)}`);
} else {
  const dockerVersion = await checkDocker();
  log(`docker engine ${dockerVersion}; images: ${BASE_IMAGE}, ${RUNTIME_IMAGE}`);
  mkdirSync(cacheRoot, { recursive: true });
  const base = await ensureBase(args.has('--rebuild-base'));
  const appSha256 = await stageApp();
  await ensureRuntime(base.id, appSha256);
  if (base.replaced && (await run('docker', ['image', 'rm', base.replaced])).code === 0)
    log(`removed the previous ${BASE_IMAGE} (${base.replaced.slice(7, 19)})`);
  log(`done in ${seconds(started)}`);
}
