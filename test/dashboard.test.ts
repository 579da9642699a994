import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type BrowserContext, type Page, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DashboardSnapshotSchema, DashboardTimelineSchema } from '@murmur/shared';
import { type RunningAgent, readSse, rpc, startAgent, textMessage } from './support/agents.js';
import { capsuleArchive, publishInto } from './support/artifacts.js';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { probeCapsule } from './support/probe-guests.js';
import { type ServiceProcess, eventually, runMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * The watcher's operator dashboard in a real browser (Debian's chromium, driven by
 * playwright-core) against a real stack: nats-server; roost, stager, executor, watcher and door
 * processes; `mur run` sessions and a parent agent whose scripted model delegates to a child.
 * The watcher runs in its "configured" mode — `MURMUR_WATCHER_HOST` given explicitly (loopback,
 * the only address a test may bind) — so the token is required, as it is on any configured bind.
 *
 * With `MURMUR_DASHBOARD_SCREENSHOT=<file.png>` the suite saves a screenshot of the page once it
 * shows sessions, a delegation and egress decisions (how `docs/dashboard.png` is made).
 */

const TOKEN = 'dash-test-token-3f9c1e7a5b2d4c6e';
const PARENT = 'local/dash-parent';
const WORKER = 'local/dash-worker';
const DRIVER = 'murmur-driver-anthropic';
/** In the delegated task's text and so in the parent's trace (`tool_call.input`): it must never reach the page. */
const TASK_MARKER = 'task-text-marker-5e1d';
const SECRET_VAR = 'DASHBOARD_TEST_SECRET';
const SECRET_VALUE = 'sk-dash-secret-value-77c2';
const CHROMIUM = '/usr/bin/chromium';

describe('the operator dashboard', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  const services: ServiceProcess[] = [];
  let watcher: ServiceProcess;
  let env: Record<string, string>;
  let roostUrl: string;
  let browser: BrowserContext;
  let page: Page;
  const agents: RunningAgent[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-dashboard-');
    const home = path.join(scratch.dir, 'home');
    const store = path.join(home, 'artifacts');
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: home };
    inference = await startScriptedInference({
      script: (body) => {
        const messages = body.messages as Array<{ content: Array<{ type: string; text?: string; content?: Array<{ text: string }> }> }>;
        const last = messages.at(-1);
        const result = last?.content.find((block) => block.type === 'tool_result');
        if (result) return { text: 'delegated work is done' };
        const text = last?.content.find((block) => block.type === 'text')?.text ?? '';
        // A model may call a tool by any name it makes up.
        if (text.startsWith('call ')) return { toolCalls: [{ name: text.slice('call '.length), input: {} }] };
        if (text.startsWith('delegate '))
          return { toolCalls: [{ name: 'delegate-task', input: JSON.parse(text.slice('delegate '.length)) as Record<string, unknown> }] };
        return { text: 'nothing to delegate' };
      },
    });
    const probe = (await probeCapsule()).bytes;
    await publishInto(
      store,
      await capsuleArchive(
        `name: ${PARENT}\nversion: 0.1.0\nartifacts:\n  - name: ${DRIVER}\n    version: 0.1.0\n    runtime: driver\ncapabilities:\n  network:\n    allow: [${inference.authority}]\n  env:\n    allow: [${SECRET_VAR}]\n  spawn:\n    allow: [${WORKER}]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\ntrace:\n  capture: content\ninference:\n  endpoint: ${inference.endpoint}\n  model: test-model\n  driver:\n    artifact: ${DRIVER}\n`,
      ),
    );
    await publishInto(store, await capsuleArchive(`name: ${WORKER}\nversion: 0.1.0\n`, probe));
    const roost = await startService('roost', { ...env, MURMUR_ROOST_REGISTRY_PATH: store });
    roostUrl = roost.url;
    const withRoost = { ...env, MURMUR_ROOST_URL: roostUrl };
    services.push(roost, await startService('stager', withRoost), await startService('executor', withRoost));
    watcher = await startService('watcher', { ...withRoost, MURMUR_WATCHER_HOST: '127.0.0.1', MURMUR_DASHBOARD_TOKEN: TOKEN });
    services.push(watcher, await startService('door', withRoost));
    browser = await chromium.launchPersistentContext(path.join(scratch.dir, 'chromium-profile'), {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1440, height: 900 },
    });
    page = browser.pages()[0] ?? (await browser.newPage());
  });

  afterAll(async () => {
    await browser?.close();
    for (const agent of agents) await agent.stop();
    for (const service of services.reverse()) await service.stop();
    await inference?.close();
    await nats?.stop();
    await scratch?.cleanup();
  });

  /** `mur run --json` of a probe on the stack, in the background: the test decides when it may finish. */
  /** A probe capsule run in the background with `actions` as its task; its workdir is where the test drops `go.txt`. */
  async function startProbe(name: string, actions: unknown[]): Promise<RunningAgent> {
    const project = await probeProject(
      path.join(scratch.dir, name),
      `capabilities:\n  network:\n    allow: [${inference.authority}]\n  limits:\n    deadline_seconds: 60\n`,
    );
    return startAgent(project, env, ['--task', JSON.stringify(actions)]);
  }

  async function openDashboard(): Promise<void> {
    await page.goto(`${watcher.url}/dashboard?token=${TOKEN}`);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 15_000 });
  }

  it('shows a session started while it is open, and its end, without a reload', async () => {
    await openDashboard();
    // The URL no longer carries the token: it was traded for a cookie.
    expect(page.url()).toBe(`${watcher.url}/dashboard`);
    await page.evaluate(() => {
      (globalThis as unknown as { notReloaded: boolean }).notReloaded = true;
    });
    const probe = await startProbe('appears', [
      { op: 'fetch', url: `${inference.endpoint.replace(/\/$/, '')}/health?key=${SECRET_VALUE}` },
      { op: 'fetch', url: 'http://127.0.0.1:9/refused' },
      { op: 'waitfor', path: 'go.txt', seconds: 50 },
    ]);
    const row = page.locator(`#sessions tr[data-session-id="${probe.sessionId}"]`);
    await row.waitFor({ timeout: 15_000 });
    expect(await row.getAttribute('data-state')).toBe('running');
    expect(await row.textContent()).toContain('probe@0.1.0');
    // Both of its requests are on the page, with the rule that decided them, and no query.
    await page.locator(`#egress tr[data-session-id="${probe.sessionId}"][data-decision="allowed"]`).waitFor({ timeout: 15_000 });
    await page.locator(`#egress tr[data-session-id="${probe.sessionId}"][data-decision="denied"]`).waitFor({ timeout: 15_000 });
    const allowed = await page.locator(`#egress tr[data-session-id="${probe.sessionId}"][data-decision="allowed"]`).textContent();
    expect(allowed).toContain(inference.authority);
    expect(await page.locator(`#egress-rules [data-rule="${inference.authority}"]`).textContent()).toContain('allowed');
    expect(await page.content()).not.toContain(SECRET_VALUE);
    // The policy's refusal counted as one, apart from failures of the network (none here).
    expect(await page.locator('#count-denied').textContent()).toBe('1');
    expect(await page.locator('#count-failed').textContent()).toBe('0');
    expect(await page.locator('#count-executors').textContent()).toBe('1');

    await fs.writeFile(path.join(probe.workdir, 'go.txt'), 'go');
    expect((await probe.exited).code).toBe(0);
    await page.locator(`#sessions tr[data-session-id="${probe.sessionId}"][data-state="ok"]`).waitFor({ timeout: 15_000 });
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
  });

  it('hangs a delegated child under its parent, with how the child ended', async () => {
    await openDashboard();
    const dir = await fs.mkdtemp(path.join(scratch.dir, 'parent-'));
    const parent = await startAgent(dir, { ...env, MURMUR_ROOST_URL: roostUrl, [SECRET_VAR]: SECRET_VALUE }, [
      '--capsule',
      PARENT,
      '--capsule-version',
      '0.1.0',
      '--workdir',
      dir,
      '--no-env-file',
    ]);
    agents.push(parent);
    await page.locator(`#sessions tr[data-session-id="${parent.sessionId}"]`).waitFor({ timeout: 15_000 });
    const task = JSON.stringify([
      { op: 'print', text: TASK_MARKER },
      { op: 'write', path: 'out/result.txt', text: 'done' },
    ]);
    const sent = await rpc(parent.url, 'message/send', {
      ...textMessage(`delegate ${JSON.stringify({ capsule: WORKER, version: '0.1.0', task })}`),
      configuration: { blocking: true },
    });
    expect((sent.body.result as { status?: { state?: string } } | undefined)?.status?.state, JSON.stringify(sent.body)).toBe('completed');
    const child = page.locator(`#delegations li[data-session-id="${parent.sessionId}"] > ul > li[data-parent="${parent.sessionId}"]`);
    await child.waitFor({ timeout: 15_000 });
    await child.locator('[data-completion="ok"]').waitFor({ timeout: 15_000 });
    expect(await child.textContent()).toContain(WORKER);
    // Never a delegation's id, its completion's credential: not drawn, not in the data the page reads.
    expect(await page.content()).not.toMatch(/dlg_/);
    expect(JSON.stringify(await page.evaluate(async () => (await fetch('/dashboard/api/snapshot')).json()))).not.toMatch(/dlg_/);
    // The parent's task and its turn, as session.activity told them.
    const parentRow = page.locator(`#sessions tr[data-session-id="${parent.sessionId}"]`);
    await eventually(async () => ((await parentRow.textContent())?.includes('completed') ? true : undefined), 15_000, 'the parent task completed');
    expect(await parentRow.locator('td.num').first().textContent()).toBe('2');
  });

  it("draws a session's trace as a timeline, with nothing of its task, its input or its environment", async () => {
    const parent = agents[0] as RunningAgent;
    await openDashboard();
    await page.locator(`#sessions tr[data-session-id="${parent.sessionId}"]`).click();
    await page.locator('#timeline li[data-type="tool_call"]').waitFor({ timeout: 15_000 });
    const timeline = (await page.locator('#timeline').textContent()) ?? '';
    expect(timeline).toContain('session start');
    expect(timeline).toContain('inference turn 1');
    expect(timeline).toContain('inference turn 2');
    expect(timeline).toContain('tool delegate-task');
    expect(timeline).toContain(`delegation ${WORKER}@0.1.0`);
    expect(timeline).toContain(`egress http · http://${inference.authority}`);
    // The tool call took as long as the child ran: its duration is drawn beside it.
    expect(await page.locator('#timeline li[data-type="tool_call"] .duration').textContent()).toMatch(/^\d+(\.\d)? (ms|s)$/);
    // The trace has the task's text (capture: content); the page never does.
    const trace = await fs.readFile(path.join(parent.workdir, '.murmur', parent.sessionId, 'trace.jsonl'), 'utf8');
    expect(trace).toContain(TASK_MARKER);
    const html = await page.content();
    expect(html).not.toContain(TASK_MARKER);
    expect(html).not.toContain(SECRET_VALUE);
    expect(html).not.toMatch(/dlg_/);
    if (process.env.MURMUR_DASHBOARD_SCREENSHOT) await page.screenshot({ path: process.env.MURMUR_DASHBOARD_SCREENSHOT, fullPage: true });
  });

  it('shows the controls in a name a model made up as their escapes, so a label never reads backwards (U+202E)', async () => {
    const parent = agents[0] as RunningAgent;
    const sent = await rpc(parent.url, 'message/send', { ...textMessage('call safe\u202egnp.exe\u0007'), configuration: { blocking: true } });
    expect((sent.body.result as { status?: { state?: string } } | undefined)?.status?.state, JSON.stringify(sent.body)).toBe('completed');
    await openDashboard();
    await page.locator(`#sessions tr[data-session-id="${parent.sessionId}"]`).click();
    const called = page.locator('#timeline li[data-type="tool_call"]', { hasText: 'gnp.exe' });
    await called.waitFor({ timeout: 15_000 });
    expect(await called.textContent()).toContain('tool safe\\u202egnp.exe\\u0007');
    const drawn = (await page.locator('#timeline').textContent()) ?? '';
    expect(drawn.includes('\u202e') || drawn.includes('\u0007')).toBe(false);
  });

  it('gives a wrong or missing token nothing: not the page, not the data, not the stream', async () => {
    const known = (agents[0] as RunningAgent).sessionId;
    const paths = ['/dashboard', '/dashboard/dashboard.js', '/dashboard/api/snapshot', '/dashboard/api/events', `/dashboard/api/sessions/${known}/timeline`];
    const attempts: Array<Record<string, string>> = [
      {},
      { authorization: 'Bearer wrong-token-wrong-token' },
      { cookie: 'murmur_dashboard=wrong-token-wrong-token' },
      // The right token's first half: a prefix is no closer to admitted than any other guess.
      { authorization: `Bearer ${TOKEN.slice(0, TOKEN.length / 2)}` },
    ];
    for (const headers of attempts) {
      for (const where of paths) {
        const response = await fetch(`${watcher.url}${where}`, { headers });
        const body = await response.text();
        expect(response.status, `${where} ${JSON.stringify(headers)}`).toBe(401);
        expect(JSON.parse(body)).toMatchObject({ error: { code: 'E-DASH-002' } });
        expect(body).not.toContain(known);
      }
    }
    const wrongInUrl = await fetch(`${watcher.url}/dashboard?token=wrong-token-wrong-token`, { redirect: 'manual' });
    expect(wrongInUrl.status).toBe(401);
    expect(wrongInUrl.headers.get('set-cookie')).toBeNull();
    // The right token is traded for the cookie on the page's path with its slash too, and leaves the URL.
    for (const where of ['/dashboard', '/dashboard/']) {
      const traded = await fetch(`${watcher.url}${where}?token=${TOKEN}`, { redirect: 'manual' });
      expect(traded.status, where).toBe(303);
      expect(traded.headers.get('location')).toBe('/dashboard');
      expect(traded.headers.get('set-cookie')).toContain('HttpOnly; SameSite=Strict');
    }
    // The right token as a bearer header is admitted, for a script.
    const snapshot = await fetch(`${watcher.url}/dashboard/api/snapshot`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(snapshot.status).toBe(200);
    expect(DashboardSnapshotSchema.parse(await snapshot.json()).sessions.some((session) => session.session_id === known)).toBe(true);

    // A browser with a wrong token (and no cookie from before) sees the refusal and none of the page.
    await browser.clearCookies();
    const other = await browser.newPage();
    try {
      const response = await other.goto(`${watcher.url}/dashboard?token=wrong-token-wrong-token`);
      expect(response?.status()).toBe(401);
      const text = (await other.textContent('body')) ?? '';
      expect(text).toContain('E-DASH-002');
      expect(text).not.toContain('Sessions');
      expect(await other.locator('#sessions').count()).toBe(0);
    } finally {
      await other.close();
    }
  });

  it('refuses a session id that is not one with 400, and one of no session with 404, each with E-SES-001', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const malformed = await fetch(`${watcher.url}/dashboard/api/sessions/not-a-session/timeline`, { headers: auth });
    expect(malformed.status).toBe(400);
    const refused = (await malformed.json()) as { error: { code: string; message: string } };
    expect(refused.error.code).toBe('E-SES-001');
    expect(refused.error.message).toContain("'not-a-session' is not a session id");
    const unknown = await fetch(`${watcher.url}/dashboard/api/sessions/ses_0199c4e2f1b7712a9d3e4f5061728399/timeline`, { headers: auth });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('E-SES-001');
    // A real session's timeline is well formed.
    const real = await fetch(`${watcher.url}/dashboard/api/sessions/${(agents[0] as RunningAgent).sessionId}/timeline`, { headers: auth });
    expect(real.status).toBe(200);
    expect(DashboardTimelineSchema.parse(await real.json()).entries.length).toBeGreaterThan(3);
  });

  it('will not start on a configured bind without a token (E-DASH-001), nor with a guessable token (E-CFG-003)', async () => {
    const refused = startService('watcher', { ...env, MURMUR_WATCHER_HOST: '127.0.0.1' });
    await expect(refused).rejects.toThrow(/exited with 1 before it was ready/);
    await expect(refused).rejects.toThrow(/E-DASH-001/);
    await expect(refused).rejects.toThrow(/MURMUR_DASHBOARD_TOKEN/);
    // A token short enough to guess is refused too, wherever the watcher binds.
    const guessable = startService('watcher', { ...env, MURMUR_DASHBOARD_TOKEN: 'letmein' });
    await expect(guessable).rejects.toThrow(/E-CFG-003.*at least 16/);
  });

  it('serves loopback without a token by default, and ends its stream with bye when the watcher stops', async () => {
    const local = await startService('watcher', { ...env, MURMUR_DASHBOARD_HEARTBEAT_MS: '200' });
    try {
      const response = await fetch(`${local.url}/dashboard/api/events`);
      expect(response.status).toBe(200);
      const frames = readSse(response);
      await new Promise((resolve) => setTimeout(resolve, 700));
      await local.stop();
      const read = await frames;
      expect(read[0]?.event).toBe('snapshot');
      expect(DashboardSnapshotSchema.parse(JSON.parse(read[0]?.data ?? '{}')).watcher_id).toBe(local.ready.instance_id);
      expect(read.some((frame) => frame.comment === ' heartbeat')).toBe(true);
      expect(read.at(-1)?.event).toBe('bye');
    } finally {
      await local.stop();
    }
  });

  it("reads the trace of a --workdir session it did not see start from the session's records, never the trace.jsonl its guest wrote at the workdir's top", async () => {
    const project = await probeProject(path.join(scratch.dir, 'forger'));
    const workdir = path.join(scratch.dir, 'forger-workdir');
    await fs.mkdir(workdir);
    const forged = [1, 2]
      .map((timestamp) => JSON.stringify({ event_type: timestamp === 1 ? 'session_start' : 'session_end', session_id: 'ses_forged', timestamp }))
      .join('\n');
    const run = await runMur(['run', '--json', '--workdir', workdir, '--task', JSON.stringify([{ op: 'write', path: 'trace.jsonl', text: `${forged}\n` }])], {
      cwd: project,
      env,
    });
    expect(run.code, run.stderr).toBe(0);
    const sessionId = (JSON.parse(run.stdout) as { session_id: string }).session_id;
    expect(await fs.readFile(path.join(workdir, 'trace.jsonl'), 'utf8')).toContain('ses_forged');
    const recorded = (await fs.readFile(path.join(workdir, '.murmur', sessionId, 'trace.jsonl'), 'utf8')).trim().split('\n');
    // A watcher started after the session ended knows it only from the executor's record of where it lives.
    const late = await startService('watcher', env);
    try {
      const response = await fetch(`${late.url}/dashboard/api/sessions/${sessionId}/timeline`);
      expect(response.status).toBe(200);
      const timeline = DashboardTimelineSchema.parse(await response.json());
      expect(timeline.entries.map((entry) => entry.at)).toEqual(recorded.map((line) => (JSON.parse(line) as { timestamp: number }).timestamp));
    } finally {
      await late.stop();
    }
  });
});
