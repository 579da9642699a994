import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type ArtifactMeta, currentPlatform, parsePlatform } from '../artifact-meta.js';
import { MurmurError, type MurmurWarning } from '../errors.js';
import {
  type PackagedManifest,
  type PackagingType,
  artifactNameProblem,
  indexEntryRefusal,
  artifactVersionProblem,
  packagingTypeOf,
  parsePackagedManifest,
} from '../manifest/artifact.js';
import { parseYamlSource } from '../manifest/yaml-source.js';
import { writeFileAtomic } from '../node/atomic.js';
import { readManifestText } from '../node/manifest-file.js';
import { foldedEntryName } from '../file-set.js';
import { MAX_ENTRIES, MAX_ENTRY_BYTES_ENV, maxEntryBytesFromEnv, normaliseEntryName, writeMurZip } from './mur-zip.js';
import { sha256Hex } from './store.js';
import { isWasmComponent } from './wasm-component.js';

export { isWasmComponent };

/**
 * `mur build`: a source directory with a `murmur.yaml` becomes a `.mur.zip`.
 *
 * Everything that can refuse the build is decided before anything is written: the manifest, the
 * name, every file to pack (no absolute paths, no `..`, no symlinks, no two files packing as one
 * entry) and the payload's shape. Then the archive is written to a temporary file and renamed, so
 * a failed build never leaves a half-written zip where a good one was.
 *
 * An artifact manifest packs itself plus `requires_files`. A capsule manifest (no `runtime:`)
 * packs itself, `capsule.wasm` when the capsule has one, its `system_prompt_file`, and any
 * `requires_files` it declares.
 */

export interface BuildOptions {
  /** An output file (must end in `.mur.zip`) or an existing directory to put it in. */
  output?: string;
}

export interface BuildResult {
  outputPath: string;
  name: string;
  version: string;
  kind: PackagedManifest['kind'];
  packaging: PackagingType;
  sha256: string;
  entries: string[];
  warnings: MurmurWarning[];
  meta: ArtifactMeta;
}

interface PlannedFile {
  declared: string;
  /** What declared it, for a refusal: `requires_files entry`, `inference.system_prompt_file`, `the component`. */
  label: string;
  archiveName: string;
  sourcePath: string;
  size: number;
}

/** A file the manifest has packed, and what declared it. */
interface DeclaredFile {
  path: string;
  label: string;
}

const REQUIRED_FILE = 'requires_files entry';

/**
 * The archive entry a declared file is packed as: a relative path inside `within`, never absolute,
 * never through `..`, of the names an archive may hold; else `E-BLD-002`, naming the declaration
 * as `label` (`requires_files entry`).
 */
export function declaredEntryName(entry: string, label: string, within: string): string {
  const unsafe = (reason: string): MurmurError =>
    new MurmurError('E-BLD-002', `${label} '${entry}' has an unsafe path: ${reason}`, {
      path: entry,
      hint: `declare files by a relative path inside ${within}`,
    });
  if (entry.startsWith('/') || path.isAbsolute(entry)) throw unsafe('is an absolute path');
  if (entry.split(/[/\\]/).includes('..')) throw unsafe("contains a '..' component");
  const normalised = normaliseEntryName(entry.replaceAll('\\', '/'));
  if (!normalised.ok) throw unsafe(normalised.reason);
  return normalised.name;
}

/**
 * Where an archive named `fileName` is written: in `defaultDir`, or where `-o` says — a directory
 * (one that exists, or one written with a trailing '/', made as a file's missing parents are) to
 * write it into, or a file ending in `.mur.zip`. A directory already at that path is refused: the
 * archive cannot be renamed over it.
 */
export async function archiveOutputPath(defaultDir: string, fileName: string, output: string | undefined): Promise<string> {
  let outputPath = path.resolve(defaultDir, fileName);
  if (output !== undefined) {
    // An empty -o is no path: resolved, it named the working directory, refused as no .mur.zip.
    if (output.trim() === '')
      throw new MurmurError('E-IO-003', '-o names nothing', { hint: `give -o a file name ending in .mur.zip, or a directory to write ${fileName} into` });
    // Judged without its trailing '/': a file's path with one fails to stat (ENOTDIR), and was then
    // taken for a directory to make, which failed as EEXIST.
    const stat = await fs.stat(path.resolve(output)).catch(() => undefined);
    if (stat && !stat.isDirectory() && output.endsWith('/'))
      throw new MurmurError('E-IO-003', `-o ${output} names a directory, and ${path.resolve(output)} is a file`, {
        path: path.resolve(output),
        hint: `leave out the trailing '/' to write the archive in its place (a name ending in .mur.zip), or name another directory`,
      });
    const directory = stat?.isDirectory() || output.endsWith('/');
    outputPath = directory ? path.join(path.resolve(output), fileName) : path.resolve(output);
  }
  if (!outputPath.endsWith('.mur.zip'))
    throw new MurmurError('E-IO-003', `output path must end with .mur.zip: ${outputPath}`, {
      path: outputPath,
      hint: `give -o a file name ending in .mur.zip, or a directory to write ${fileName} into (one that exists, or one written with a trailing '/')`,
    });
  if ((await fs.lstat(outputPath).catch(() => undefined))?.isDirectory())
    throw new MurmurError('E-IO-003', `${outputPath} is a directory; the archive cannot be written in its place`, {
      path: outputPath,
      hint: 'move that directory out of the way, or write the archive elsewhere with -o',
    });
  return outputPath;
}

/** Publishing uploads an archive whole, and roost and every registry client take one of at most the ceiling. */
export function refuseArchiveOverCeiling(bytes: Uint8Array, ceiling: number): void {
  if (bytes.length > ceiling)
    throw new MurmurError(
      'E-ART-002',
      `the archive would be ${bytes.length} bytes, over the ${ceiling}-byte ceiling an artifact is fetched and published under`,
      {
        hint: `pack less, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
      },
    );
}

/** W-SEC-004: a key that names a secret holding what looks like the secret itself. */
export function scanForLiteralSecrets(value: unknown, file = 'murmur.yaml'): MurmurWarning[] {
  const warnings: MurmurWarning[] = [];
  const visit = (node: unknown, trail: string[]): void => {
    if (Array.isArray(node)) {
      for (const [index, item] of node.entries()) visit(item, [...trail, String(index)]);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    for (const [key, child] of Object.entries(node)) {
      const here = [...trail, key];
      const sensitive = /api_key|token|secret|password/i.test(key);
      if (sensitive && typeof child === 'string' && !/^\$\{[A-Z0-9_]+\}$/.test(child.trim()) && (child.startsWith('sk-') || Buffer.byteLength(child) > 8)) {
        warnings.push({
          code: 'W-SEC-004',
          message: `${file}: field '${here.join('.')}' appears to contain a literal secret value (${child.slice(0, 4)}****); use a \${VAR_NAME} reference and inject the value through the environment`,
          path: here.join('.'),
        });
      }
      visit(child, here);
    }
  };
  visit(value, []);
  return warnings;
}

async function planFiles(sourceDir: string, declared: readonly DeclaredFile[], outputPath: string): Promise<{ files: PlannedFile[]; shadowed: PlannedFile[] }> {
  const manifest = await fs.lstat(path.join(sourceDir, 'murmur.yaml'));
  // The manifest is packed as every other file is: itself, never what a link leads to.
  if (manifest.isSymbolicLink())
    throw new MurmurError('E-BLD-002', `murmur.yaml in ${sourceDir} is a symlink; mur build packs the manifest itself, never what a link points to`, {
      path: 'murmur.yaml',
      hint: 'put the manifest itself in the source directory',
    });
  const candidates: PlannedFile[] = [
    { declared: 'murmur.yaml', label: 'the manifest', archiveName: 'murmur.yaml', sourcePath: path.join(sourceDir, 'murmur.yaml'), size: manifest.size },
  ];
  for (const { path: entry, label } of declared) {
    const normalised = { name: declaredEntryName(entry, label, 'the source directory') };
    // Read from the path the archive names it by (`sub\A.txt` is `sub/A.txt`, SPEC §2.1): the
    // entry as written read another file, one literally named with a backslash.
    const sourcePath = path.join(sourceDir, ...normalised.name.split('/'));
    // Every directory on the way must be a real directory: a symlinked `linked/` would pack
    // whatever it points at, from anywhere on the machine.
    const components = normalised.name.split('/');
    for (let depth = 1; depth < components.length; depth += 1) {
      const prefix = path.join(sourceDir, ...components.slice(0, depth));
      const prefixStat = await fs.lstat(prefix).catch(() => undefined);
      if (prefixStat?.isSymbolicLink()) {
        throw new MurmurError('E-BLD-002', `${label} '${entry}' is reached through a symlink (${prefix}); declare files inside the source directory`, {
          path: entry,
          hint: 'copy the files into the source directory instead of linking to them',
        });
      }
    }
    let stat: Awaited<ReturnType<typeof fs.lstat>>;
    try {
      stat = await fs.lstat(sourcePath);
    } catch {
      throw new MurmurError('E-IO-003', `missing required file '${entry}' in ${sourceDir}`, {
        path: entry,
        hint: `create ${entry} there, or take it out of murmur.yaml (requires_files, or the prompt file that names it)`,
      });
    }
    if (stat.isSymbolicLink()) {
      throw new MurmurError('E-BLD-002', `${label} '${entry}' is a symlink (${sourcePath}); declare the file it points to instead`, {
        path: entry,
        hint: 'copy the target into the source directory, or declare its real path',
      });
    }
    if (!stat.isFile())
      throw new MurmurError('E-BLD-002', `${label} '${entry}' is not a regular file (${sourcePath})`, {
        path: entry,
        hint: stat.isDirectory()
          ? 'declare each file on its own: a directory is packed by naming the files in it'
          : 'declare regular files only: a FIFO, a socket or a device has no contents to pack',
      });
    // The archive is written where this file is read from: it would replace the file, and pack without it.
    if (path.resolve(sourcePath) === path.resolve(outputPath))
      throw new MurmurError('E-BLD-002', `${label} '${entry}' is the file mur build was asked to write (${outputPath}); building would replace it`, {
        path: entry,
        hint: 'write the archive elsewhere (-o), or take the file out of what the manifest packs',
      });
    candidates.push({ declared: entry, label, archiveName: normalised.name, sourcePath, size: Number(stat.size) });
  }
  const files: PlannedFile[] = [];
  const shadowed: PlannedFile[] = [];
  const seenSources = new Set<string>();
  const byArchiveName = new Map<string, PlannedFile>();
  for (const candidate of candidates) {
    const resolved = path.resolve(candidate.sourcePath);
    if (seenSources.has(resolved)) {
      shadowed.push(candidate);
      continue;
    }
    seenSources.add(resolved);
    // Names that differ only in case or Unicode form clash too: every reader refuses such a pair
    // (`MurZip`), so an archive holding one could be built but never published or installed.
    const folded = foldedEntryName(candidate.archiveName);
    const clash = byArchiveName.get(folded);
    if (clash) {
      throw new MurmurError(
        'E-BLD-002',
        clash.archiveName === candidate.archiveName
          ? `${bothNamed(clash, candidate)} both pack as the archive entry '${candidate.archiveName}'`
          : `${bothNamed(clash, candidate)} differ only in case or Unicode form; an archive may not hold both (a case-insensitive file system would extract one over the other)`,
        {
          hint: 'give each packaged file a distinct path inside the artifact',
        },
      );
    }
    byArchiveName.set(folded, candidate);
    files.push(candidate);
  }
  return { files, shadowed };
}

/**
 * What every reader of an archive refuses (`MurZip`), refused before anything is read or written:
 * `mur build` made archives that `mur publish` then refused — too many entries, an entry past the
 * decompression ceiling, more than twice it in all — and read a file past what a buffer holds
 * before failing with a stack. (The manifest's own bound and encoding are `readManifestText`'s.)
 */
function refuseWhatNoReaderTakes(files: readonly PlannedFile[], ceiling: number): void {
  if (files.length > MAX_ENTRIES)
    throw new MurmurError('E-ART-003', `the archive would hold ${files.length} entries; an artifact archive holds at most ${MAX_ENTRIES}`, {
      hint: 'pack fewer files: bundle many small ones into one (a tarball, a zip) and declare that',
    });
  for (const file of files)
    if (file.size > ceiling)
      throw new MurmurError(
        'E-ART-002',
        `${file.label} '${file.declared}' is ${file.size} bytes, over the ${ceiling}-byte ceiling every reader holds an entry to`,
        {
          path: file.declared,
          hint: `keep it out of the archive, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
        },
      );
  const total = files.reduce((sum, file) => sum + file.size, 0);
  if (total > 2 * ceiling)
    throw new MurmurError(
      'E-ART-002',
      `the archive's files are ${total} bytes in all, over the ${2 * ceiling} bytes (twice the entry ceiling) a reader inflates`,
      {
        hint: `pack less, or raise ${MAX_ENTRY_BYTES_ENV} wherever the archive is read`,
      },
    );
}

/** Two files as a refusal names them: `requires_files entries 'a' and 'b'`, or each by what declared it. */
function bothNamed(first: PlannedFile, second: PlannedFile): string {
  if (first.label === REQUIRED_FILE && second.label === REQUIRED_FILE) return `requires_files entries '${first.declared}' and '${second.declared}'`;
  return `${first.label} '${first.declared}' and ${second.label} '${second.declared}'`;
}

function lint(files: PlannedFile[], shadowed: PlannedFile[], packaging: PackagingType): MurmurWarning[] {
  const warnings: MurmurWarning[] = [];
  for (const entry of shadowed) {
    if (entry.archiveName === 'murmur.yaml' || entry.archiveName === 'capsule.wasm') {
      warnings.push({
        code: 'W-BLD-001',
        message: `requires_files entry '${entry.declared}' names the reserved archive entry '${entry.archiveName}', which mur build already packs; remove it from requires_files`,
      });
    }
  }
  const rootWasm = files.filter((file) => !file.archiveName.includes('/') && file.archiveName.endsWith('.wasm'));
  if (rootWasm.some((file) => file.archiveName === 'capsule.wasm') && rootWasm.length > 1) {
    const others = rootWasm.filter((file) => file.archiveName !== 'capsule.wasm').map((file) => file.archiveName);
    warnings.push({ code: 'W-BLD-002', message: `root 'capsule.wasm' is always selected as the payload, so ${others.join(', ')} ships but never runs` });
  }
  if (packaging === 'wasm' || packaging === 'native') {
    const sources = files
      .map((file) => file.archiveName)
      .filter((name) => name.split('/').includes('target') || /(^|\/)(Cargo\.toml|Cargo\.lock)$/.test(name) || name.endsWith('.rs'));
    if (sources.length > 0)
      warnings.push({
        code: 'W-BLD-003',
        message: `compiled artifact packages build inputs: ${sources.join(', ')}; a compiled artifact ships its payload, not its sources`,
      });
  }
  return warnings;
}

function shapeError(message: string): MurmurError {
  return new MurmurError('E-BLD-003', message, { hint: 'declare exactly one root *.wasm in requires_files: (or name it capsule.wasm)' });
}

async function checkPayload(files: PlannedFile[], packaging: PackagingType, packaged: PackagedManifest): Promise<void> {
  const rootWasm = files.filter((file) => !file.archiveName.includes('/') && file.archiveName.endsWith('.wasm'));
  const chosen = rootWasm.find((file) => file.archiveName === 'capsule.wasm') ?? (rootWasm.length === 1 ? rootWasm[0] : undefined);
  if (packaged.kind === 'capsule' && packaged.manifest.inference !== undefined && rootWasm.length === 0) return;
  if (packaging === 'wasm' || packaged.kind === 'capsule') {
    if (rootWasm.length === 0) {
      if (packaged.kind === 'capsule') {
        throw new MurmurError(
          'E-BLD-003',
          'a capsule needs a capsule.wasm (a script capsule) or an inference: block (an agent capsule); this one has neither',
          { hint: 'put the component beside murmur.yaml as capsule.wasm' },
        );
      }
      throw shapeError('missing root .wasm file (expected capsule.wasm or one root *.wasm)');
    }
    if (!chosen)
      throw shapeError(
        `multiple root .wasm files found: ${rootWasm
          .map((file) => file.archiveName)
          .sort()
          .join(', ')}`,
      );
    const bytes = await fs.readFile(chosen.sourcePath);
    if (!isWasmComponent(bytes)) {
      throw new MurmurError('E-BLD-003', `${chosen.archiveName} is not a WebAssembly component (a core module, or not wasm at all)`, {
        hint: 'build it as a component: componentize-js, cargo component, or wasm-tools component new',
      });
    }
  }
  if (packaging === 'native' && packaged.kind === 'artifact') {
    const binary = `bin/${packaged.manifest.name.split('/').pop() as string}`;
    if (!files.some((file) => file.archiveName === binary)) {
      throw new MurmurError('E-BLD-003', `a native tool packs its binary at ${binary}; declare it in requires_files`, {
        hint: `add '${binary}' to requires_files`,
      });
    }
  }
  if (packaging === 'static' && !files.some((file) => file.archiveName === 'skill.md')) {
    throw new MurmurError('E-BLD-003', 'a skill packs its skill.md at the archive root; declare it in requires_files');
  }
}

export async function buildArtifact(sourceDirInput: string, options: BuildOptions = {}): Promise<BuildResult> {
  const sourceDir = path.resolve(sourceDirInput);
  const manifestPath = path.join(sourceDir, 'murmur.yaml');
  const manifestText = await readManifestText(manifestPath, 'run mur build in the directory of the capsule or artifact to pack, or pass that directory');
  const packaged = parsePackagedManifest(manifestText);
  const { name, version } = packaged.manifest;
  const warnings: MurmurWarning[] = [...packaged.warnings, ...scanForLiteralSecrets(parseYamlSource(manifestText).value)];
  const nameProblem = artifactNameProblem(name);
  if (nameProblem)
    throw new MurmurError('E-BLD-001', `invalid artifact name '${name}': ${nameProblem}`, {
      path: 'name',
      hint: 'artifact names are lowercase letters, digits and inner hyphens, e.g. my-tool (optionally namespace/my-tool)',
    });

  const indexRefusal = indexEntryRefusal(packaged, 'E-BLD-001');
  if (indexRefusal) throw indexRefusal;

  const versionProblem = artifactVersionProblem(version);
  if (versionProblem)
    throw new MurmurError('E-BLD-001', `invalid artifact version '${version.length > 60 ? `${version.slice(0, 60)}…` : version}': ${versionProblem}`, {
      path: 'version',
      hint: 'the version names the archive and its place in a store, e.g. 0.1.0 or 1.2.0-rc.1+build.5',
    });

  const fileName = `${name.split('/').pop() as string}-${version}.mur.zip`;
  const outputPath = await archiveOutputPath(sourceDir, fileName, options.output);

  let declared: DeclaredFile[];
  let packaging: PackagingType;
  const required = (paths: readonly string[] | undefined): DeclaredFile[] => (paths ?? []).map((entry) => ({ path: entry, label: REQUIRED_FILE }));
  if (packaged.kind === 'artifact') {
    declared = required(packaged.manifest.requires_files);
    packaging = packagingTypeOf(packaged.manifest);
  } else {
    // Whatever is there by that name is the component, and judged as one: a link or a FIFO is
    // refused as what it is, not passed over as if there were none.
    const hasComponent = await fs
      .lstat(path.join(sourceDir, 'capsule.wasm'))
      .then(() => true)
      .catch(() => false);
    const promptFile = packaged.manifest.inference?.system_prompt_file;
    const compactionPromptFile = packaged.manifest.inference?.compaction?.system_prompt_file;
    declared = [
      ...(hasComponent ? [{ path: 'capsule.wasm', label: 'the capsule component' }] : []),
      ...(promptFile ? [{ path: promptFile, label: 'inference.system_prompt_file' }] : []),
      ...(compactionPromptFile ? [{ path: compactionPromptFile, label: 'inference.compaction.system_prompt_file' }] : []),
      ...required(packaged.manifest.requires_files),
    ];
    packaging = hasComponent ? 'wasm' : 'static';
  }
  const { files, shadowed } = await planFiles(sourceDir, declared, outputPath);
  const ceiling = maxEntryBytesFromEnv();
  refuseWhatNoReaderTakes(files, ceiling);
  warnings.push(...lint(files, shadowed, packaging));
  await checkPayload(files, packaging, packaged);

  const inputs = await Promise.all(
    files.map(async (file) => {
      const stat = await fs.stat(file.sourcePath);
      return { name: file.archiveName, data: await fs.readFile(file.sourcePath), executable: (stat.mode & 0o111) !== 0 };
    }),
  );
  const bytes = await writeMurZip(inputs);
  refuseArchiveOverCeiling(bytes, ceiling);
  await fs.mkdir(path.dirname(outputPath), { recursive: true });
  await writeFileAtomic(outputPath, bytes, { interruptible: true });

  const platform = packaging === 'native' ? parsePlatform(currentPlatform()) : undefined;
  const meta: ArtifactMeta = {
    name,
    version,
    runtime: packaging,
    artifact_runtime: packaged.kind === 'capsule' ? 'capsule' : packaged.manifest.runtime,
    platforms: platform ? [platform] : [],
    description: packaged.manifest.description ?? null,
    tags: packaged.kind === 'artifact' ? packaged.manifest.tags : [],
  };
  return { outputPath, name, version, kind: packaged.kind, packaging, sha256: sha256Hex(bytes), entries: inputs.map((input) => input.name), warnings, meta };
}
