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

/** What a probe capsule's run left in its workdir: each action's result, from the session's log, and the session's trace. */
export async function probeRun(workdir: string): Promise<{ results: ProbeResult[]; trace: Array<Record<string, unknown>> }> {
  const log = await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8');
  const trace = (await fs.readFile(path.join(workdir, 'trace.jsonl'), 'utf8'))
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { results: probeResults(log.replaceAll('[stdout] ', '')), trace };
}

/** A probe capsule project: `murmur.yaml` (name `probe`, plus `manifest`) and the probe component. */
export async function probeProject(dir: string, manifest = '', name = 'probe'): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, 'murmur.yaml'), `name: ${name}\nversion: 0.1.0\n${manifest}`);
  await fs.writeFile(path.join(dir, 'capsule.wasm'), (await probeCapsule()).bytes);
  return dir;
}

export { probeCapsule, probeTool };
