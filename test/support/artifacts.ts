import { promises as fs } from 'node:fs';
import path from 'node:path';
import { ArtifactStore, type StoreScope, inspectArchive, writeMurZip } from '@murmur/shared/artifacts';
import { probeTool } from './probe-guests.js';

/** A `.mur.zip` for a WASM tool (or driver, or hook): its manifest plus the component at the root. */
export async function componentArtifact(
  name: string,
  version: string,
  wasm: Uint8Array,
  role: 'tool' | 'driver' | 'hook' = 'tool',
  extraManifest = '',
): Promise<Buffer> {
  const file = `${name.split('/').pop() as string}.wasm`;
  const manifest = `name: ${name}\nversion: "${version}"\nruntime: ${role}\ndescription: the ${name} ${role}\nrequires_files: [${file}]\n${extraManifest}`;
  return writeMurZip([
    { name: 'murmur.yaml', data: Buffer.from(manifest) },
    { name: file, data: wasm },
  ]);
}

/**
 * A native tool: a shell script that answers with its environment and its input, as JSON. Shell
 * builtins only: in a sealed sandbox a tool may execute its own binary (and its interpreter) and
 * the capsule's shell.allow, nothing else.
 */
export async function nativeEchoTool(name: string, version: string): Promise<Buffer> {
  const script = [
    '#!/bin/sh',
    "input=''",
    'while IFS= read -r line || [ -n "$line" ]; do input="$input$line"; done',
    // Quotes and backslashes out, so the input fits inside the JSON string below.
    `while :; do case "$input" in *'"'*) input="\${input%%'"'*}\${input#*'"'}" ;; *'\\'*) input="\${input%%'\\'*}\${input#*'\\'}" ;; *) break ;; esac; done`,
    `printf '{"status":"passed","summary":"native ${name}","data":"HOME=%s TOKEN=%s SAFE=%s INPUT=%s"}' "$HOME" "$GITHUB_TOKEN" "$LANG" "$input"`,
    '',
  ].join('\n');
  return nativeTool(name, version, script);
}

/** A native tool whose executable `bin/<name>` is `script`. */
export async function nativeTool(name: string, version: string, script: string): Promise<Buffer> {
  return writeMurZip([
    {
      name: 'murmur.yaml',
      data: Buffer.from(
        `name: ${name}\nversion: "${version}"\nruntime: tool\nimplementation: native\ndescription: echoes natively\nrequires_files: [bin/${name}]\n`,
      ),
    },
    { name: `bin/${name}`, data: Buffer.from(script), executable: true },
  ]);
}

/** A `.mur.zip` holding a skill. */
export async function skillArtifact(name: string, version: string, text: string): Promise<Buffer> {
  return writeMurZip([
    { name: 'murmur.yaml', data: Buffer.from(`name: ${name}\nversion: "${version}"\nruntime: skill\n`) },
    { name: 'skill.md', data: Buffer.from(text) },
  ]);
}

/** A packaged capsule: its capsule manifest plus `capsule.wasm` (a script capsule) or nothing (an agent). */
export async function capsuleArchive(manifest: string, wasm?: Uint8Array): Promise<Buffer> {
  return writeMurZip([{ name: 'murmur.yaml', data: Buffer.from(manifest) }, ...(wasm ? [{ name: 'capsule.wasm', data: wasm }] : [])]);
}

/** Publishes archive bytes into the store at `root`, with the meta a real publish derives. */
export async function publishInto(root: string, bytes: Uint8Array, scope: StoreScope = 'global'): Promise<{ sha256: string; zipPath: string }> {
  const inspected = await inspectArchive(bytes, 'test artifact');
  return new ArtifactStore(root, scope).publish(bytes, inspected.meta);
}

/** A capsule project directory: `murmur.yaml` and, for a script capsule, `capsule.wasm`. */
export async function capsuleProject(dir: string, manifest: string, wasm?: Uint8Array): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, 'murmur.yaml'), manifest);
  if (wasm) await fs.writeFile(path.join(dir, 'capsule.wasm'), wasm);
  return dir;
}

/** `probe-tool@1.0.0`: the probe tool built from its JS source, taking `{actions: [...]}` as its input. */
export async function probeToolArtifact(): Promise<Buffer> {
  return componentArtifact(
    'probe-tool',
    '1.0.0',
    (await probeTool()).bytes,
    'tool',
    'input_schema:\n  type: object\n  properties:\n    actions: { type: array }\n',
  );
}
