import { promises as fs } from 'node:fs';
import path from 'node:path';
import { probeCapsule, probeTool } from './probe-guests.js';

/** One line the probe capsule printed for one action. */
export interface ProbeResult {
  op: string;
  ok: boolean;
  value?: unknown;
  error?: string;
}

/** The probe's result lines among a run's stdout (other lines are the runtime's own). */
export function probeResults(stdout: string): ProbeResult[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{"op":'))
    .map((line) => JSON.parse(line) as ProbeResult);
}

/** A probe capsule project: `murmur.yaml` (name `probe`, plus `manifest`) and the probe component. */
export async function probeProject(dir: string, manifest = '', name = 'probe'): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, 'murmur.yaml'), `name: ${name}\nversion: 0.1.0\n${manifest}`);
  await fs.writeFile(path.join(dir, 'capsule.wasm'), (await probeCapsule()).bytes);
  return dir;
}

export { probeCapsule, probeTool };
