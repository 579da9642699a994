import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { lookup } from 'node:dns';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type OtlpReceiver, startOtlpReceiver } from '../../../test/support/otlp-receiver.js';
import type { TraceRecord } from '../src/records.js';
import { SessionTelemetry } from '../src/session-telemetry.js';

const CALLER_TRACE = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab';
const CALLER_SPAN = 'cccccccccccccccd';

describe('a session’s spans, made from its trace records', () => {
  let receiver: OtlpReceiver;
  let dir: string;

  beforeEach(async () => {
    receiver = await startOtlpReceiver();
    dir = mkdtempSync(path.join(os.tmpdir(), 'murmur-telemetry-'));
  });

  afterEach(async () => {
    await receiver.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function spansOf(records: Array<Omit<TraceRecord, 'session_id'>>) {
    const telemetry = await SessionTelemetry.open({
      capsule: { name: 'probe', version: '0.1.0' },
      endpoint: undefined,
      endpointRefusal: () => ({ code: 'HTTP-request-denied', reason: 'not in capabilities.network.allow' }),
      capsuleLookup: lookup,
      operatorEndpoint: receiver.endpoint,
      sessionDir: dir,
      recordsOutside: { root: dir, refused: () => {} },
      launchTraceparent: undefined,
    });
    if (!telemetry) throw new Error('an operator endpoint makes telemetry');
    for (const record of records) telemetry.observe({ session_id: 'ses_x', ...record } as TraceRecord);
    await telemetry.close(5_000);
    return receiver.spans();
  }

  it("says a capsule's collector refused as the policy refused it: the runtime's own endpoint is not a rule to add", async () => {
    const open = (refusal: { code: string; reason: string }) =>
      SessionTelemetry.open({
        capsule: { name: 'probe', version: '0.1.0' },
        endpoint: 'http://127.0.0.1:7740',
        endpointRefusal: () => refusal,
        capsuleLookup: lookup,
        operatorEndpoint: undefined,
        sessionDir: dir,
        recordsOutside: { root: dir, refused: () => {} },
        launchTraceparent: undefined,
      });
    const own = "'127.0.0.1:7740' is the watcher's dashboard on this machine, which no capsule may reach whatever capabilities.network.allow says";
    expect(await open({ code: 'destination-IP-prohibited', reason: own })).toBeUndefined();
    const said = readFileSync(path.join(dir, 'logs', 'otel.log'), 'utf8');
    expect(said).toContain(`observability.otel_endpoint 'http://127.0.0.1:7740/' is refused: ${own}; this session's spans are not sent there`);
    expect(said).not.toContain('add it to network.allow');
  });

  it('puts every attempt of a task its caller sent under that caller, a reopened one too, and no later task', async () => {
    const spans = await spansOf([
      { event_type: 'a2a_task_received', timestamp: 1_000, traceparent_from_caller: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
      { event_type: 'session_start', timestamp: 1_001 },
      { event_type: 'session_end', timestamp: 1_002, exit_status: 'ok' },
      { event_type: 'task_reopened', timestamp: 1_003 },
      { event_type: 'session_start', timestamp: 1_004 },
      { event_type: 'session_end', timestamp: 1_005, exit_status: 'ok' },
      { event_type: 'task_end', timestamp: 1_006 },
      { event_type: 'session_start', timestamp: 1_007 },
      { event_type: 'session_end', timestamp: 1_008, exit_status: 'ok' },
    ]);
    const sessions = spans.filter((span) => span.name === 'capsule.session').sort((a, b) => a.startMs - b.startMs);
    expect(sessions).toHaveLength(3);
    for (const attempt of sessions.slice(0, 2)) expect(attempt).toMatchObject({ traceId: CALLER_TRACE, parentSpanId: CALLER_SPAN });
    expect(sessions[2]?.traceId).not.toBe(CALLER_TRACE);
  });

  it('cuts a shell command to 200 characters, never through a character made of two UTF-16 units', async () => {
    const command = `${'x'.repeat(199)}🙂${'y'.repeat(20)}`;
    const spans = await spansOf([
      { event_type: 'session_start', timestamp: 1_000 },
      { event_type: 'shell', timestamp: 1_010, command, exit_code: 0, duration_ms: 5 },
      { event_type: 'session_end', timestamp: 1_020, exit_status: 'ok' },
    ]);
    const shell = spans.find((span) => span.name === 'capsule.shell');
    expect(shell?.attributes.command).toBe(`${'x'.repeat(199)}🙂`);
  });
});
