import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { capabilityPolicy, parseCapsuleManifest } from '@murmur/shared';
import { afterEach, describe, expect, it } from 'vitest';
import type { Duplex } from 'node:stream';
import { FrameChannel, HOST_CHANNEL_FD } from '../src/host/frame-channel.js';
import type { StartMessage } from '../src/host/protocol.js';
import { HOST_ENTRY } from '../src/session.js';

/**
 * A host's result is the session's outcome, so a host does not exit the moment it has written it:
 * a reply the executor writes to a host that has exited fails, and Node's handling of that drops
 * what the executor had not yet read of the channel, the result among it (under load, a session
 * that held 64 response bodies open lost its result that way: their releases were answered late).
 * The host waits for the executor to end the channel, which it does once it has read the result;
 * the executor's channel also reads what is left after such a failure (`host-link.test.ts` has
 * both: a late reply to a host that waits, and to one that does not).
 */
describe("a capsule host's result", () => {
  const children: ChildProcess[] = [];
  let scratch: string | undefined;

  afterEach(async () => {
    for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    if (scratch) await fs.rm(scratch, { recursive: true, force: true });
    scratch = undefined;
  });

  /**
   * The real host (the built bundle), driven by a bare channel rather than a `HostLink` (which
   * ends the channel on a result at once), so the test decides when the result has been heard. It
   * is given a script capsule with no component, which it answers at once with a failed result.
   */
  async function hostWithItsResult(env: Record<string, string> = {}) {
    scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-host-result-'));
    const host = spawn(process.execPath, [HOST_ENTRY], {
      cwd: scratch,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    });
    children.push(host);
    const output = { stderr: '' };
    host.stderr?.on('data', (chunk: Buffer) => (output.stderr += chunk.toString()));
    let channel: FrameChannel | undefined;
    const result = await new Promise<{ status: string; error?: { code: string } }>((resolve) => {
      channel = new FrameChannel((host.stdio as ReadonlyArray<unknown>)[HOST_CHANNEL_FD] as Duplex, 1024 * 1024, {
        message: (raw) => {
          const message = raw as { type: string; status: string; error?: { code: string } };
          if (message.type === 'ready') channel?.send(startWithNothingToRun(scratch as string));
          if (message.type === 'result') resolve(message);
        },
        violation: () => {},
      });
    });
    return { host, channel: channel as FrameChannel, result, output };
  }

  it('the real host stays after writing its result until the executor ends the channel, then exits with its status', async () => {
    const { host, channel, result, output } = await hostWithItsResult();
    expect(result).toMatchObject({ status: 'failed', error: { code: 'E-RUN-004' } });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(host.exitCode, `the host exited before the executor had said it read the result: ${output.stderr}`).toBeNull();
    channel.end();
    const [code] = (await once(host, 'exit')) as [number | null];
    expect(code).toBe(0);
    expect(output.stderr).not.toContain('did not end the channel');
  });

  it('a host whose executor never ends the channel gives up after its wait, exits with its status and says why', async () => {
    const { host, result, output } = await hostWithItsResult({ MURMUR_HOST_RESULT_WAIT_MS: '300' });
    expect(result).toMatchObject({ status: 'failed' });
    // 'close', not 'exit': by then its stderr has been read to the end.
    const [code] = (await once(host, 'close')) as [number | null];
    // Its status, not a failure of its own: the result was written, only its hearing is unknown.
    expect(code).toBe(0);
    expect(output.stderr).toContain('[capsule-host] the executor did not end the channel within 0.3 s of the result; exiting');
  });
});

function startWithNothingToRun(workdir: string): StartMessage {
  const policy = capabilityPolicy(parseCapsuleManifest('name: nothing\nversion: 0.1.0\n').manifest);
  return {
    type: 'start',
    session_id: 'ses_host_result_test',
    capsule_name: 'nothing',
    capsule_version: '0.1.0',
    preopen: workdir,
    accessible_workdir: workdir,
    session_dir: workdir,
    guest_env: [],
    subprocess_env: {},
    policy,
    tools: [],
    allowlist: [],
    trace_include_tool_output: false,
    effective_grants: {},
  };
}
