import { existsSync, promises as fs, lstatSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SetFile, type StagedArtifact, type StagedPlan, hasControlCharacter, parseYamlSource } from '@murmur/shared';
import { type BlobCache, appendBeneath, copyFileBeneath, mkdirBeneath, refuseDanglingLink, writeFileBeneath } from '@murmur/shared/node';
import type { LocalBundles } from './bundles.js';
import type { HostTool } from './host/protocol.js';
import { shellToolDescription } from './host/subprocess.js';
import { traceFileIn } from './records.js';

/**
 * A session's directories, made from the staged plan on the machine that runs it (upstream §5).
 *
 * The **accessible workdir** is what the capsule sees as `.`: `--workdir` when given (it must
 * exist), else `<base>/workdir/<session>`. The **session directory** holds the runtime's records
 * for the session — `trace.jsonl`, `logs/`, `out/`, `tools/` — and is the accessible workdir
 * itself, or `<workdir>/.murmur/<session>` when the user chose the workdir, so a shared directory
 * keeps each session's records apart.
 *
 * The workdir is the guest's to write, and a workdir given again (`--workdir`) holds whatever an
 * earlier guest left there: every directory and file made here is made beneath the accessible
 * workdir's root without following a link (`@murmur/shared/node`'s `beneath`): a link the guest
 * planted in place of a file written here (`tools/<name>/skill.md`, `task.md`) is replaced, never
 * followed, and one in place of a directory on the way fails the write (`E-SES-004`) instead of
 * landing outside. The same holds for a tool pulled while the session runs, which is written where
 * the guest has been writing all along.
 */
export interface SessionPaths {
  accessible: string;
  sessionDir: string;
  /** The capsule's one preopen: the accessible workdir narrowed by `filesystem.scope`. */
  preopen: string;
}

export interface WorkdirRequest {
  sessionId: string;
  /** A directory that must exist (`--workdir`, or a delegated child's under its parent's `children/`). */
  workdir?: string | undefined;
  defaultBase: string;
  task?: string | undefined;
  /**
   * The workdir is one the executor made inside another guest's workdir (a delegated child's,
   * under its parent's `children/`): it must resolve to itself, since that guest could put a link
   * in its place where no bubblewrap binds `children/` read-only to it (`assertWorkdirUnmoved`).
   */
  madeInGuestTree?: boolean;
  /**
   * The executor's own state (`$MURMUR_HOME`, its cache, where its sessions get their directories):
   * a directory a launcher names (`workdir`, or a `defaultBase` of its own) may neither lie in it nor
   * hold it (`assertApartFromExecutor`). Absent: nothing is checked (the executor's own default).
   */
  executorState?: readonly string[] | undefined;
}

/**
 * Refuses a workdir a launcher named that lies in the executor's own state or holds it. A workdir
 * is bound writable into the capsule's sandbox: one inside the cache let a capsule rewrite a
 * transpiled component's `component.js` there, which every later session of that component ran
 * in its host (a probe made one run of another user's capsule throw); one that holds the
 * executor's home gives the capsule all of it — other sessions' workdirs, the running records.
 * A launcher over the bus is not the executor's operator, so neither is its launcher's to choose.
 */
export function assertApartFromExecutor(workdir: string, executorState: readonly string[], named: string): void {
  const dir = resolvedThroughLinks(workdir);
  for (const state of executorState.map(resolvedThroughLinks)) {
    if (liesWithin(dir, state) || liesWithin(state, dir))
      throw new MurmurError(
        'E-IO-002',
        `${named} '${dir}' ${liesWithin(dir, state) ? 'lies in' : 'holds'} the executor's own state (${state}): a capsule's workdir is bound writable into its sandbox, and could rewrite what other sessions run`,
        { path: dir, hint: "name a directory apart from the executor's MURMUR_HOME and cache, or leave out --workdir for a fresh one per session" },
      );
  }
}

/**
 * The machine's own directories, which no launcher may make a capsule's workdir. `/dev`, `/proc`
 * and `/sys` are a sandbox's own (it mounts fresh ones), so a workdir there cannot even be bound:
 * a launch failed with bubblewrap's `Can't mkdir … Read-only file system` in the host's log. The
 * rest (and `/` itself) would be bound writable into the sandbox, and an executor runs as root
 * here: a launcher, over the bus a stranger to the machine, would give a capsule `/etc`.
 */
const SYSTEM_DIRECTORIES_REFUSED = [
  '/dev',
  '/proc',
  '/sys',
  '/etc',
  '/boot',
  '/usr',
  '/bin',
  '/sbin',
  '/lib',
  '/lib32',
  '/lib64',
  '/libx32',
  // Root's home (its `.ssh`), the machine's state (`/var/spool/cron`) and runtime sockets, and
  // what is installed beside the distribution's own.
  '/root',
  '/var',
  '/run',
  '/opt',
  '/srv',
  '/snap',
  '/nix',
];
/** Within those, the places any user keeps scratch files: `/var/tmp`, and a user's own runtime directory. */
const SCRATCH_DIRECTORIES_ALLOWED = ['/var/tmp', '/run/user'];

/**
 * `dir` with every link in it resolved, even where its last parts do not exist yet: the deepest
 * part that exists is resolved, and the rest laid on it (a workdir under `project/link/new`, with
 * `link` pointing at `/etc`, lies in `/etc`).
 */
export function resolvedThroughLinks(dir: string): string {
  const missing: string[] = [];
  let current = path.resolve(dir);
  for (;;) {
    try {
      return path.join(realpathSync(current), ...missing.reverse());
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return path.resolve(dir);
      missing.push(path.basename(current));
      current = parent;
    }
  }
}

/** Whether `inner` is `outer` or lies below it; both resolved. */
export function liesWithin(inner: string, outer: string): boolean {
  return inner === outer || inner.startsWith(outer.endsWith('/') ? outer : `${outer}/`);
}

/** Refuses a workdir a launcher named that is `/` or lies in one of the machine's own directories. */
export function assertNoSystemDirectory(workdir: string, named: string): void {
  const dir = resolvedThroughLinks(workdir);
  const within = (root: string): boolean => liesWithin(dir, root);
  const system = dir === '/' ? '/' : SCRATCH_DIRECTORIES_ALLOWED.some(within) ? undefined : SYSTEM_DIRECTORIES_REFUSED.find(within);
  if (system === undefined) return;
  throw new MurmurError(
    'E-IO-002',
    `${named} '${dir}' ${system === '/' ? 'is the root of the machine' : `lies in ${system}, one of the machine's own directories`}: a capsule's workdir is bound writable into its sandbox${['/dev', '/proc', '/sys'].includes(system) ? `, and every sandbox mounts its own ${system}` : ''}`,
    { path: dir, hint: 'name a directory of your own (under your home, or /tmp), or leave out --workdir for a fresh one per session' },
  );
}

/**
 * Refuses a workdir that no longer resolves to the path the executor made: a parent's guest that
 * swapped its child's directory for a link (to `/etc`, say) would otherwise have the child's
 * records written, and its sandbox's writable bind made, there.
 */
export function assertWorkdirUnmoved(workdir: string): void {
  let real: string | undefined;
  try {
    real = realpathSync(workdir);
  } catch {
    real = undefined;
  }
  if (real !== path.resolve(workdir)) {
    throw new MurmurError(
      'E-SES-004',
      `refused the workdir ${workdir}: it ${real === undefined ? 'is gone' : `now resolves to ${real}`}, so something replaced it with a link`,
      {
        path: workdir,
        hint: "a delegated child's directory lies in its parent's workdir, which the parent's guest can write; launch the child again",
      },
    );
  }
}

/** Where an artifact's files come from on this machine: blobs verified into the local cache. */
export interface ArtifactFiles {
  blobs: BlobCache;
  bundles: LocalBundles;
}

/**
 * `<root>/<relative>`, refusing anything that would land outside `root` once symlinks are
 * resolved. A directory that is missing is made without following a link on the way; one that is
 * there (a link of the user's own within the workdir included) is taken as it resolves.
 */
async function inside(root: string, relative: string, what: string): Promise<string> {
  const target = path.resolve(root, relative);
  const lexical = path.relative(root, target);
  if (lexical.startsWith('..') || path.isAbsolute(lexical)) {
    throw new MurmurError('E-CAP-002', `${what} '${relative}' is outside the workdir ${root}`, {
      hint: "use a path relative to the workdir, such as 'data' or '.'",
    });
  }
  if (lexical !== '' && !existsSync(target)) mkdirBeneath(root, target);
  const real = realpathSync(target);
  const realRoot = realpathSync(root);
  if (real !== realRoot && !real.startsWith(`${realRoot}${path.sep}`)) {
    throw new MurmurError('E-CAP-002', `${what} '${relative}' resolves to ${real}, outside the workdir ${realRoot}`, {
      hint: 'a symlink in the workdir points outside it; remove it or choose another scope',
    });
  }
  return real;
}

export function shellToolManifest(binary: string): string {
  return [
    `name: ${binary}`,
    'version: 0.0.0',
    'runtime: tool',
    'implementation: native',
    `description: ${JSON.stringify(shellToolDescription(binary))}`,
    'input_schema:',
    '  type: object',
    '  properties:',
    '    command:',
    '      type: string',
    '  required: [command]',
    '',
  ].join('\n');
}

/**
 * A workdir whose path holds a control character is refused before anything is made in it: the
 * sandbox's rules name it one path a line, so its launch would be refused anyway, after its
 * session's directories were made (in a `--workdir`, the user's own).
 */
function refuseUnnameableWorkdir(request: WorkdirRequest): void {
  const chosen = request.workdir !== undefined;
  const where = chosen ? path.resolve(request.workdir as string) : path.join(path.resolve(request.defaultBase), 'workdir');
  if (!hasControlCharacter(where)) return;
  throw new MurmurError(
    'E-IO-003',
    `the workdir ${JSON.stringify(where.slice(0, 200))} holds a control character (a line break, a tab), which the sandbox's rules cannot name; nothing was made or run`,
    {
      path: where.slice(0, 200),
      hint: chosen
        ? 'pass --workdir a path without control characters'
        : 'move the capsule to a path without control characters, or pass --workdir such a path',
    },
  );
}

/** `<base>/workdir` as a link to nothing (a volume not mounted, a directory moved) is said to be one: mkdir said ENOENT or ENOTDIR of it. */
function refuseDanglingWorkdirs(dir: string): void {
  if (!existsSync(dir))
    refuseDanglingLink(dir, 'write', 'make the directory it leads to, or remove the link; mur run --workdir <dir> runs in another directory');
}

/** A workdir, or a base, the launcher chose: apart from the executor's state and the machine's own directories. */
function assertLaunchersChoice(workdir: string, executorState: readonly string[]): void {
  assertNoSystemDirectory(workdir, 'workdir');
  assertApartFromExecutor(workdir, executorState, 'workdir');
}

export async function materialiseWorkdir(plan: StagedPlan, request: WorkdirRequest, files: ArtifactFiles): Promise<{ paths: SessionPaths; tools: HostTool[] }> {
  refuseUnnameableWorkdir(request);
  let accessible: string;
  if (request.workdir !== undefined) {
    accessible = path.resolve(request.workdir);
    const stat = await fs.stat(accessible).catch(() => undefined);
    if (!stat?.isDirectory()) {
      throw new MurmurError('E-IO-001', `workdir '${accessible}' does not exist or is not a directory`, {
        hint: 'create it first, or leave out --workdir to get a fresh one per session',
      });
    }
    if (request.executorState) assertLaunchersChoice(accessible, request.executorState);
  } else {
    accessible = path.join(path.resolve(request.defaultBase), 'workdir', request.sessionId);
    // A base of the launcher's own: its session's directory is made there, so not in the executor's state.
    if (request.executorState) assertLaunchersChoice(accessible, request.executorState);
    refuseDanglingWorkdirs(path.dirname(accessible));
    // Its owner's alone, as every record of the runtime's is: another local user could otherwise
    // list it, and read its delegations' ids (a completion's credential) in children/'s names.
    await fs.mkdir(accessible, { recursive: true, mode: 0o700 });
  }
  if (request.madeInGuestTree) assertWorkdirUnmoved(accessible);
  accessible = realpathSync(accessible);
  const sessionDir = request.workdir !== undefined ? path.join(accessible, '.murmur', request.sessionId) : accessible;
  // A launch refused while its workdir is made (a full disk, an artifact refused) ran nothing: what
  // it made of the session's records goes with it, where a half-made session directory stayed and
  // was taken for the newest session (`mur trace show`). A chosen workdir's own entries are the
  // user's, and stay; the empty directories the launch made in it go.
  const madeInChosen =
    request.workdir === undefined
      ? []
      : ['.murmur', '.capsule-home', 'out'].filter((name) => !lstatSync(path.join(accessible, name), { throwIfNoEntry: false }));
  try {
    // A chosen workdir is the user's to share or not; the runtime's records in it are not.
    if (request.workdir !== undefined) mkdirBeneath(accessible, path.join(accessible, '.murmur'), { private: true });
    for (const dir of ['tools', 'out', 'logs']) mkdirBeneath(accessible, path.join(sessionDir, dir));
    mkdirBeneath(accessible, path.join(accessible, '.capsule-home'));
    // Where a capsule writes its own answer (`out/result.txt`), whichever directory holds the records.
    mkdirBeneath(accessible, path.join(accessible, 'out'));
    if (request.task !== undefined) writeFileBeneath(accessible, path.join(accessible, 'task.md'), request.task);
    // Written only where nothing has the name: not even a dangling link, which a write would follow.
    if (request.workdir !== undefined && !lstatSync(path.join(accessible, 'murmur.yaml'), { throwIfNoEntry: false })) {
      writeFileBeneath(accessible, path.join(accessible, 'murmur.yaml'), plan.capsule.manifest_yaml);
    }
    const preopen = await inside(accessible, plan.policy.filesystem_scope, 'capabilities.filesystem.scope');

    const tools: HostTool[] = [];
    for (const artifact of plan.artifacts) {
      const tool = await installArtifact(sessionDir, accessible, artifact, files);
      if (tool) tools.push(tool);
    }
    for (const binary of plan.policy.shell_allow) {
      const manifest = path.join(sessionDir, 'tools', binary, 'murmur.yaml');
      if (lstatSync(manifest, { throwIfNoEntry: false })) continue;
      writeFileBeneath(accessible, manifest, shellToolManifest(binary));
    }
    // Made before any host runs, so a sandbox can bind each over its own name from the start.
    mkdirBeneath(accessible, childrenDirIn(sessionDir));
    appendBeneath(accessible, traceFileIn(sessionDir), '');
    return { paths: { accessible, sessionDir, preopen }, tools };
  } catch (error) {
    await fs.rm(sessionDir, { recursive: true, force: true }).catch(() => {});
    // Only while empty: another session in the same workdir may have put something in them since.
    for (const name of madeInChosen) await fs.rmdir(path.join(accessible, name)).catch(() => {});
    throw error;
  }
}

/** Where a session's delegated children get their workdirs, each under its own name. */
export function childrenDirIn(sessionDir: string): string {
  return path.join(sessionDir, 'children');
}

/**
 * A path in the workdir that a sandbox binds over itself: read-only, or writable again inside a
 * read-only one. Bound in order, so a later one lands on top of an earlier one.
 */
export interface RecordBind {
  path: string;
  kind: 'directory' | 'file';
  writable: boolean;
}

/**
 * What every sandbox of the session binds over their own names so that its guest reads and cannot
 * rewrite what only the runtime writes: `trace.jsonl` (what the session did and was refused) and
 * `children/` (each delegated child's workdir, holding that child's own trace). They live in the
 * workdir (upstream's layout), which is the guest's to write, and a mount point can be neither
 * unlinked nor renamed, so the guest cannot cut the trace, nor move a directory aside and make
 * another with a trace of its own, which readers would then take for the session's.
 *
 * Under a chosen workdir the records are in `.murmur/<session>/`: `.murmur` is bound read-only
 * (it cannot be moved, and other sessions' records in it cannot be written), and the session's
 * own directory writable again inside it, since the host writes there (`logs/`, `out/`,
 * `contexts/`, a shell tool's manifest). The logs stay the guest's to write.
 */
export function recordBinds(paths: Pick<SessionPaths, 'accessible' | 'sessionDir'>): RecordBind[] {
  const { accessible, sessionDir } = paths;
  const chosen: RecordBind[] =
    sessionDir === accessible
      ? []
      : [
          { path: path.dirname(sessionDir), kind: 'directory', writable: false },
          { path: sessionDir, kind: 'directory', writable: true },
        ];
  return [...chosen, { path: childrenDirIn(sessionDir), kind: 'directory', writable: false }, { path: traceFileIn(sessionDir), kind: 'file', writable: false }];
}

/**
 * Writes an artifact into `tools/<name>/` and describes it to the host; drivers and hooks are not
 * tools. Everything that can fail for want of something — a blob the store lacks, a bundle, a
 * scope outside the workdir — is settled before anything is written, so a pull that fails leaves
 * no tool directory behind (a `murmur.yaml` naming a tool the session does not have).
 */
export async function installArtifact(sessionDir: string, accessible: string, artifact: StagedArtifact, files: ArtifactFiles): Promise<HostTool | undefined> {
  const toolDir = path.join(sessionDir, 'tools', ...artifact.name.split('/'));
  const baseName = artifact.name.split('/').pop() as string;
  const common = {
    name: artifact.name,
    version: artifact.version,
    info: describeManifest(artifact.manifest_yaml),
    ...(artifact.description !== undefined ? { description: artifact.description } : {}),
  };
  const label = `${artifact.name}@${artifact.version}`;
  // Copied, never linked: the workdir is the guest's to write, the cache is not.
  const copies: Array<{ source: string; target: string; mode: number }> = [];
  const fetchForCopy = async (file: SetFile, target: string, mode: number): Promise<void> => {
    copies.push({ source: await files.blobs.fetch(file, `${label}: ${file.path}`), target, mode });
  };
  let tool: HostTool | undefined;
  if (artifact.role === 'skill') {
    const target = path.join(toolDir, 'skill.md');
    const skill = artifact.files.find((file) => file.path.toLowerCase() === 'skill.md');
    if (skill) await fetchForCopy(skill, target, 0o644);
    tool = { ...common, kind: 'skill', path: target, preopen: accessible, runtime: 'wasm' };
  } else if (artifact.role === 'tool' && artifact.packaging === 'native') {
    const target = path.join(toolDir, baseName);
    const binary = artifact.files.find((file) => file.path === `bin/${baseName}`);
    if (!binary) throw new MurmurError('E-ART-003', `${label}: the staged plan names no bin/${baseName} for this native tool`);
    // The workdir copy is the guest's to read; what runs is the cache's read-only copy, which the
    // sandbox lets execute and no guest can rewrite (the workdir never has the execute right).
    await fetchForCopy(binary, target, 0o755);
    const executable = await files.blobs.executable(binary, baseName, `${label}: ${binary.path}`);
    tool = { ...common, kind: 'native', path: executable, preopen: accessible, runtime: 'native' };
  } else if (artifact.role === 'tool') {
    // Its bundle first: the scope is made on the way to being resolved, and a pull whose bundle
    // cannot be had must leave no directory of it behind.
    const component = artifact.component ? await files.bundles.local(artifact.component, label) : undefined;
    const scope = artifact.capabilities?.filesystem?.scope;
    const preopen = scope === undefined ? accessible : await inside(accessible, scope, `the filesystem scope of '${artifact.name}'`);
    tool = {
      ...common,
      kind: 'wasm',
      ...(component ? { component } : {}),
      preopen,
      runtime: 'wasm',
    };
  }
  // Written beneath the workdir's root: a pull comes while the guest runs, and it may have put a
  // link in the way. The manifest last, as what says the artifact is installed: a copy the guest
  // made impossible (a directory planted at its name) failed the pull after it was written.
  for (const copy of copies) copyFileBeneath(accessible, copy.source, copy.target, copy.mode);
  writeFileBeneath(accessible, path.join(toolDir, 'murmur.yaml'), artifact.manifest_yaml);
  return tool;
}

/** `manage.describe`'s answer for an artifact, from its own manifest: description, tags, schemas as JSON. */
export function describeManifest(manifestYaml: string): HostTool['info'] {
  let manifest: Record<string, unknown> = {};
  try {
    const value = parseYamlSource(manifestYaml).value;
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) manifest = value as Record<string, unknown>;
  } catch {
    // an unreadable manifest describes nothing beyond the name
  }
  const schema = (key: string): string | undefined => {
    const value = manifest[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string') {
      try {
        return JSON.stringify(JSON.parse(value));
      } catch {
        return JSON.stringify(value);
      }
    }
    return JSON.stringify(value);
  };
  const input = schema('input_schema') ?? schema('input');
  const output = schema('output_schema');
  return {
    description: typeof manifest.description === 'string' ? manifest.description : '',
    tags: Array.isArray(manifest.tags) ? manifest.tags.filter((tag): tag is string => typeof tag === 'string') : [],
    ...(input !== undefined ? { input_schema: input } : {}),
    ...(output !== undefined ? { output_schema: output } : {}),
  };
}
