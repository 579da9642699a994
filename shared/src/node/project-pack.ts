import { createHash } from 'node:crypto';
import { type Dirent, type Stats, createReadStream, mkdirSync, readFileSync, readdirSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import type { ObjectStore } from '../bus/objects.js';
import { MurmurError } from '../errors.js';
import { type ProjectListing, ProjectListingSchema, type SetFile, fileSetBytes, hasControlCharacter } from '../file-set.js';
import { LOCKFILE_MAX_BYTES, LOCKFILE_NAME } from '../lockfile.js';
import { parseYamlSource } from '../manifest/yaml-source.js';
import { numberSetting } from '../settings.js';
import { writeFileAtomic } from './atomic.js';
import { type BlobRef, hashFile } from './blobs.js';
import { cacheDir } from './home.js';
import { readManifestTextSync } from './manifest-file.js';
import { readSmallTextFileSync } from './small-text-file.js';

const LOCK_FILE = { what: 'murmur.lock', maxBytes: LOCKFILE_MAX_BYTES };

/**
 * A capsule project packed for staging, by whoever asks for it to be staged (`mur`, a test, a
 * client of the stack): the stager is never given a path, because it may run on another machine.
 *
 * What is packed is what staging reads and nothing else — `murmur.yaml`, `murmur.lock`, the
 * capsule's component (a script capsule's `capsule.wasm` or root `*.wasm`), the files the manifest
 * names (`inference.system_prompt_file`, local skills' `source`), and the project store's entries
 * for the artifacts the manifest declares — so a capsule directory that also holds its sessions'
 * workdirs uploads only its few files. Each file travels as a blob under its sha256; the listing
 * itself is one more blob, and its digest is what a stage request names.
 */

export const MAX_PROJECT_BYTES_ENV = 'MURMUR_MAX_PROJECT_BYTES';
/** Large enough for a few componentize-js components (12 MB each) and their artifacts. */
export const DEFAULT_MAX_PROJECT_BYTES = 512 * 1024 * 1024;
export const MAX_PROJECT_FILES = 10_000;

export function maxProjectBytesFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  return numberSetting(env, MAX_PROJECT_BYTES_ENV, DEFAULT_MAX_PROJECT_BYTES, { unit: 'bytes' });
}

export interface PackedProject {
  listing: ProjectListing;
  /** The listing as it is stored, and its digest: what a stage request names. */
  listingBytes: Uint8Array;
  ref: BlobRef;
  /** Where each packed file is on this machine, by its path in the listing. */
  local: Map<string, string>;
}

export interface PackOptions {
  maxBytes?: number;
  label?: string;
  /** Where digests of unchanged files are remembered between packs (default `<cache>/file-digests.json`; null: nowhere). */
  digestCache?: string | null;
  /**
   * The manifest to stage, when it is not the directory's `murmur.yaml` (`mur run --manifest
   * other.yaml`): packed as `murmur.yaml`, so what is staged is the manifest that was named and
   * checked, not another one beside it. Inside the project directory, as every packed file.
   */
  manifestFile?: string;
}

/**
 * The digests of files packed before, so an unchanged 12 MB component is not hashed on every run.
 * A remembered digest is used only while the file's device, inode, size, modification and change
 * times are all what they were (the change time cannot be set back), and whoever reads the bytes
 * verifies them against the digest anyway: a stale entry can cost a refusal, never wrong bytes.
 */
class DigestCache {
  private entries: Record<string, { key: string; sha256: string; size: number }> = {};
  private changed = false;

  private constructor(private readonly file: string | undefined) {}

  static open(file: string | undefined): DigestCache {
    const cache = new DigestCache(file);
    if (file) {
      try {
        const parsed = JSON.parse(readFileSync(file, 'utf8')) as unknown;
        if (parsed && typeof parsed === 'object') cache.entries = parsed as DigestCache['entries'];
      } catch {
        // none yet, or unreadable: every file is hashed
      }
    }
    return cache;
  }

  async digest(real: string): Promise<BlobRef> {
    const stat = statSync(real, { bigint: true });
    const key = `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
    const known = this.entries[real];
    if (known?.key === key && /^[0-9a-f]{64}$/.test(known.sha256)) return { sha256: known.sha256, size: known.size };
    const digest = await hashFile(real);
    this.entries[real] = { key, ...digest };
    this.changed = true;
    return digest;
  }

  async save(): Promise<void> {
    if (!this.file || !this.changed) return;
    try {
      mkdirSync(path.dirname(this.file), { recursive: true });
      await writeFileAtomic(this.file, JSON.stringify(this.entries));
    } catch {
      // a cache that cannot be written only costs the next pack a hash
    }
  }
}

/** What the manifest says about files to pack; a manifest that does not parse is packed alone, and refused by the stager. */
interface ManifestFacts {
  agent: boolean;
  promptFile: string | undefined;
  compactionPromptFile: string | undefined;
  skillSources: string[];
  artifacts: Array<{ name: string; version: string }>;
}

function manifestFacts(text: string): ManifestFacts {
  let value: unknown;
  try {
    // As the stager parses it: yaml's own duplicate-key check is quadratic (a 700 KB mapping took a minute here).
    value = parseYamlSource(text).value;
  } catch {
    return { agent: false, promptFile: undefined, compactionPromptFile: undefined, skillSources: [], artifacts: [] };
  }
  const record = (candidate: unknown): Record<string, unknown> =>
    candidate !== null && typeof candidate === 'object' && !Array.isArray(candidate) ? (candidate as Record<string, unknown>) : {};
  const manifest = record(value);
  const inference = manifest.inference === undefined ? undefined : record(manifest.inference);
  const entries = Array.isArray(manifest.artifacts) ? manifest.artifacts.map(record) : [];
  return {
    agent: inference !== undefined,
    promptFile: typeof inference?.system_prompt_file === 'string' ? inference.system_prompt_file : undefined,
    compactionPromptFile:
      typeof record(inference?.compaction).system_prompt_file === 'string' ? (record(inference?.compaction).system_prompt_file as string) : undefined,
    skillSources: entries.map((entry) => entry.source).filter((source): source is string => typeof source === 'string'),
    artifacts: entries
      .filter((entry) => typeof entry.name === 'string' && entry.source === undefined)
      .map((entry) => ({ name: entry.name as string, version: String(entry.version ?? '') })),
  };
}

function lockPins(text: string | undefined): Map<string, string> {
  const pins = new Map<string, string>();
  if (text === undefined) return pins;
  try {
    const lock = parseYamlSource(text, 'murmur.lock').value as { artifacts?: Array<{ name?: unknown; resolved_version?: unknown }> };
    for (const entry of lock?.artifacts ?? []) if (typeof entry.name === 'string') pins.set(entry.name, String(entry.resolved_version ?? ''));
  } catch {
    // an unreadable lock is packed as it is and refused by the stager
  }
  return pins;
}

/** A directory's entries, or none when it cannot be read (a store that is not there packs nothing). */
function readDirectory(dir: string): Dirent[] {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}

/** A directory's entries' names as the bytes they are, or none when it cannot be read. */
function readRawNames(dir: string): Buffer[] {
  try {
    return readdirSync(dir, { encoding: 'buffer' });
  } catch {
    return [];
  }
}

/** A path's stat, or none when it cannot be had (missing, or a file where a directory was named): it is not packed. */
function statIfAny(file: string): Stats | undefined {
  try {
    return statSync(file);
  } catch {
    return undefined;
  }
}

/** The lock's text, or none when there is none; one that is no regular file, or past its bound, is refused (`readSmallTextFileSync`). */
function readLockTextIfAny(file: string): string | undefined {
  try {
    return readSmallTextFileSync(file, LOCK_FILE);
  } catch (error) {
    if (error instanceof MurmurError) throw error;
    // A directory there is no lock, and no run could write one: each ran unpinned, warning without
    // a code that the next run would pin what it resolved.
    if ((error as NodeJS.ErrnoException).code === 'EISDIR')
      throw new MurmurError('E-PRJ-003', `${LOCKFILE_NAME} in ${path.dirname(file)} is a directory, not a lockfile: no run could pin what it resolves`, {
        path: file,
        hint: `remove the directory ${file}; the next run writes the lock`,
      });
    return undefined;
  }
}

/**
 * Packing reads a handful of small files and their metadata, one after another. It reads them
 * synchronously: through the thread pool each was a round trip of the event loop, and a packed
 * project's ten or so of them were most of an upload against a stack (~21 ms of a run of the WAT
 * capsule). Only hashing a file not seen before reads through a stream.
 */
class Packer {
  readonly files: SetFile[] = [];
  readonly local = new Map<string, string>();
  private readonly realRoot: string;

  constructor(
    readonly root: string,
    private readonly maxBytes: number,
    readonly digests: DigestCache,
  ) {
    this.realRoot = realpathSync(root);
  }

  /** Adds `relative` if it is a regular file inside the project, under its own name or `as`; `what` names it in a refusal. */
  async add(relative: string, what: string, as?: string): Promise<boolean> {
    const absolute = path.resolve(this.root, relative);
    const stat = statIfAny(absolute);
    // A FIFO, socket or device where the manifest names a file is refused as what it is: passed
    // over, the stager said the file was not in the capsule's directory.
    if (stat && !stat.isFile() && !stat.isDirectory())
      throw new MurmurError(
        'E-PRJ-003',
        `${what} '${relative}' is ${stat.isFIFO() ? 'a FIFO' : stat.isSocket() ? 'a socket' : 'a device'}, not a regular file: nothing of it can be staged`,
        {
          path: relative,
          hint: `put the file itself at ${absolute}`,
        },
      );
    if (!stat?.isFile()) return false;
    const real = realpathSync(absolute);
    if (!real.startsWith(`${this.realRoot}${path.sep}`)) {
      throw new MurmurError('E-PRJ-002', `${what} '${relative}' resolves to ${real}, outside the capsule directory ${this.realRoot}`, {
        path: relative,
        hint: 'a capsule is staged from its own directory: move the file into it (or point the manifest at a copy inside it)',
      });
    }
    // Listed under the name it is read by (the manifest's, through any link inside the project),
    // not its target's: staging looks for `prompt.md`, not for what it links to.
    const name = as ?? path.relative(this.root, absolute).split(path.sep).join('/');
    if (this.local.has(name)) return true;
    const digest = await this.digests.digest(real);
    this.files.push({ path: name, sha256: digest.sha256, size: digest.size, executable: (stat.mode & 0o111) !== 0 });
    this.local.set(name, real);
    if (this.files.length > MAX_PROJECT_FILES)
      throw new MurmurError('E-PRJ-001', `the capsule project in ${this.root} has more than ${MAX_PROJECT_FILES} files to stage`);
    const total = fileSetBytes(this.files);
    if (total > this.maxBytes) {
      throw new MurmurError(
        'E-PRJ-001',
        `the capsule project in ${this.root} is over the ${this.maxBytes}-byte staging limit (${total} bytes with '${name}')`,
        {
          path: name,
          hint: `raise ${MAX_PROJECT_BYTES_ENV} for the client and the stager, or keep large files out of what the manifest names`,
        },
      );
    }
    return true;
  }

  /**
   * Every regular file below `relative` (a store's), recursively, when it is a directory: not one
   * whose name starts with a dot, which no artifact's file has — another writer's turn file, a
   * temporary or a backup of an install under way, hashed half-written and uploaded with it — and
   * not one an install renames away meanwhile.
   */
  async addTree(relative: string, what: string): Promise<void> {
    const absolute = path.resolve(this.root, relative);
    const entries = readDirectory(absolute);
    for (const entry of entries) {
      if (entry.name.startsWith('.')) continue;
      const child = path.join(relative, entry.name);
      if (entry.isDirectory()) await this.addTree(child, what);
      else if (entry.isFile())
        await this.add(child, what).catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'ENOENT') throw error;
        });
    }
  }
}

/** Packs the capsule project in `dir` (the directory holding `murmur.yaml`). */
export async function packProject(dir: string, options: PackOptions = {}): Promise<PackedProject> {
  const root = path.resolve(dir);
  const manifestPath = options.manifestFile === undefined ? path.join(root, 'murmur.yaml') : path.resolve(root, options.manifestFile);
  const manifestText = readManifestTextSync(manifestPath, 'pass the directory that holds murmur.yaml (mur run: --manifest <file>)');
  const packer = new Packer(root, options.maxBytes ?? maxProjectBytesFromEnv(), digestCacheFor(options));
  await packer.add(path.relative(root, manifestPath), 'the manifest', 'murmur.yaml');
  const lockText = readLockTextIfAny(path.join(root, LOCKFILE_NAME));
  await packer.add(LOCKFILE_NAME, 'the lock');
  const facts = manifestFacts(manifestText);
  if (!facts.agent) {
    // A component whose name is not UTF-8 cannot be named in a listing (node reads it with U+FFFD
    // in place of the bytes, a name no file has): refused as what it is, where the capsule was
    // staged as having no component at all.
    const unnameable = readRawNames(root).find(
      (name) => name.subarray(-5).toString('latin1') === '.wasm' && !Buffer.from(name.toString('utf8'), 'utf8').equals(name),
    );
    if (unnameable)
      throw new MurmurError(
        'E-PRJ-003',
        `the component ${JSON.stringify(unnameable.toString('utf8'))} in ${root} has a name that is not UTF-8, which no listing can hold`,
        {
          path: root,
          hint: 'rename it, e.g. to capsule.wasm',
        },
      );
    // All root components: which one is the capsule's (or that the choice is ambiguous) is the stager's to say.
    const roots = readDirectory(root)
      // A link is the file it leads to, as a named file's is, and a FIFO is what it is (`add` refuses
      // one that leads outside, and the FIFO): passed over, the capsule was staged as having no component.
      .filter((entry) => !entry.isDirectory() && entry.name.endsWith('.wasm'))
      .map((entry) => entry.name);
    for (const name of roots.includes('capsule.wasm') ? ['capsule.wasm'] : roots) await packer.add(name, 'the capsule component');
  }
  for (const [file, what] of [
    [facts.promptFile, 'inference.system_prompt_file'],
    [facts.compactionPromptFile, 'inference.compaction.system_prompt_file'],
  ] as const) {
    if (file === undefined) continue;
    // A directory is refused as one: passed over, the stager said the file was not there.
    if (statIfAny(path.resolve(root, file))?.isDirectory())
      throw new MurmurError('E-RUN-009', `cannot read the system prompt file '${file}' (${what}): it is a directory, not a file`, {
        path: what,
        hint: 'name the prompt file itself in murmur.yaml (relative to the manifest directory), or pass --system-prompt',
      });
    await packer.add(file, what);
  }
  for (const source of facts.skillSources) {
    const absolute = path.resolve(root, source);
    const stat = statIfAny(absolute);
    if (stat?.isDirectory()) {
      const skill = readDirectory(absolute).find((entry) => entry.name.toLowerCase() === 'skill.md')?.name;
      if (skill) await packer.add(path.join(source, skill), 'the skill source');
    } else {
      await packer.add(source, 'the skill source');
    }
  }
  const pins = lockPins(lockText);
  for (const artifact of facts.artifacts) {
    for (const version of new Set([artifact.version, pins.get(artifact.name) ?? artifact.version])) {
      // Names and versions that cannot be store paths are the stager's to refuse; nothing is packed for them.
      if (
        !/^[A-Za-z0-9][A-Za-z0-9._+-]*(\/[A-Za-z0-9][A-Za-z0-9._+-]*)?$/.test(artifact.name) ||
        !/^[A-Za-z0-9][A-Za-z0-9._+-]*$/.test(version) ||
        version.includes('..')
      )
        continue;
      await packer.addTree(path.join('.murmur', 'artifacts', ...artifact.name.split('/'), version), 'the project store');
    }
  }
  return finish(packer, options.label ?? path.basename(root));
}

function digestCacheFor(options: PackOptions): DigestCache {
  return DigestCache.open(options.digestCache === null ? undefined : (options.digestCache ?? path.join(cacheDir(), 'file-digests.json')));
}

/**
 * Packs a project's store alone (`.murmur/artifacts`), for staging a capsule by name: the stager
 * searches it first, as it would the project store on this machine.
 */
export async function packProjectStore(projectDir: string, options: PackOptions = {}): Promise<PackedProject | undefined> {
  const root = path.resolve(projectDir);
  const store = path.join(root, '.murmur', 'artifacts');
  if (!statIfAny(store)?.isDirectory()) return undefined;
  const packer = new Packer(root, options.maxBytes ?? maxProjectBytesFromEnv(), digestCacheFor(options));
  await packer.addTree(path.join('.murmur', 'artifacts'), 'the project store');
  if (packer.files.length === 0) return undefined;
  return finish(packer, options.label ?? path.basename(root));
}

async function finish(packer: Packer, label: string): Promise<PackedProject> {
  await packer.digests.save();
  const files = [...packer.files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  // A directory's name may hold what a label may not (a control character): shown as `?`.
  const shown = [...label]
    .map((character) => (hasControlCharacter(character) ? '?' : character))
    .join('')
    .slice(0, 200);
  const parsed = ProjectListingSchema.safeParse({ format: 'murmur-project/1', label: shown, files });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new MurmurError('E-ART-001', `the capsule project in ${packer.root} cannot be staged as it is: ${issue?.message ?? 'its listing is not valid'}`, {
      hint: 'rename the file it names: a staged project is laid out on machines whose disks may fold case and Unicode forms, and held to the rules of a .mur.zip',
    });
  }
  const listing = parsed.data;
  const listingBytes = new TextEncoder().encode(JSON.stringify(listing));
  return {
    listing,
    listingBytes,
    ref: { sha256: createHash('sha256').update(listingBytes).digest('hex'), size: listingBytes.byteLength },
    local: packer.local,
  };
}

/**
 * Puts a packed project in the object store: each file the store does not hold yet (a component
 * that has not changed since the last run is not sent again), then the listing, once every file it
 * names is there, and only if the store does not hold it either. Objects are named by their
 * digest, so one of the same name and size is the same bytes; one that is not (a damaged store) is
 * removed by the stager that finds it out, and the next staging puts it again.
 */
export async function publishProject(store: ObjectStore, packed: PackedProject): Promise<BlobRef> {
  const held = async (ref: BlobRef): Promise<boolean> => (await store.info(ref.sha256))?.size === ref.size;
  // Asked at once with the files: an unchanged project's upload is one round of lookups.
  const [listingHeld] = await Promise.all([
    held(packed.ref),
    ...packed.listing.files.map(async (file) => {
      if (await held(file)) return;
      const local = packed.local.get(file.path) as string;
      await store.put(file.sha256, { size: file.size, open: () => createReadStream(local, { highWaterMark: 1 << 20 }) });
    }),
  ]);
  if (!listingHeld) await store.put(packed.ref.sha256, { bytes: packed.listingBytes });
  return packed.ref;
}
