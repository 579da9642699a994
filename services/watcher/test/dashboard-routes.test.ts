import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLog, topics } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { type Dashboard, startDashboard } from '../src/dashboard/dashboard.js';
import { heldSession } from '../../../test/support/heartbeats.js';
import { rawExchange } from '../../../test/support/servers.js';
import { listenHttp } from '@murmur/shared/service';

/** A dashboard on its own in-process bus for each test, with no token: `use` is given both before each test. */
function servedForEachTest(use: (served: { bus: Bus; dashboard: Dashboard }) => void): void {
  let served: { bus: Bus; dashboard: Dashboard } | undefined;
  beforeEach(() => {
    const bus = createBus(new InProcessTransport(), silentLog);
    served = { bus, dashboard: startDashboard({ bus, log: silentLog, env: {}, watcherId: 'watcher-test' }) };
    use(served);
  });
  afterEach(async () => {
    served?.dashboard.close();
    await served?.bus.close();
  });
}

/**
 * The dashboard's routes in this process, on the in-process bus: what they answer a browser that
 * misbehaves (a page of another site, a tab that stops reading, a planted cookie).
 */
describe('the dashboard served on loopback without a token', () => {
  let bus: Bus;
  let dashboard: Dashboard;
  servedForEachTest((served) => ({ bus, dashboard } = served));

  const get = (path: string, headers: Record<string, string> = {}) => dashboard.http.fetch(new Request(`http://127.0.0.1:7740${path}`, { headers }));

  it('answers only for a loopback name: a page’s own name pointed at 127.0.0.1 gets 421 and E-DASH-003', async () => {
    for (const host of ['127.0.0.1:7740', 'localhost:7740', 'app.localhost', '[::1]:7740']) {
      expect((await get('/dashboard/api/snapshot', { host })).status, host).toBe(200);
    }
    for (const path of ['/dashboard', '/dashboard/api/snapshot', '/dashboard/api/events']) {
      const refused = await get(path, { host: 'rebound.example:7740' });
      expect(refused.status, path).toBe(421);
      const body = await refused.text();
      expect(JSON.parse(body)).toMatchObject({ error: { code: 'E-DASH-003', path: 'rebound.example:7740' } });
      expect(body).not.toContain('watcher-test');
    }
  });

  it('judges a target in absolute form by its own authority, whatever Host says (RFC 9112), when served by Node', async () => {
    const listener = await listenHttp(dashboard.http, { port: 0 });
    try {
      const ask = (authority: string, host: string) =>
        rawExchange(listener.port, `GET http://${authority}/dashboard/api/snapshot HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, 2_000);
      expect((await ask('rebound.example:7740', 'localhost:7740')).received).toMatch(/^HTTP\/1\.1 421 /);
      expect((await ask('localhost:7740', 'rebound.example:7740')).received).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      await listener.close();
    }
  });

  it('answers its API to its own page only: a request a browser says came from another origin is refused before a stream is counted', async () => {
    for (const site of ['cross-site', 'same-site']) {
      for (const path of ['/dashboard/api/events', '/dashboard/api/snapshot']) {
        const refused = await get(path, { host: 's1.localhost:7740', 'sec-fetch-site': site, origin: 'http://127.0.0.1:8080' });
        expect(refused.status, `${site} ${path}`).toBe(403);
        expect(await refused.json()).toMatchObject({ error: { code: 'E-DASH-003' } });
      }
    }
    // The page itself, a URL typed in, and a client that is no browser.
    for (const headers of [{ 'sec-fetch-site': 'same-origin' }, { 'sec-fetch-site': 'none' }, {}] as Array<Record<string, string>>) {
      expect((await get('/dashboard/api/snapshot', headers)).status, JSON.stringify(headers)).toBe(200);
    }
  });

  it('takes a cookie that does not decode for no token, rather than failing every request', async () => {
    const response = await get('/dashboard/api/snapshot', { cookie: 'murmur_dashboard=%E0%A4%A' });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ watcher_id: 'watcher-test' });
  });

  it('lets go of a page that stopped reading its stream once a thousand changes wait for it', async () => {
    const response = await get('/dashboard/api/events');
    expect(response.status).toBe(200);
    // Nothing is read while the changes pile up.
    for (let index = 0; index < 1_500; index += 1) {
      bus.publish(topics.egressDecision, {
        session_id: 'ses_0199c4e2f1b7712a9d3e4f5061728394',
        executor_id: 'exe-test',
        kind: 'http',
        grant: 'capsule',
        target: `https://denied-${index}.example`,
        decision: 'denied',
        rule: null,
        at: new Date().toISOString(),
      });
    }
    await bus.flush();
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Read now: what was written before the bound, and then the end, not the 1 500 changes.
    const text = await response.text();
    const events = text.split('\n').filter((line) => line.startsWith('event: '));
    expect(events[0]).toBe('event: snapshot');
    expect(events.length).toBeLessThan(1_001);
  });
});

describe('what the dashboard shows of a session whose end it never heard', () => {
  let bus: Bus;
  let dashboard: Dashboard;
  servedForEachTest((served) => ({ bus, dashboard } = served));

  const EXECUTOR = 'executor-test';
  const beat = (...sessionIds: string[]): void =>
    bus.publish(topics.executorHeartbeat, {
      executor_id: EXECUTOR,
      sent_at: new Date().toISOString(),
      interval_ms: 1_000,
      sessions: sessionIds.map(heldSession),
    });
  const start = (sessionId: string): void =>
    bus.publish(topics.sessionStarted, { ...heldSession(sessionId), executor_id: EXECUTOR, workdir: '/w', url: null, outlives_launcher: false });
  const stateOf = async (sessionId: string): Promise<string | undefined> => {
    await bus.flush();
    const response = await dashboard.http.fetch(new Request('http://127.0.0.1:7740/dashboard/api/snapshot'));
    const snapshot = (await response.json()) as { sessions: Array<{ session_id: string; state: string }> };
    return snapshot.sessions.find((session) => session.session_id === sessionId)?.state;
  };
  const A = 'ses_0123456789abcdef0123456789abcdef';
  const B = 'ses_fedcba9876543210fedcba9876543210';

  it('shows a running session its executor stopped listing as ended after two heartbeats without it, and one it still lists as running', async () => {
    start(A);
    start(B);
    beat(A, B);
    beat(B);
    // One heartbeat without it: its end, announced as it left the list, may still be on its way.
    expect(await stateOf(A)).toBe('running');
    beat(B);
    expect(await stateOf(A)).toBe('ended');
    expect(await stateOf(B)).toBe('running');
  });

  it('shows a session it never saw start as an agent when its heartbeat says it is one', async () => {
    bus.publish(topics.executorHeartbeat, {
      executor_id: EXECUTOR,
      sent_at: new Date().toISOString(),
      interval_ms: 1_000,
      sessions: [{ ...heldSession(A), agent: true }, heldSession(B)],
    });
    await bus.flush();
    const response = await dashboard.http.fetch(new Request('http://127.0.0.1:7740/dashboard/api/snapshot'));
    const sessions = ((await response.json()) as { sessions: Array<{ session_id: string; agent: boolean }> }).sessions;
    expect(sessions.find((session) => session.session_id === A)?.agent).toBe(true);
    expect(sessions.find((session) => session.session_id === B)?.agent).toBe(false);
  });

  it('keeps the real status of an end that arrives after the first heartbeat without the session', async () => {
    start(A);
    beat(A);
    beat();
    bus.publish(topics.sessionEnded, {
      ...heldSession(A),
      executor_id: EXECUTOR,
      exit_status: 'ok',
      exit_code: 0,
      signal: null,
      duration_ms: 5,
      ended_at: new Date().toISOString(),
      stderr_tail: [],
      completion_reported: false,
    });
    beat();
    beat();
    expect(await stateOf(A)).toBe('ok');
  });
});
