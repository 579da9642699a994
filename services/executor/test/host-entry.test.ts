import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const bundledHost = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle', 'host.cjs');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-host-entry-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * Loaded before the host (`node --require`): counts the guest workers the host makes, notes the ES
 * modules node had loaded when it made the first, and says both as the host exits.
 */
const COUNTER = `
const workerThreads = require('node:worker_threads');
const RealWorker = workerThreads.Worker;
const made = [];
workerThreads.Worker = function countedWorker(...args) {
  made.push(process.moduleLoadList.filter((name) => /esm\\/(module_job|translators)$/.test(name)));
  return new RealWorker(...args);
};
process.on('exit', () => process.stderr.write('\\nREPORT ' + JSON.stringify({ workers: made.length, esmAtFirst: made[0] }) + '\\n'));
`;

/**
 * The bundled capsule host's entry (`host.cjs`, from `host/boot.ts`): CommonJS, so that the first
 * guest worker — the longest step of a fresh host's way to its guest's first instruction — is begun
 * before Node's ES module loader starts; the host's ES modules then take that worker.
 */
describe("the bundled capsule host's entry", () => {
  it('begins the first guest worker before any ES module is loaded, and the host takes that worker rather than begin another', async () => {
    expect(existsSync(bundledHost), `${bundledHost} is made by npm run build`).toBe(true);
    const counter = path.join(scratch, 'count-workers.cjs');
    writeFileSync(counter, COUNTER);
    // Its channel on descriptor 3, as an executor gives it: the host says `ready` on it once its
    // modules are loaded, and exits when it is closed (with no session run).
    const host = spawn(process.execPath, ['--require', counter, bundledHost], {
      stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '' },
    });
    try {
      let stderr = '';
      host.stderr?.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const channel = host.stdio[3] as Duplex;
      await once(channel, 'data');
      channel.end();
      await once(host, 'exit');
      const report = /REPORT (.*)/.exec(stderr)?.[1];
      expect(report, stderr).toBeDefined();
      expect(JSON.parse(report as string)).toEqual({ workers: 1, esmAtFirst: [] });
    } finally {
      host.kill('SIGKILL');
    }
  });
});
