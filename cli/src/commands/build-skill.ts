import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import {
  type ArtifactManifest,
  MAX_DESCRIPTION_CHARS,
  MurmurError,
  type MurmurWarning,
  artifactNameProblem,
  artifactVersionProblem,
  foldedEntryName,
  indexEntryRefusal,
  isReservedVersion,
  packagingTypeOf,
  parseArtifactManifest,
  parseYamlSource,
} from '@murmur/shared';
import {
  MAX_ENTRIES,
  MAX_ENTRY_BYTES_ENV,
  MAX_MANIFEST_BYTES,
  MurZip,
  type ZipInput,
  archiveOutputPath,
  declaredEntryName,
  inspectArchive,
  maxEntryBytesFromEnv,
  refuseArchiveOverCeiling,
  scanForLiteralSecrets,
  sha256Hex,
  writeMurZip,
} from '@murmur/shared/artifacts';
import { readManifestText, writeFileAtomic } from '@murmur/shared/node';
import { Document, isScalar, parseDocument } from 'yaml';
import { type Output, UsageError, oneLine } from '../output.js';

/**
 * `mur build --skill [NAME] [source]`: a folder or `.zip` holding a `SKILL.md` (any case) becomes
 * a skill artifact, `<name>-<version>.mur.zip`, without a `murmur.yaml` written by hand.
 *
 * The archive is the one `mur build` makes of a hand-written skill (`runtime: skill`, packaging
 * `static`): `murmur.yaml` first, then `skill.md` (always that name, whatever case the source
 * used: staging reads it by that name), then whatever else a `murmur.yaml` the source brings
 * declares in `requires_files`. So it publishes, installs and stages as any skill does; before it
 * is written it is read back the way `mur publish` reads an archive, so an archive this command
 * writes is one every reader takes.
 *
 * Everything that can refuse the build is decided before anything is written, and the archive is
 * written to a temporary file beside its target and renamed: a refused or interrupted build leaves
 * nothing, and an archive already at the target is replaced whole or not at all (upstream writes
 * over an earlier build of the same name and version too).
 */
export async function buildSkillCommand(
  skill: string | true,
  source: string | undefined,
  options: { output?: string; json?: boolean; version?: string; description?: string },
  output: Output,
): Promise<number> {
  const { explicitName, input } = skillArguments(skill, source);
  if (explicitName !== undefined)
    refuseBadName(
      explicitName,
      'the name given to --skill',
      `leave it out to infer one from the path, or, if '${explicitName}' is the folder or .zip to package, write it as a path: mur build --skill ./${explicitName}`,
    );
  if (options.version !== undefined) refuseBadVersion(options.version, '--version');
  if (options.description !== undefined) refuseBadDescription(options.description);

  const ceiling = maxEntryBytesFromEnv();
  const skillSource = await openSkillSource(input, await nameThatIsAPath(explicitName, source), ceiling);
  try {
    const { manifestText, manifest } = await skillManifest(skillSource, explicitName, options);
    const warnings: MurmurWarning[] = scanForLiteralSecrets(parseYamlSource(manifestText).value);
    const files = await packedFiles(skillSource, manifest, manifestText, warnings, ceiling);
    // Upstream writes it in the current directory, not beside the skill.
    const outputPath = await archiveOutputPath('.', archiveFileName(manifest), options.output);

    const bytes = await writeMurZip(files);
    refuseArchiveOverCeiling(bytes, ceiling);
    // Read back as `mur publish` and `mur install` read it: what this writes, they take.
    const inspected = await inspectArchive(bytes, outputPath, { publishing: true });

    await fs.mkdir(path.dirname(outputPath), { recursive: true });
    await writeFileAtomic(outputPath, bytes, { interruptible: true });

    for (const warning of warnings) output.warn(warning);
    if (options.json) {
      output.out(
        JSON.stringify({
          path: outputPath,
          name: manifest.name,
          version: manifest.version,
          kind: 'artifact',
          runtime: inspected.meta.runtime,
          sha256: sha256Hex(bytes),
          entries: files.map((file) => file.name),
        }),
      );
    } else {
      output.out(`Built artifact: ${oneLine(outputPath)}`);
    }
    return 0;
  } finally {
    skillSource.close();
  }
}

/** The version a skill gets when `--version` is not given (upstream's documented default). */
export const DEFAULT_SKILL_VERSION = '0.1.0';

/** The name an inferred one falls back to when nothing of the path survives (upstream's). */
const FALLBACK_SKILL_NAME = 'skill';

/** The payload every skill archive carries at its root, by this exact name: staging reads it so. */
const SKILL_FILE = 'skill.md';
const MANIFEST_FILE = 'murmur.yaml';

/**
 * What `--skill` and the positional source mean together, by upstream's rule: a value after
 * `--skill` that holds `/` or `\`, or starts with `.`, is the input path (the name is inferred);
 * any other value is the artifact's name, and the input is the positional source (default `.`).
 * One addition: a value ending in `.zip` is a path too. Upstream's own example,
 * `mur build --skill external-skill.zip`, is one its rule would take for a name (and then fail
 * to find SKILL.md in `.`); no artifact name can hold a `.`, so no name is lost by it.
 * Two paths at once is a usage error, never a silent choice of one.
 */
export function skillArguments(skill: string | true, source: string | undefined): { explicitName: string | undefined; input: string } {
  if (skill === true) return { explicitName: undefined, input: source ?? '.' };
  if (!looksLikePath(skill)) return { explicitName: skill, input: source ?? '.' };
  if (source !== undefined)
    throw new UsageError(
      `--skill ${skill} is a path (it has '/' or '\\', starts with '.' or ends in .zip), and ${source} is another; mur build --skill packages one`,
      {
        path: '--skill',
        hint: `package one of them: mur build --skill ${skill}, or name the artifact: mur build --skill <name> ${source}`,
      },
    );
  return { explicitName: undefined, input: skill };
}

function looksLikePath(value: string): boolean {
  return value.includes('/') || value.includes('\\') || value.startsWith('.') || value.toLowerCase().endsWith('.zip');
}

/**
 * The name given to `--skill`, when it is also the name of a folder or `.zip` here and no source
 * was given: `mur build --skill my-skill` packages the current directory as `my-skill`, and a user
 * who meant the folder `my-skill` is told how to say so if the current directory holds no skill.
 */
async function nameThatIsAPath(explicitName: string | undefined, source: string | undefined): Promise<string | undefined> {
  if (explicitName === undefined || source !== undefined) return undefined;
  const stat = await fs.stat(explicitName).catch(() => undefined);
  return stat?.isDirectory() || (stat?.isFile() && explicitName.toLowerCase().endsWith('.zip')) ? explicitName : undefined;
}

/** Names longer than this are refused by every reader (`artifactNameProblem`). */
const LONGEST_NAME = 100;

/**
 * The artifact name upstream infers from the input's last path component: a trailing `/` and a
 * `.zip` (any case) dropped, lowercased, every other character but ASCII letters, digits and `-`
 * replaced, runs of replacements collapsed, `-` and `_` trimmed from both ends.
 *
 * Two departures, both so that the name is one the artifact manifest accepts (lowercase letters,
 * digits and inner hyphens: `mur publish` refuses any other): a replaced character becomes `-`,
 * not upstream's `_` (`My Skill.zip` is `my-skill`, where upstream writes `my_skill`), and a run
 * of replaced characters together with the hyphens around it becomes one `-` (`a _ b` is `a-b`);
 * hyphens the name already had in a row are kept. And the component is the resolved path's, so
 * `.` is the current directory's name, where upstream fell back to `skill`; `skill` remains the
 * name when nothing of the component survives (`---`, `日本語`).
 */
export function inferSkillName(input: string): string {
  const component = path.basename(path.resolve(input));
  const stem = component.toLowerCase().endsWith('.zip') ? component.slice(0, -'.zip'.length) : component;
  const name = stem
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, (run) => (/^-+$/.test(run) ? run : '-'))
    .replace(/^-+|-+$/g, '');
  return name === '' ? FALLBACK_SKILL_NAME : name;
}

/**
 * Refuses a name the artifact manifest would refuse. `hint` says what to do instead: for a name
 * typed after `--skill`, that a path is written with a `/` (`./My_Skill`), since a user who typed a
 * folder's name without one asked for it as a name.
 */
function refuseBadName(name: string, what: string, hint: string): void {
  const problem = artifactNameProblem(name);
  if (problem === undefined) return;
  throw new MurmurError('E-BLD-001', `invalid artifact name '${name.length > 120 ? `${name.slice(0, 120)}…` : name}' (${what}): ${problem}`, {
    path: 'name',
    hint: `artifact names are lowercase letters, digits and inner hyphens, e.g. my-skill; ${hint}`,
  });
}

function refuseBadVersion(version: string, what: string): void {
  const problem = artifactVersionProblem(version);
  if (problem !== undefined)
    throw new MurmurError('E-BLD-001', `invalid artifact version '${version.length > 60 ? `${version.slice(0, 60)}…` : version}' (${what}): ${problem}`, {
      path: 'version',
      hint: 'the version names the archive and its place in a store, e.g. 0.1.0 or 1.2.0-rc.1+build.5',
    });
  // A version that can never be published is refused before anything is written, not at `mur publish`.
  if (isReservedVersion(version))
    throw new MurmurError('E-REG-004', `the version '${version}' (${what}) is reserved and can never be published`, {
      path: 'version',
      hint: "give a concrete version, e.g. --version 1.0.0 ('latest', 'stable' and 'edge' name whatever is newest)",
    });
}

function refuseBadDescription(description: string): void {
  if (description.trim() === '')
    throw new UsageError('--description is empty', {
      path: '--description',
      hint: 'give the skill a line that says what it is for, or leave --description out',
    });
  if (description.length > MAX_DESCRIPTION_CHARS)
    throw new MurmurError(
      'E-BLD-001',
      `the description (--description) is ${description.length} characters; a packaged one is at most ${MAX_DESCRIPTION_CHARS}`,
      {
        path: 'description',
        hint: 'registries index the description for search: keep it to a line or a paragraph',
      },
    );
}

/** A file of the source as it is packed: its bytes, and whether it is executable. */
interface SourceFile {
  data: Buffer;
  executable: boolean;
}

/**
 * The folder or zip a skill is packaged from: its `SKILL.md` (found at the root in any case), the
 * `murmur.yaml` it may bring, and, for what such a manifest declares, any other file by its path.
 */
interface SkillSource {
  /** The input as the user named it, resolved: for messages. */
  readonly label: string;
  readonly kind: 'folder' | 'zip';
  readonly skill: SourceFile;
  readonly manifestText: string | undefined;
  /** The file at `entry` (a normalised relative path), refused if it is missing or unsafe. */
  read(entry: string, label: string): Promise<SourceFile>;
  close(): void;
}

async function openSkillSource(input: string, misreadName: string | undefined, ceiling: number): Promise<SkillSource> {
  const resolved = path.resolve(input);
  // The input itself is followed if it is a link: the user named it. Inside it, nothing is.
  const stat = await fs.stat(resolved).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT' || error.code === 'ENOTDIR')
      throw new MurmurError('E-IO-001', `skill source not found: ${resolved}`, {
        path: resolved,
        hint: 'pass the folder or .zip that holds SKILL.md: mur build --skill <path>',
      });
    throw error;
  });
  if (stat.isDirectory()) return openSkillFolder(resolved, misreadName, ceiling);
  if (stat.isFile() && resolved.toLowerCase().endsWith('.zip')) return openSkillZip(resolved, stat.size, ceiling);
  throw new MurmurError('E-IO-001', `${resolved} is ${stat.isFile() ? 'a file' : 'neither a file nor a folder'}, not a folder or a .zip holding SKILL.md`, {
    path: resolved,
    hint: stat.isFile()
      ? `pass the folder that holds it (mur build --skill ${path.dirname(resolved)}), or a .zip of that folder's files`
      : 'pass the folder or .zip that holds SKILL.md',
  });
}

/** The refusal when the input holds no SKILL.md at its root, with what the user may have meant. */
function noSkillFile(where: string, misreadName: string | undefined, nested: readonly string[]): MurmurError {
  const hints: string[] = [];
  if (nested.length > 0)
    hints.push(
      `it holds ${nested.slice(0, 3).join(', ')}${nested.length > 3 ? ', …' : ''} below its root; a skill's SKILL.md is read from the root: zip the files of the skill's folder, not the folder, or unzip it and pass the folder`,
    );
  if (misreadName !== undefined)
    hints.push(
      `'${misreadName}' was taken as the artifact's name (a value after --skill is a name unless it has a '/', starts with '.' or ends in .zip); to package the one here, write its path: mur build --skill ./${misreadName}`,
    );
  if (hints.length === 0) hints.push('put the skill in a file named SKILL.md (any case) at the root of the folder or .zip');
  return new MurmurError('E-IO-001', `SKILL.md not found in ${where} (case-insensitive search found no match)`, { path: where, hint: hints.join('; ') });
}

function twoOfOne(where: string, names: readonly string[], what: string): MurmurError {
  return new MurmurError(
    'E-BLD-002',
    `${where} holds ${names.map((name) => `'${name}'`).join(' and ')}, which differ only in case; both would pack as ${what}`,
    {
      path: where,
      hint: `keep one of them in ${where}`,
    },
  );
}

/** The one root entry whose name is `wanted` in any case: none, or refused when there are several. */
function findInAnyCase<T extends { name: string }>(entries: readonly T[], wanted: string, where: string): T | undefined {
  const found = entries.filter((entry) => entry.name.toLowerCase() === wanted);
  if (found.length > 1)
    throw twoOfOne(
      where,
      found.map((entry) => entry.name),
      wanted,
    );
  return found[0];
}

/** What a folder's entry may not be, as a refusal: a link (anything outside the folder could be packed), or no regular file. */
function notPackable(file: string, label: string, stat: { isSymbolicLink(): boolean; isFile(): boolean }): MurmurError | undefined {
  if (stat.isSymbolicLink())
    return new MurmurError('E-BLD-002', `${label} is a symlink (${file}); mur build packs files themselves, never what a link points to`, {
      path: file,
      hint: 'copy the file it points to into the folder in its place',
    });
  if (!stat.isFile())
    return new MurmurError('E-BLD-002', `${label} is not a regular file (${file})`, {
      path: file,
      hint: 'a skill packs regular files; a directory is packed by declaring the files in it',
    });
  return undefined;
}

/**
 * Reads a regular file of the folder: opened without following a link and without blocking (a
 * FIFO put in the file's place cannot hold the build), judged by its descriptor, held to the
 * ceiling every reader of the archive will hold it to.
 */
async function readFolderFile(file: string, label: string, ceiling: number): Promise<SourceFile> {
  const handle = await fs
    .open(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW | constants.O_NOCTTY)
    .catch(async (error: NodeJS.ErrnoException) => {
      if (error.code === 'ELOOP') throw notPackable(file, label, await fs.lstat(file)) ?? error;
      throw error;
    });
  try {
    const stat = await handle.stat();
    const refusal = notPackable(file, label, { isSymbolicLink: () => false, isFile: () => stat.isFile() });
    if (refusal) throw refusal;
    if (stat.size > ceiling) throw overCeiling(label, stat.size, ceiling);
    const data = await handle.readFile();
    if (data.length > ceiling) throw overCeiling(label, data.length, ceiling);
    return { data, executable: (stat.mode & 0o111) !== 0 };
  } finally {
    await handle.close();
  }
}

function overCeiling(label: string, size: number, ceiling: number): MurmurError {
  return new MurmurError('E-ART-002', `${label} is ${size} bytes, over the ${ceiling}-byte ceiling every reader holds an archive entry to`, {
    hint: `keep it out of the skill, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
  });
}

async function openSkillFolder(folder: string, misreadName: string | undefined, ceiling: number): Promise<SkillSource> {
  const entries = await fs.readdir(folder, { withFileTypes: true });
  const skillEntry = findInAnyCase(entries, SKILL_FILE, folder);
  if (!skillEntry) throw noSkillFile(folder, misreadName, []);
  const skillPath = path.join(folder, skillEntry.name);
  const skillRefusal = notPackable(skillPath, skillEntry.name, skillEntry);
  if (skillRefusal) throw skillRefusal;
  const skill = await readFolderFile(skillPath, skillEntry.name, ceiling);

  const manifestEntry = findInAnyCase(entries, MANIFEST_FILE, folder);
  let manifestText: string | undefined;
  if (manifestEntry) {
    const manifestPath = path.join(folder, manifestEntry.name);
    const refusal = notPackable(manifestPath, manifestEntry.name, manifestEntry);
    if (refusal) throw refusal;
    manifestText = await readManifestText(manifestPath);
  }

  return {
    label: folder,
    kind: 'folder',
    skill,
    manifestText,
    async read(entry, label) {
      // Every directory on the way must be a real one: a linked `refs/` would pack whatever it points at.
      const components = entry.split('/');
      for (let depth = 1; depth < components.length; depth += 1) {
        const prefix = path.join(folder, ...components.slice(0, depth));
        const stat = await fs.lstat(prefix).catch(() => undefined);
        if (stat?.isSymbolicLink())
          throw new MurmurError('E-BLD-002', `${label} '${entry}' is reached through a symlink (${prefix}); declare files inside the skill's folder`, {
            path: entry,
            hint: 'copy the files into the folder instead of linking to them',
          });
      }
      const file = path.join(folder, entry);
      const stat = await fs.lstat(file).catch(() => undefined);
      if (!stat) throw missingDeclared(entry, folder);
      const refusal = notPackable(file, `${label} '${entry}'`, stat);
      if (refusal) throw refusal;
      return readFolderFile(file, `${label} '${entry}'`, ceiling);
    },
    close() {},
  };
}

function missingDeclared(entry: string, where: string): MurmurError {
  return new MurmurError('E-IO-003', `missing required file '${entry}' in ${where}`, {
    path: entry,
    hint: `add ${entry} there, or take it out of requires_files in its murmur.yaml`,
  });
}

/**
 * A zip is read as every archive is (`MurZip`: an unsafe entry refuses it whole, each entry is
 * held to `MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES`), and only its root is searched, as upstream
 * does: a SKILL.md inside a folder of the zip is not the skill's, and is named in the refusal.
 */
async function openSkillZip(zipPath: string, size: number, ceiling: number): Promise<SkillSource> {
  // The zip is read whole before its guards run, so its size is bounded first: its entries may hold
  // twice the ceiling in all, plus what its headers take (a generous kilobyte for each entry it may have).
  const largest = 2 * ceiling + MAX_ENTRIES * 1024;
  if (size > largest)
    throw new MurmurError('E-ART-002', `${zipPath} is ${size} bytes, over the ${largest} bytes an archive of at most ${2 * ceiling} bytes of entries takes`, {
      hint: `package a smaller zip, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
    });
  const zip = await MurZip.open(await fs.readFile(zipPath), { label: zipPath, maxEntryBytes: ceiling });
  try {
    const rootEntries = zip.names.filter((name) => !name.includes('/')).map((name) => ({ name }));
    const skillEntry = findInAnyCase(rootEntries, SKILL_FILE, zipPath);
    if (!skillEntry)
      throw noSkillFile(
        zipPath,
        undefined,
        zip.names.filter((name) => name.includes('/') && name.split('/').pop()?.toLowerCase() === SKILL_FILE),
      );
    const skill = { data: await zip.read(skillEntry.name), executable: false };
    const manifestEntry = findInAnyCase(rootEntries, MANIFEST_FILE, zipPath);
    let manifestText: string | undefined;
    if (manifestEntry) {
      const bytes = await zip.read(manifestEntry.name);
      if (bytes.length > MAX_MANIFEST_BYTES)
        throw new MurmurError(
          'E-ART-002',
          `${manifestEntry.name} in ${zipPath} is ${bytes.length} bytes; an artifact's manifest is at most ${MAX_MANIFEST_BYTES}`,
          {
            hint: 'a manifest describes the artifact; what it carries belongs in files of the archive (requires_files)',
          },
        );
      try {
        manifestText = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      } catch {
        throw new MurmurError('E-MAN-002', `${manifestEntry.name} in ${zipPath} is not valid UTF-8`, { hint: 'save the manifest as UTF-8' });
      }
    }
    return {
      label: zipPath,
      kind: 'zip',
      skill,
      manifestText,
      async read(entry) {
        if (!zip.has(entry)) throw missingDeclared(entry, zipPath);
        return { data: await zip.read(entry), executable: zip.isExecutable(entry) };
      },
      close: () => zip.close(),
    };
  } catch (error) {
    zip.close();
    throw error;
  }
}

/**
 * The manifest the archive carries: the one the source brings, used as it is (but for the
 * description `--description` sets), or, when it brings none, a generated one of `name`,
 * `version` and `runtime: skill` (and `description`).
 *
 * A brought manifest says what the artifact is: it must declare `runtime: skill` (`E-MAN-003`, as
 * upstream), and a name or `--version` given on the command line that says otherwise is a
 * contradiction refused as a usage error, where upstream named the file by the flags and packed
 * the manifest's own name and version inside it.
 */
async function skillManifest(
  source: SkillSource,
  explicitName: string | undefined,
  options: { version?: string; description?: string },
): Promise<{ manifestText: string; manifest: ArtifactManifest }> {
  if (source.manifestText === undefined) {
    const name = explicitName ?? inferSkillName(source.label);
    if (explicitName === undefined && name.length > LONGEST_NAME)
      throw new MurmurError('E-BLD-001', `the name inferred from ${source.label} is ${name.length} characters; an artifact name is at most ${LONGEST_NAME}`, {
        path: 'name',
        hint: `name the artifact: mur build --skill <name> ${source.label}`,
      });
    const version = options.version ?? DEFAULT_SKILL_VERSION;
    // Written by the YAML library, so a description holding quotes, colons or line breaks stays one
    // string; the version quoted (as upstream writes it), so no reader takes `1.0` for a number.
    const document = new Document({ name, version, runtime: 'skill', ...(options.description === undefined ? {} : { description: options.description }) });
    const versionNode = document.get('version', true);
    if (isScalar(versionNode)) versionNode.type = 'QUOTE_SINGLE';
    const manifestText = document.toString();
    return { manifestText, manifest: parseArtifactManifest(manifestText) };
  }

  const file = source.kind === 'folder' ? path.join(source.label, MANIFEST_FILE) : `${MANIFEST_FILE} in ${source.label}`;
  const raw = parseYamlSource(source.manifestText, file).value;
  const runtime = raw !== null && typeof raw === 'object' && !Array.isArray(raw) ? (raw as Record<string, unknown>).runtime : undefined;
  if (runtime !== 'skill')
    throw new MurmurError(
      'E-MAN-003',
      `${file} declares ${runtime === undefined ? 'no runtime' : `runtime: ${JSON.stringify(runtime)}`}, but --skill packages a skill (runtime: skill)`,
      {
        path: 'runtime',
        hint: `set runtime: skill in ${file}, or build it as what it is: mur build ${source.kind === 'folder' ? source.label : '<folder>'}`,
      },
    );
  let manifestText = source.manifestText;
  if (options.description !== undefined) {
    // Only the description changes: the rest of the file (its comments, its quoting) is kept as written.
    const document = parseDocument(manifestText);
    document.set('description', options.description);
    manifestText = document.toString();
  }
  const manifest = parseArtifactManifest(manifestText, file);
  // A skill's payload is its static skill.md whatever else the manifest says: refused here, not by a stager.
  if (packagingTypeOf(manifest) !== 'static')
    throw new MurmurError('E-MAN-003', `${file} declares execution: ${manifest.execution}, but a skill is packaged as static`, {
      path: 'execution',
      hint: `remove execution: from ${file} (a skill is static)`,
    });
  refuseBadName(manifest.name, `name: in ${file}`, `correct name: in ${file}`);
  refuseBadVersion(manifest.version, `version: in ${file}`);
  for (const [given, declared, flag] of [
    [explicitName, manifest.name, 'the name given to --skill'],
    [options.version, manifest.version, '--version'],
  ] as const) {
    if (given !== undefined && given !== declared)
      throw new UsageError(`${flag} says '${given}', but ${file} says '${declared}'; a skill that brings its murmur.yaml is packed as that manifest says`, {
        path: flag === '--version' ? '--version' : '--skill',
        hint: `leave ${flag === '--version' ? '--version' : 'the name'} out, or change ${file}`,
      });
  }
  const refusal = indexEntryRefusal({ kind: 'artifact', manifest, warnings: [] }, 'E-BLD-001', file);
  if (refusal) throw refusal;
  return { manifestText, manifest };
}

/**
 * What the archive holds, in order: `murmur.yaml`, then `requires_files` as declared (`skill.md`
 * in whatever case the source has it), `skill.md` right after the manifest when they do not name
 * it (a `--skill` archive always carries its skill). Paths are held to `mur build`'s rules (no
 * absolute path, no `..`, no two files packing as one entry), and the whole to what every reader
 * of an archive takes.
 */
async function packedFiles(
  source: SkillSource,
  manifest: ArtifactManifest,
  manifestText: string,
  warnings: MurmurWarning[],
  ceiling: number,
): Promise<ZipInput[]> {
  const declared: string[] = [];
  const byFoldedName = new Map<string, string>();
  for (const entry of manifest.requires_files) {
    const entryName = declaredEntryName(entry, 'requires_files entry', "the skill's folder");
    const name = entryName.toLowerCase() === SKILL_FILE ? SKILL_FILE : entryName;
    if (name === MANIFEST_FILE) {
      warnings.push({
        code: 'W-BLD-001',
        message: `requires_files entry '${entry}' names the reserved archive entry '${MANIFEST_FILE}', which mur build already packs; remove it from requires_files`,
      });
      continue;
    }
    const folded = foldedEntryName(name);
    const earlier = byFoldedName.get(folded);
    if (earlier === name) continue;
    if (earlier !== undefined)
      throw new MurmurError(
        'E-BLD-002',
        `requires_files entries '${earlier}' and '${name}' differ only in case or Unicode form; an archive may not hold both`,
        {
          hint: 'give each packaged file a distinct path inside the artifact',
        },
      );
    byFoldedName.set(folded, name);
    declared.push(name);
  }
  if (!declared.includes(SKILL_FILE)) declared.unshift(SKILL_FILE);
  if (declared.length + 1 > MAX_ENTRIES)
    throw new MurmurError('E-ART-003', `the archive would hold ${declared.length + 1} entries; an artifact archive holds at most ${MAX_ENTRIES}`, {
      hint: 'declare fewer files in requires_files',
    });

  const files: ZipInput[] = [{ name: MANIFEST_FILE, data: Buffer.from(manifestText) }];
  let total = files[0]?.data.length ?? 0;
  for (const name of declared) {
    const file = name === SKILL_FILE ? source.skill : await source.read(name, 'requires_files entry');
    total += file.data.length;
    if (total > 2 * ceiling)
      throw new MurmurError('E-ART-002', `the skill's files are more than ${2 * ceiling} bytes in all (twice the entry ceiling a reader inflates)`, {
        hint: `pack less, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
      });
    files.push({ name, data: file.data, executable: file.executable });
  }
  return files;
}

/** `<name>-<version>.mur.zip`, a namespaced name by its last segment (as `mur build` names it). */
function archiveFileName(manifest: ArtifactManifest): string {
  return `${manifest.name.split('/').pop() as string}-${manifest.version}.mur.zip`;
}
