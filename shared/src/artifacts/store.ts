import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type ArtifactMeta, MetaFileSchema, currentPlatform, fallbackMeta, requirePlatform } from '../artifact-meta.js';
import { MurmurError } from '../errors.js';
import { LONGEST_ARTIFACT_VERSION, artifactVersionProblem } from '../manifest/artifact-name.js';
import { isReservedVersion } from '../manifest/artifact.js';
import { removedIfInterrupted, temporarySibling, writeFileAtomic } from '../node/atomic.js';
import { sweepStoreOnce } from '../node/cache-leftovers.js';
import { OPEN_WITHOUT_BLOCKING, kindOf } from '../node/small-text-file.js';
import { systemFailureCode, systemFailureHint } from '../node/system-failure.js';
import { withLockfileTurn } from './lockfile-io.js';

/**
 * An on-disk artifact store, laid out exactly as upstream's so the two share `~/.murmur`:
 *
 * ```
 * <root>/<name>/<version>/<name>-<version>.mur.zip              generic (wasm, static)
 *                         <name>-<version>.sha256               hex of the zip bytes
 *                         <name>-<version>-<os>-<arch>.mur.zip  native variant (+ .sha256)
 *                         <name>-<version>.meta.json            {"meta": {...}}
 * ```
 *
 * A namespaced name (`local/worker`) nests one directory deeper and keeps its last segment in
 * file names. Every write goes through temporary siblings and renames, so a reader never sees a
 * zip without its digest or half of either.
 */

/** `default`: the artifacts this runtime ships (its first-party drivers), read-only, consulted last. */
export type StoreScope = 'project' | 'global' | 'default';

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export interface StoredArtifact {
  name: string;
  version: string;
  bytes: Buffer;
  /** The digest recorded beside the zip. Not yet compared with the bytes: that is the caller's check. */
  recordedSha256: string;
  /** What the bytes hash to, computed as they were read (`readPair`): a caller checks against it without hashing again. */
  bytesSha256: string;
  meta: ArtifactMeta;
  zipPath: string;
  /** Set when a platform variant was chosen over the generic file. */
  platform: string | undefined;
}

const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;
/** The longest file name (in bytes) Linux file systems take. */
const FILE_NAME_MAX_BYTES = 255;
/**
 * What a store file's temporary name adds to its own (`temporarySibling`: `.<name>.<pid>.<12 hex>.tmp`,
 * a pid of up to 7 digits) and a backup's `.bak` on top.
 */
const TEMPORARY_NAME_OVERHEAD = '.'.length + '.1234567.'.length + 12 + '.tmp'.length + '.bak'.length;

/**
 * The longest name segment (an artifact's own rule, `artifactNameProblem`) a store takes. With
 * the longest version it stays within a file name's 255 bytes under a temporary name; a platform
 * build's name adds the platform, and `variantFiles` refuses what that takes past them.
 */
const LONGEST_NAME_SEGMENT = 100;

/**
 * Names and versions become directory and file names, so they are held to a shape that cannot
 * climb (`..`), hide (`.x`) or nest beyond one namespace (`ns/name`), and to lengths that keep
 * `<name>-<version>.meta.json` within a file name's 255 bytes.
 */
export function assertStorable(name: string, version: string): void {
  const segments = name.split('/');
  const badName = segments.length > 2 || segments.some((segment) => !SEGMENT.test(segment) || segment.includes('..'));
  const shown = (text: string): string => (text.length > 60 ? `${text.slice(0, 60)}…` : text);
  if (badName)
    throw new MurmurError(
      'E-REG-006',
      `'${shown(name)}' cannot name an artifact in a store: use lowercase letters, digits and '-', with at most one 'namespace/'`,
      {
        path: name,
        hint: "an artifact is named as its murmur.yaml names it, e.g. 'hello' or 'acme/hello'",
      },
    );
  const longest = Math.max(...segments.map((segment) => segment.length));
  if (longest > LONGEST_NAME_SEGMENT)
    throw new MurmurError(
      'E-REG-006',
      `'${shown(name)}' cannot name an artifact: a name is at most ${LONGEST_NAME_SEGMENT} characters (this one is ${longest})`,
      {
        path: name,
        hint: "an artifact is named as its murmur.yaml names it, e.g. 'hello' or 'acme/hello'",
      },
    );
  const versionProblem = artifactVersionProblem(version);
  if (versionProblem !== undefined) {
    throw new MurmurError(
      'E-REG-006',
      `'${shown(version)}' cannot be an artifact version in a store: it ${versionProblem} (letters, digits, '.', '+', '-' and '_', at most ${LONGEST_ARTIFACT_VERSION} of them)`,
      { path: version, hint: "a version is as the artifact's murmur.yaml gives it, e.g. 0.1.0" },
    );
  }
}

interface VariantFiles {
  zip: string;
  sha: string;
}

export class ArtifactStore {
  constructor(
    readonly root: string,
    readonly scope: StoreScope,
    /**
     * A command's store (`mur publish`, `mur install`): an interrupt removes the temporary files
     * of a write in flight before the process ends. A service's (roost's) is not: its own shutdown
     * finishes the write, which files removed under it would fail.
     */
    private readonly options: {
      interruptible?: boolean;
      /** How messages name it (`the store roost serves at …`); `the <scope> store` unless said. */
      shownAs?: string;
    } = {},
  ) {}

  private get shown(): string {
    return this.options.shownAs ?? `the ${this.scope} store`;
  }

  /**
   * A command's store is swept, before its first write in a process, of the day-old temporary
   * files a `kill -9` left in it (an interrupt's are removed as it comes): nothing else would ever
   * remove them. A service's store is swept by the service (`keepStoreSwept`).
   */
  private async sweptOnce(): Promise<void> {
    if (this.options.interruptible) await sweepStoreOnce(this.root);
  }

  versionDir(name: string, version: string): string {
    assertStorable(name, version);
    return path.join(this.root, ...name.split('/'), version);
  }

  private stem(name: string, version: string): string {
    return `${name.split('/').pop() as string}-${version}`;
  }

  variantFiles(name: string, version: string, platform?: string): VariantFiles {
    const dir = this.versionDir(name, version);
    // It becomes part of a file name: nothing but `os-arch`.
    if (platform !== undefined) requirePlatform(platform, 'platform');
    const stem = platform ? `${this.stem(name, version)}-${platform}` : this.stem(name, version);
    // Each within its own length, a name, a version and a platform can still make a file name
    // longer than a file system takes, under the temporary name it is written by: refused before
    // anything is made, not as the write's ENAMETOOLONG with an empty version directory left.
    const longest = Math.max(`${stem}.mur.zip`.length, `${this.stem(name, version)}.meta.json`.length) + TEMPORARY_NAME_OVERHEAD;
    if (longest > FILE_NAME_MAX_BYTES)
      throw new MurmurError(
        'E-REG-006',
        `${name.length > 60 ? `${name.slice(0, 60)}…` : name}@${version.length > 40 ? `${version.slice(0, 40)}…` : version}${platform ? ` for ${platform}` : ''} would name a store file of ${longest} bytes as it is written, more than the ${FILE_NAME_MAX_BYTES} a file name may have`,
        { path: name, hint: 'shorten the artifact name or its version (together with a platform, they make one file name)' },
      );
    return { zip: path.join(dir, `${stem}.mur.zip`), sha: path.join(dir, `${stem}.sha256`) };
  }

  metaFile(name: string, version: string): string {
    return path.join(this.versionDir(name, version), `${this.stem(name, version)}.meta.json`);
  }

  /**
   * The stored artifact, preferring this machine's platform variant when both its files exist,
   * else the generic pair; undefined when neither pair is whole.
   */
  async resolve(name: string, version: string, platform: string = currentPlatform()): Promise<StoredArtifact | undefined> {
    const candidates: Array<{ files: VariantFiles; platform: string | undefined }> = [];
    if (platform !== 'unknown') candidates.push({ files: this.variantFiles(name, version, platform), platform });
    candidates.push({ files: this.variantFiles(name, version), platform: undefined });
    for (const candidate of candidates) {
      const pair = await readPair(candidate.files);
      if (pair === undefined) continue;
      const { bytes, recordedSha256, bytesSha256 } = pair;
      if (recordedSha256 === '') {
        throw new MurmurError('E-REG-002', `artifact ${name}@${version} has an empty sha256 sidecar in ${this.shown}`, {
          path: candidate.files.sha,
          hint: 'republish or reinstall the artifact',
        });
      }
      return {
        name,
        version,
        bytes,
        recordedSha256,
        bytesSha256,
        meta: await this.readMeta(name, version),
        zipPath: candidate.files.zip,
        platform: candidate.platform,
      };
    }
    return undefined;
  }

  /**
   * The digest recorded for `name@version`'s generic archive (its sidecar), without reading the
   * archive; undefined when there is none. What a reader that keeps something worked out from an
   * archive checks it against: a version removed and published again records another digest.
   */
  async recordedSha256(name: string, version: string): Promise<string | undefined> {
    return (await readIfExists(this.variantFiles(name, version).sha))?.toString('utf8').trim() || undefined;
  }

  async readMeta(name: string, version: string): Promise<ArtifactMeta> {
    const raw = await readIfExists(this.metaFile(name, version));
    if (raw === undefined) return fallbackMeta(name, version);
    try {
      const parsed = MetaFileSchema.safeParse(JSON.parse(raw.toString('utf8')));
      if (parsed.success) return { ...parsed.data.meta, name, version };
    } catch {
      // An unreadable meta file is treated like a missing one: the zip and digest are what matter.
    }
    return fallbackMeta(name, version);
  }

  /** Every stored artifact's meta, sorted by name, version, packaging type. */
  async list(): Promise<ArtifactMeta[]> {
    const found: ArtifactMeta[] = [];
    const visit = async (prefix: string[], dir: string, depth: number): Promise<void> => {
      for (const entry of await readDirectories(dir)) {
        const name = [...prefix, entry].join('/');
        const entryDir = path.join(dir, entry);
        for (const version of await readDirectories(entryDir)) {
          if (!SEGMENT.test(version)) continue;
          if (await this.hasVariant(entryDir, version, entry)) found.push(await this.readMeta(name, version));
        }
        // Always looked into as a namespace too: `local@worker` (a version directory `worker`) and
        // `local/worker@0.1.0` share `local/worker/`, and one must not hide the other.
        if (depth === 0) await visit([entry], entryDir, 1);
      }
    };
    await visit([], this.root, 0);
    // Byte order, as upstream sorts: stable across locales.
    const compare = (left: string, right: string): number => (left < right ? -1 : left > right ? 1 : 0);
    return found.sort((left, right) => compare(left.name, right.name) || compare(left.version, right.version) || compare(left.runtime, right.runtime));
  }

  /**
   * Whether a variant of the version is published: its zip and, the last file a publish puts in
   * place, its digest. A zip alone is what a publish that died left (`publishVariant`).
   */
  private async hasVariant(nameDir: string, version: string, baseName: string): Promise<boolean> {
    const files = new Set(await fs.readdir(path.join(nameDir, version)).catch(() => [] as string[]));
    const stem = `${baseName}-${version}`;
    for (const file of files) {
      if (file !== `${stem}.sha256` && !(file.startsWith(`${stem}-`) && file.endsWith('.sha256'))) continue;
      if (files.has(`${file.slice(0, -'.sha256'.length)}.mur.zip`)) return true;
    }
    return false;
  }

  /**
   * Adds a version that is not yet stored. Published versions are immutable: an existing zip or
   * digest for this variant is `E-REG-003`, decided by a hard link that fails if the target
   * exists, so two concurrent publishers cannot both win.
   */
  async publish(bytes: Uint8Array, meta: ArtifactMeta): Promise<{ sha256: string; zipPath: string }> {
    refuseReservedVersion(meta, 'published');
    return this.naming(meta, () => this.publishInTurn(bytes, meta));
  }

  /**
   * The system's refusal of a write (a full disk, a read-only store) said with what was being
   * written and where: `ENOSPC: no space left on device, write` named neither the artifact nor the store.
   */
  private async naming<T>(meta: ArtifactMeta, write: () => Promise<T>): Promise<T> {
    try {
      return await write();
    } catch (error) {
      const errno = error as NodeJS.ErrnoException;
      if (error instanceof MurmurError || !(error instanceof Error) || typeof errno.code !== 'string') throw error;
      throw new MurmurError(systemFailureCode(error), `could not write ${meta.name}@${meta.version} into ${this.shown} at ${this.root}: ${error.message}`, {
        path: errno.path ?? this.root,
        hint: systemFailureHint(error) ?? 'check that the store is writable and its disk has room',
        cause: error,
      });
    }
  }

  private async publishInTurn(bytes: Uint8Array, meta: ArtifactMeta): Promise<{ sha256: string; zipPath: string }> {
    const platform = meta.runtime === 'native' && meta.platforms[0] ? meta.platforms[0].join('-') : undefined;
    const files = this.variantFiles(meta.name, meta.version, platform);
    const conflict = (): MurmurError =>
      new MurmurError('E-REG-003', `artifact ${meta.name}@${meta.version} already exists in registry (${this.shown})`, {
        path: files.zip,
      });
    const sha256 = sha256Hex(bytes);
    await this.sweptOnce();
    await fs.mkdir(path.dirname(files.zip), { recursive: true });
    // One publish of a version at a time: what was published of it is read, judged and added to
    // as one step (two variants published at once each found none before, and both were kept).
    return withLockfileTurn(path.join(path.dirname(files.zip), '.publish'), () => this.publishVariant(bytes, meta, sha256, files, platform, conflict), {
      what: `${meta.name}@${meta.version} in ${this.shown}`,
      interruptible: this.options.interruptible === true,
    });
  }

  private async publishVariant(
    bytes: Uint8Array,
    meta: ArtifactMeta,
    sha256: string,
    files: VariantFiles,
    platform: string | undefined,
    conflict: () => MurmurError,
  ): Promise<{ sha256: string; zipPath: string }> {
    const zipThere = await pathPresent(files.zip);
    if (await pathPresent(files.sha)) throw conflict();
    // A zip without its digest is what a publish that died between its link and its rename left
    // (a live one would hold this turn): no reader takes it for a version, and kept, it would make
    // the version "already exist" for good while nothing could serve it. It goes, and this publish
    // proceeds. (A digest without its zip is no step of a publish: refused, as the version's.)
    if (zipThere) await fs.rm(files.zip, { force: true });
    // Another variant of this version was published first: its meta stays (a generic artifact does
    // not turn native), and gains this variant's platform.
    // A meta with no variant published beside it is what a publish that died before its digest left.
    const published = await this.hasVariant(path.dirname(this.versionDir(meta.name, meta.version)), meta.version, meta.name.split('/').pop() as string);
    const kept = published && (await pathPresent(this.metaFile(meta.name, meta.version))) ? await this.readMeta(meta.name, meta.version) : undefined;
    // Only a native artifact's builds for other platforms join a version already published: any
    // other variant would be what a resolver on its platform prefers, other bytes under a name and
    // version every other machine already trusts.
    if (kept && (kept.runtime !== 'native' || meta.runtime !== 'native' || platform === undefined)) {
      throw new MurmurError(
        'E-REG-003',
        `artifact ${meta.name}@${meta.version} already exists in registry (${this.shown}); only a native artifact's build for another platform may be added to a published version`,
        { path: this.metaFile(meta.name, meta.version), hint: 'published versions are immutable: bump the version and publish again' },
      );
    }
    const stored = kept ? { ...kept, platforms: unionOfPlatforms(kept.platforms, meta.platforms) } : meta;
    const { paths: staged, release } = await stageFiles(
      [
        [files.zip, bytes],
        [files.sha, sha256],
        [this.metaFile(meta.name, meta.version), metaJson(stored)],
      ],
      this.options.interruptible === true,
    );
    try {
      try {
        await fs.link(staged[0] as string, files.zip);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EEXIST') throw conflict();
        throw error;
      }
      // The meta before the digest: the digest is what makes the variant published (`hasVariant`),
      // so a publish that dies between them leaves no version listed with no meta (a skill shown
      // as `wasm`, for good, since its version then exists), only files the next publish replaces.
      try {
        await fs.rename(staged[2] as string, this.metaFile(meta.name, meta.version));
        await fs.rename(staged[1] as string, files.sha);
      } catch (error) {
        await fs.rm(files.zip, { force: true });
        await fs.rm(files.sha, { force: true });
        if (kept) await writeFileAtomic(this.metaFile(meta.name, meta.version), metaJson(kept)).catch(() => {});
        else await fs.rm(this.metaFile(meta.name, meta.version), { force: true });
        throw error;
      }
    } finally {
      await Promise.all(staged.map((file) => fs.rm(file, { force: true })));
      release();
    }
    return { sha256, zipPath: files.zip };
  }

  /**
   * Stores `bytes` as `meta`, replacing what is there (`mur install`). The bytes must hash to
   * `expectedSha256` first. The old files are kept aside and restored if any rename fails, so an
   * install either lands whole or leaves the store as it was; a reader meanwhile finds the old
   * version or the new one, never none (it reads a mismatched pair again, `readPair`).
   */
  async install(bytes: Uint8Array, meta: ArtifactMeta, expectedSha256: string): Promise<{ zipPath: string }> {
    // What could not be published is not installed either: a `latest` archive installed from a zip
    // was listed, passed mur doctor, and was pinned as `resolved_version: latest`.
    refuseReservedVersion(meta, 'installed');
    return this.naming(meta, () => this.installInTurn(bytes, meta, expectedSha256));
  }

  private async installInTurn(bytes: Uint8Array, meta: ArtifactMeta, expectedSha256: string): Promise<{ zipPath: string }> {
    const actual = sha256Hex(bytes);
    if (actual !== expectedSha256) {
      throw new MurmurError(
        'E-REG-002',
        `artifact integrity check failed for ${meta.name}@${meta.version}: the bytes hash to ${actual}, not ${expectedSha256}`,
      );
    }
    const platform = meta.runtime === 'native' && meta.platforms[0] ? meta.platforms[0].join('-') : undefined;
    const files = this.variantFiles(meta.name, meta.version, platform);
    const targets = [files.zip, files.sha, this.metaFile(meta.name, meta.version)];
    await this.sweptOnce();
    await fs.mkdir(path.dirname(files.zip), { recursive: true });
    // In the version's publish turn: a publish meanwhile would take the zip this install has
    // renamed in, before its digest, for what a dead publish left (`publishVariant`).
    return withLockfileTurn(path.join(path.dirname(files.zip), '.publish'), () => this.installVariant(bytes, meta, actual, files, targets), {
      what: `${meta.name}@${meta.version} in ${this.shown}`,
      interruptible: this.options.interruptible === true,
    });
  }

  private async installVariant(bytes: Uint8Array, meta: ArtifactMeta, actual: string, files: VariantFiles, targets: string[]): Promise<{ zipPath: string }> {
    const { paths: staged, release } = await stageFiles(
      [
        [files.zip, bytes],
        [files.sha, actual],
        [targets[2] as string, metaJson(meta)],
      ],
      this.options.interruptible === true,
    );
    try {
      return await this.commitInstall(meta, staged, targets);
    } finally {
      release();
    }
  }

  /** Renames `staged` over `targets`, each old file kept aside until all are in place. */
  private async commitInstall(meta: ArtifactMeta, staged: string[], targets: string[]): Promise<{ zipPath: string }> {
    // The old files are kept by a second link each and replaced by renames over them, so every
    // name always holds either the old file or the new one: a reader never finds the version gone.
    const backups = new Map<string, string>();
    const committed: string[] = [];
    try {
      for (const target of targets) {
        if (await pathPresent(target)) {
          const backup = `${temporarySibling(target)}.bak`;
          await fs.link(target, backup);
          backups.set(target, backup);
        }
      }
      for (const [index, target] of targets.entries()) {
        await fs.rename(staged[index] as string, target);
        committed.push(target);
      }
    } catch (error) {
      // A backup that could not be put back is kept: it is the only copy of what was there.
      const unrestored = new Set<string>();
      for (const target of committed.reverse()) {
        const backup = backups.get(target);
        if (backup === undefined) await fs.rm(target, { force: true });
        else await fs.rename(backup, target).catch(() => unrestored.add(backup));
      }
      const leftovers = [...staged, ...[...backups.values()].filter((backup) => !unrestored.has(backup))];
      await Promise.all(leftovers.map((file) => fs.rm(file, { force: true })));
      throw new MurmurError(
        systemFailureCode(error),
        `could not install ${meta.name}@${meta.version} into ${this.shown}: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error, hint: systemFailureHint(error) },
      );
    }
    await Promise.all([...backups.values()].map((backup) => fs.rm(backup, { force: true })));
    return { zipPath: targets[0] as string };
  }
}

function unionOfPlatforms(kept: Array<[string, string]>, added: Array<[string, string]>): Array<[string, string]> {
  const union = [...kept];
  for (const pair of added) if (!union.some(([os, arch]) => os === pair[0] && arch === pair[1])) union.push(pair);
  return union;
}

function metaJson(meta: ArtifactMeta): string {
  const ordered = {
    meta: {
      name: meta.name,
      version: meta.version,
      runtime: meta.runtime,
      artifact_runtime: meta.artifact_runtime,
      platforms: meta.platforms,
      description: meta.description,
      tags: meta.tags,
    },
  };
  return JSON.stringify(ordered, null, 2);
}

/** Temporary siblings written for a store's commit, and the release of their removal on an interrupt. */
interface StagedFiles {
  paths: string[];
  /** Called once the commit is done, whatever became of the files: renamed into place or removed. */
  release(): void;
}

/**
 * Writes each `[target, data]` to a fsynced temporary sibling. `interruptible`: an interrupt
 * (Ctrl-C during a publish or an install of a large archive) removes those still there before the
 * process ends, where each stayed in the store as a hidden `.name.pid.tmp` of the archive's size.
 */
async function stageFiles(files: Array<[string, Uint8Array | string]>, interruptible: boolean): Promise<StagedFiles> {
  const paths: string[] = [];
  const releases: Array<() => void> = [];
  const release = () => {
    for (const each of releases.splice(0)) each();
  };
  try {
    for (const [target, data] of files) {
      const temporary = temporarySibling(target);
      paths.push(temporary);
      if (interruptible) releases.push(removedIfInterrupted(temporary));
      const handle = await fs.open(temporary, 'wx', 0o644);
      try {
        await handle.writeFile(data);
        await handle.sync();
      } finally {
        await handle.close();
      }
    }
    return { paths, release };
  } catch (error) {
    await Promise.all(paths.map((file) => fs.rm(file, { force: true })));
    release();
    throw error;
  }
}

/** How often a zip that does not match its digest is read again before it is handed on as it is. */
const PAIR_READS = 5;

/**
 * A zip and its digest, read as a pair. A reinstall replaces the two by two renames, so a reader
 * between them holds the new zip beside the old digest (or the reverse): a pair that does not match
 * is read again a few times, and only one that still does not is handed on, for the caller to
 * refuse. Undefined when either file is missing.
 */
function refuseReservedVersion(meta: ArtifactMeta, verb: 'published' | 'installed'): void {
  if (isReservedVersion(meta.version))
    throw new MurmurError('E-REG-004', `version '${meta.version}' is reserved and cannot be ${verb}`, {
      hint: 'reserved strings: latest, stable, edge — use an explicit version',
    });
}

async function readPair(files: VariantFiles): Promise<{ bytes: Buffer; recordedSha256: string; bytesSha256: string } | undefined> {
  for (let read = 1; ; read += 1) {
    const [bytes, sha] = await Promise.all([readIfExists(files.zip), readIfExists(files.sha)]);
    if (bytes === undefined || sha === undefined) return undefined;
    const recordedSha256 = sha.toString('utf8').trim();
    const bytesSha256 = sha256Hex(bytes);
    if (read >= PAIR_READS || recordedSha256 === '' || bytesSha256 === recordedSha256.toLowerCase()) return { bytes, recordedSha256, bytesSha256 };
    await new Promise((resolve) => setTimeout(resolve, 10 * read));
  }
}

/**
 * A store's file, read only if it is a regular file. Opened without blocking and judged by its
 * descriptor: a FIFO at a store's name held `mur list -g`, `mur search` and `mur install` for
 * ever, and a link to a device (`/dev/zero`) was read until memory gave out.
 */
async function readIfExists(file: string): Promise<Buffer | undefined> {
  try {
    const handle = await fs.open(file, OPEN_WITHOUT_BLOCKING);
    try {
      const stat = await handle.stat();
      if (!stat.isFile() && !stat.isDirectory())
        throw new MurmurError('E-REG-002', `${path.basename(file)} in the store is ${kindOf(stat)}, not a regular file: nothing was read from it`, {
          path: file,
          hint: 'remove what is there and reinstall the artifact',
        });
      return await handle.readFile();
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (error instanceof MurmurError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    // A store's file that is a directory, or cannot be read, is said with a code and its name,
    // never passed on as a bare system error.
    throw new MurmurError(
      code === 'EACCES' || code === 'EPERM' ? 'E-IO-002' : 'E-REG-002',
      `cannot read ${path.basename(file)} in the store: ${code ?? (error as Error).message}`,
      {
        path: file,
        hint: code === 'EISDIR' ? 'a store entry is a file: remove what is there and reinstall the artifact' : 'reinstall the artifact',
      },
    );
  }
}

async function pathPresent(file: string): Promise<boolean> {
  try {
    await fs.lstat(file);
    return true;
  } catch {
    return false;
  }
}

async function readDirectories(dir: string): Promise<string[]> {
  try {
    const entries = await fs.readdir(dir, { withFileTypes: true });
    return entries.filter((entry) => entry.isDirectory() && !entry.name.startsWith('.')).map((entry) => entry.name);
  } catch {
    return [];
  }
}
