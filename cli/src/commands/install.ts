import { promises as fs, lstatSync, readlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ArtifactMeta, LOCKFILE_NAME, MurmurError, type MurmurLock, type MurmurWarning, parseCapsuleManifest, upsertLockEntry } from '@murmur/shared';
import {
  ArtifactStore,
  type ArtifactSource,
  RoostRegistryClient,
  inspectArchive,
  readLockfile,
  storeSource,
  verifyResolved,
  withLockfileTurn,
  writeLockfile,
} from '@murmur/shared/artifacts';
import { defaultArtifactsDir, globalStoreDir, projectStoreDir, readManifestText } from '@murmur/shared/node';
import { type Output, UsageError, formatFailure } from '../output.js';
import { findProjectRoot, manifestRegistry, registryChoice, requireProjectRoot } from '../project.js';

/**
 * `mur install <zip | name@version>`, or with no reference every artifact the manifest declares:
 * into the project store (or the global one with `-g`), pinning each in `murmur.lock`.
 *
 * An install lands whole or not at all: the bytes are verified against their digest and the
 * archive vetted before the store is touched, a pin it would contradict is refused (`E-REG-005`)
 * before anything is written, and the lock is upserted only after the store holds the bytes.
 */

interface InstallOptions {
  global?: boolean;
  registry?: string;
}

interface Target {
  store: ArtifactStore;
  /** The project whose lock an install pins; absent for a global install. */
  projectRoot: string | undefined;
}

function target(options: InstallOptions): Target {
  if (options.global) return { store: new ArtifactStore(globalStoreDir(), 'global', { interruptible: true }), projectRoot: undefined };
  const projectRoot = requireProjectRoot();
  refuseStoreOutside(projectRoot);
  return { store: new ArtifactStore(projectStoreDir(projectRoot), 'project', { interruptible: true }), projectRoot };
}

/**
 * The project's store must be a directory of the project's own, as staging takes it (`E-PRJ-002`
 * for a store file that resolves outside the capsule directory): an install through a linked
 * `.murmur` wrote the artifact where the link led, said it was installed, and every run refused it.
 * `within`: a directory in the store, each of whose parents up to the project is looked at (an
 * artifact's `<name>/<version>/` once its archive names them: a linked `<name>` led out the same way).
 */
function refuseStoreOutside(projectRoot: string, within: string = projectStoreDir(projectRoot)): void {
  for (let dir = within; dir.startsWith(`${projectRoot}${path.sep}`); dir = path.dirname(dir)) {
    const stat = lstatSync(dir, { throwIfNoEntry: false });
    if (stat?.isSymbolicLink())
      throw new MurmurError(
        'E-PRJ-002',
        `the project store's '${path.relative(projectRoot, dir)}' is a symlink (to ${readlinkSync(dir)}): a run stages only a store inside the capsule directory, so nothing installed there could be used`,
        { path: dir, hint: `replace the link ${dir} with a directory of the project's own` },
      );
  }
}

/**
 * Where an install looks, in order. The global store is always the first local source, also for
 * `-g` (as upstream): a version already there is reinstalled from its own stored bytes, which is
 * idempotent when they are intact and an integrity error when they were changed after publishing.
 */
async function sources(options: InstallOptions): Promise<ArtifactSource[]> {
  const choice = registryChoice(options.registry ?? (await manifestRegistry()));
  if (choice.kind === 'remote') return [new RoostRegistryClient(choice.url)];
  const global = storeSource(new ArtifactStore(globalStoreDir(), 'global'));
  // The artifacts this runtime ships (its drivers), last, as staging finds them: what `mur run`
  // and `mur doctor` accept from there, `mur install` can pin too.
  const shippedDir = defaultArtifactsDir();
  const shipped = shippedDir ? [storeSource(new ArtifactStore(shippedDir, 'default'))] : [];
  if (choice.kind === 'local') return [global, ...shipped];
  const roostUrl = process.env.MURMUR_ROOST_URL?.trim();
  return [global, ...(roostUrl ? [new RoostRegistryClient(roostUrl)] : []), ...shipped];
}

function isZipReference(reference: string): boolean {
  return reference.startsWith('./') || reference.startsWith('../') || reference.startsWith('/') || reference.endsWith('.mur.zip');
}

function tildePath(file: string): string {
  const home = os.homedir();
  return file.startsWith(`${home}/`) ? `~/${file.slice(home.length + 1)}` : file;
}

async function checkPin(projectRoot: string | undefined, name: string, version: string, sha256: string): Promise<MurmurLock | undefined> {
  if (!projectRoot) return undefined;
  const lock = await readLockfile(path.join(projectRoot, LOCKFILE_NAME));
  const pin = lock?.artifacts.find((entry) => entry.name === name);
  if (pin && (pin.resolved_version !== version || pin.sha256.wasm !== sha256)) {
    throw new MurmurError(
      'E-REG-005',
      `murmur.lock conflict for '${name}': pinned ${name}@${pin.resolved_version} (sha256 ${pin.sha256.wasm}), but this install is ${name}@${version} (sha256 ${sha256})`,
      {
        hint: 'if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again',
      },
    );
  }
  return lock;
}

/** The digest murmur.lock pins for exactly `name@version`, if the project's lock pins that version. */
async function pinnedDigest(projectRoot: string | undefined, name: string, version: string): Promise<string | undefined> {
  if (!projectRoot) return undefined;
  const pin = (await readLockfile(path.join(projectRoot, LOCKFILE_NAME)))?.artifacts.find((entry) => entry.name === name);
  return pin?.resolved_version === version ? pin.sha256.wasm : undefined;
}

async function pin(projectRoot: string | undefined, lock: MurmurLock | undefined, name: string, version: string, sha256: string): Promise<void> {
  if (!projectRoot) return;
  await writeLockfile(path.join(projectRoot, LOCKFILE_NAME), upsertLockEntry(lock, { name, resolved_version: version, sha256: { wasm: sha256 } }));
}

/**
 * Vets the bytes and stores them as what their own archive says they are: the meta (runtime,
 * platforms) is derived from the archive, never taken from a source's index, which is not
 * verified and whose platform would become part of a file name. A reference's bytes must be the
 * artifact it names (`expected`): a source serving another's is `E-REG-002`, before anything is
 * written. Only a registry install pins (SPEC §2.4: not `-g`, not a local file), but every install
 * into a project refuses bytes its lock contradicts.
 */
async function installBytes(
  into: Target,
  bytes: Buffer,
  label: string,
  expected: { name: string; version: string; location: string } | undefined,
): Promise<{ meta: ArtifactMeta; zipPath: string; replaced: string | undefined }> {
  const { meta, sha256 } = await inspectArchive(bytes, label);
  if (expected && (meta.name !== expected.name || meta.version !== expected.version)) {
    throw new MurmurError(
      'E-REG-002',
      `${expected.location} holds ${meta.name}@${meta.version} under ${expected.name}@${expected.version}: the bytes are another artifact's; nothing was installed`,
      { path: `${expected.name}@${expected.version}`, hint: 'publish the artifact again under its own name, or ask the registry’s keeper' },
    );
  }
  const install = async (): Promise<{ meta: ArtifactMeta; zipPath: string; replaced: string | undefined }> => {
    if (into.projectRoot) refuseStoreOutside(into.projectRoot, into.store.versionDir(meta.name, meta.version));
    const lock = await checkPin(into.projectRoot, meta.name, meta.version, sha256);
    // An install overwrites, as upstream's does; other bytes under the same version are said.
    const before = meta.runtime === 'native' ? undefined : await into.store.recordedSha256(meta.name, meta.version).catch(() => undefined);
    const { zipPath } = await into.store.install(bytes, meta, sha256);
    if (expected) await pin(into.projectRoot, lock, meta.name, meta.version, sha256);
    return { meta, zipPath, replaced: before !== undefined && before !== sha256 ? before : undefined };
  };
  // The lock's check, the install and the pin in one turn: another install's pin is not lost.
  return into.projectRoot ? withLockfileTurn(path.join(into.projectRoot, LOCKFILE_NAME), install, { interruptible: true }) : install();
}

/**
 * `W-REG-001`: an install replaced other bytes under the same name and version. A store's version
 * is what a lock pins, so a project that pinned the old bytes now refuses the new ones.
 */
function replacedWarning(name: string, version: string, replaced: string, zipPath: string): MurmurWarning {
  return {
    code: 'W-REG-001',
    message: `${name}@${version} at ${tildePath(zipPath)} held other bytes (sha256 ${replaced}), which this install replaced; a murmur.lock that pins them refuses these (a published version does not change: publish a new one)`,
    path: `${name}@${version}`,
  };
}

async function installReference(reference: string, into: Target, options: InstallOptions, output: Output): Promise<void> {
  if (isZipReference(reference)) {
    const file = path.resolve(reference);
    const bytes = await fs.readFile(file).catch((error: Error) => {
      throw new MurmurError('E-IO-001', `failed to read ${reference}: ${error.message}`, {
        path: file,
        hint: 'give the path of a .mur.zip file (mur build writes one), or name@version to install from a registry',
      });
    });
    const { meta, zipPath, replaced } = await installBytes(into, bytes, reference, undefined);
    output.out(`Installed ${meta.name}@${meta.version} from ${reference}`);
    if (replaced) output.warn(replacedWarning(meta.name, meta.version, replaced, zipPath));
    return;
  }
  const at = reference.lastIndexOf('@');
  const name = reference.slice(0, at).trim();
  const version = reference.slice(at + 1).trim();
  if (at <= 0 || name === '' || version === '') {
    throw new UsageError(`artifact reference '${reference}' must be in the format <name@version> or a path to a .mur.zip`, {
      path: reference,
      hint: 'e.g. mur install hello@0.1.0, or mur install ./hello-0.1.0.mur.zip (mur search lists what a registry holds)',
    });
  }
  const from = await sources(options);
  // A lock that pins this version names its bytes: a source that holds others (a global store's
  // older build) is passed for the next, rather than taken and refused as a conflict.
  const pinned = await pinnedDigest(into.projectRoot, name, version);
  const holdingOthers: string[] = [];
  for (const source of from) {
    const resolved = await source.resolve(name, version);
    if (!resolved) continue;
    const digest = verifyResolved(resolved);
    if (pinned !== undefined && digest !== pinned) {
      holdingOthers.push(`${tildePath(resolved.location)} (sha256 ${digest})`);
      continue;
    }
    const { zipPath, replaced } = await installBytes(into, resolved.bytes, `${name}@${version}`, { name, version, location: resolved.location });
    output.out(`Installed ${name}@${version} → ${tildePath(zipPath)}`);
    if (replaced) output.warn(replacedWarning(name, version, replaced, zipPath));
    return;
  }
  if (holdingOthers.length > 0)
    throw new MurmurError(
      'E-REG-005',
      `murmur.lock pins ${name}@${version} as sha256 ${pinned}, and no source holds those bytes: ${holdingOthers.join(', ')} ${holdingOthers.length === 1 ? 'holds' : 'hold'} others; nothing was installed`,
      {
        path: LOCKFILE_NAME,
        hint: 'install the pinned bytes from the registry they came from (--registry <roost url>); to take other bytes on purpose, remove the entry from murmur.lock and install again',
      },
    );
  const searched = from.map((source) => source.location).join(', ');
  // Published where this install looked: a roost named with --registry is published to with it too.
  const registry = registryChoice(options.registry);
  throw new MurmurError('E-REG-001', `artifact ${name}@${version} not found in registry: looked in ${searched}`, {
    hint:
      registry.kind === 'remote'
        ? `publish it there first ('mur publish <zip> --registry ${registry.url}'), or name a roost that has it`
        : `publish it first ('mur publish <zip>'), or point MURMUR_ROOST_URL at a roost that has it`,
  });
}

/**
 * A reference with a source prefix (`github:acme/tool@1.0.0`), refused before anything is looked
 * up: upstream's `github:` release sources are not built here, and any other prefix is unknown
 * (SPEC §2.5 rejects it).
 */
function refuseSourcePrefix(reference: string): void {
  const prefix = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(reference)?.[1];
  if (prefix === undefined || isZipReference(reference)) return;
  if (prefix.toLowerCase() === 'github')
    throw new MurmurError('E-IO-003', `'${reference.slice(0, 120)}': installing from GitHub releases (github:) is not built in this runtime`, {
      path: reference,
      hint: "download the release's .mur.zip and install its path (mur install ./<name>-<version>.mur.zip), or publish it to a roost and install name@version",
    });
  throw new UsageError(`'${reference.slice(0, 120)}': unknown install source '${prefix}:'`, {
    path: reference,
    hint: 'give name@version (from the stores and MURMUR_ROOST_URL), or the path of a .mur.zip',
  });
}

export async function installCommand(reference: string | undefined, options: InstallOptions, output: Output): Promise<number> {
  if (reference !== undefined) refuseSourcePrefix(reference);
  const into = target(options);
  if (reference !== undefined) {
    await installReference(reference, into, options, output);
    return 0;
  }
  // With no artifact named, the manifest's are installed: -g alone has none to take them from.
  if (options.global && findProjectRoot() === undefined)
    throw new MurmurError(
      'E-IO-001',
      'no project root found (no murmur.yaml in current or parent directories) for mur install -g to install the artifacts of',
      {
        hint: 'name what to install into the global store: mur install -g <name>@<version>, or mur install -g <file>.mur.zip',
      },
    );
  const projectRoot = requireProjectRoot();
  const text = await readManifestText(path.join(projectRoot, 'murmur.yaml'));
  const { manifest, warnings } = parseCapsuleManifest(text);
  for (const warning of warnings) output.warn(warning);
  const wanted = manifest.artifacts.filter((artifact) => artifact.source === undefined);
  if (wanted.length === 0) {
    output.out('No artifacts in manifest.');
    return 0;
  }
  const failures: Array<{ label: string; error: unknown }> = [];
  for (const artifact of wanted) {
    const label = `${artifact.name}@${artifact.version}`;
    try {
      await installReference(label, { store: into.store, projectRoot: into.projectRoot }, options, output);
    } catch (error) {
      failures.push({ label, error });
    }
  }
  if (failures.length === 0) return 0;
  // What failed is an error report: on stderr, where stdout keeps what was installed.
  output.err('');
  output.err(`${failures.length} of ${wanted.length} artifact${wanted.length === 1 ? '' : 's'} failed to install:`);
  for (const failure of failures) {
    output.err('');
    output.err(`  ${failure.label}`);
    for (const line of formatFailure(failure.error).split('\n')) output.err(`    ${line}`);
  }
  return 1;
}
