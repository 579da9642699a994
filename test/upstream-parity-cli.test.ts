import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, promises as fs } from 'node:fs';
import { type AddressInfo, type Socket, createServer } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject, rpc, textMessage } from './support/agents.js';
import { capsuleProject, componentArtifact, probeToolArtifact, publishInto } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat, toolWat } from './support/guests.js';
import { murBin, runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * What upstream's own CLI tests (`crates/murmur-cli/tests/*.rs`) assert, tried as an upstream user
 * would, with fixtures built from this project's sources: staging that names every missing
 * artifact, a task that fails by input timeout, and the global store's publish and install.
 */
describe('upstream parity: the CLI', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  const servers: ScriptedInference[] = [];

  beforeAll(async () => {
    scratch = await tempDir('murmur-parity-cli-');
  });

  afterAll(async () => {
    for (const server of servers) await server.close();
    await scratch.cleanup();
  });

  /** A user's machine of its own: a home with an empty global store. */
  function home(name: string): { MURMUR_HOME: string } {
    return { MURMUR_HOME: path.join(scratch.dir, name, 'home') };
  }

  const globalStore = (env: { MURMUR_HOME: string }): string => path.join(env.MURMUR_HOME, 'artifacts');

  describe('missing artifacts (run.rs, graduation.rs)', () => {
    it('names every missing artifact at once with the hint to run mur install, and launches nothing', async () => {
      const env = home('missing');
      await publishInto(globalStore(env), await componentArtifact('present-tool', '1.0.0', (await toolWat()).bytes));
      const manifest = [
        'name: app',
        'version: 0.1.0',
        'artifacts:',
        '  - name: missing-tool',
        '    version: 0.0.1',
        '  - name: present-tool',
        '    version: 1.0.0',
        '  - name: jsonl-line-count',
        '    version: 9.9.9',
        '',
      ].join('\n');
      const project = await capsuleProject(path.join(scratch.dir, 'missing', 'project'), manifest, (await capsuleWat()).bytes);
      const result = await runMur(['run'], { cwd: project, env });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-RUN-008]: missing artifacts: missing-tool@0.0.1, jsonl-line-count@9.9.9\n');
      expect(result.stderr).toContain('run `mur install` to install all manifest dependencies');
      expect(result.stdout).not.toContain('session:');
      expect(existsSync(path.join(project, 'workdir'))).toBe(false);
      expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
    });

    it('never pulls a missing artifact from a registry the configuration names: installing is mur install’s job', async () => {
      const env = home('no-pull');
      // A registry that would answer nothing: any attempt to pull shows as a connection here.
      const connections: Socket[] = [];
      const listener = createServer((socket) => connections.push(socket));
      await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
      const registryUrl = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
      try {
        for (const key of ['registry.default', 'registry.index_url']) {
          const set = await runMur(['config', 'set', '-g', key, registryUrl], { env });
          expect(set.code, set.stderr).toBe(0);
        }
        const project = await capsuleProject(
          path.join(scratch.dir, 'no-pull', 'project'),
          'name: app\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n',
          (await capsuleWat()).bytes,
        );
        const result = await runMur(['run', '--verbose'], { cwd: project, env, timeoutMs: 30_000 });
        expect(result.code).toBe(1);
        expect(result.stderr).toContain('error[E-RUN-008]: missing artifacts: echo-tool@0.1.0');
        expect(connections).toHaveLength(0);
        expect(existsSync(path.join(project, '.murmur', 'artifacts', 'echo-tool'))).toBe(false);
      } finally {
        for (const socket of connections) socket.destroy();
        await new Promise((resolve) => listener.close(resolve));
      }
    });
  });

  describe('input timeout (input_required.rs)', () => {
    it('fails the run, status failed and exit 1, when its task fails by input-timeout (decided, unlike upstream)', async () => {
      const env = home('input-timeout');
      await publishInto(globalStore(env), await probeToolArtifact());
      const inference = await startScriptedInference({
        script: [{ toolCalls: [{ name: 'probe-tool', input: { actions: [{ op: 'ask', prompt: 'anyone?' }] } }] }],
      });
      servers.push(inference);
      const project = await agentProject(
        path.join(scratch.dir, 'input-timeout', 'project'),
        agentManifest(inference, { artifacts: '  - name: probe-tool\n    version: 1.0.0\n    runtime: tool', lifecycle: '  input_timeout_secs: 1' }),
      );
      // Not --json: the run's last line is its status. The task comes over A2A, as upstream's does.
      const child = spawn(murBin, ['run', '-v'], {
        cwd: project,
        env: { PATH: process.env.PATH ?? '', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const exited = once(child, 'exit');
      try {
        const url = await new Promise<string>((resolve, reject) => {
          child.stdout.on('data', (chunk: Buffer) => {
            stdout += chunk.toString();
            const found = /^murmur: url (\S+)$/m.exec(stdout)?.[1];
            if (found) resolve(found);
          });
          exited.then(() => reject(new Error(`mur run exited before its url:\n${stderr}`)));
        });
        const sent = await rpc(url, 'message/send', textMessage('ask someone'));
        expect(sent.status).toBe(200);
        const [code] = await exited;
        expect(code).toBe(1);
        expect(stdout.trim().split('\n').at(-1)).toBe('status:  failed');
        expect(stderr).toContain('input-timeout');
        const workdir = /^workdir: (.+)$/m.exec(stdout)?.[1] as string;
        expect(await fs.readFile(path.join(workdir, 'out', 'result.txt'), 'utf8')).toBe('error: input-timeout');
      } finally {
        if (child.exitCode === null) child.kill('SIGTERM');
        await exited;
      }
    });
  });

  describe('the global store (publish_install.rs)', () => {
    async function published(name: string, env: { MURMUR_HOME: string }): Promise<string> {
      const zip = path.join(scratch.dir, `${name}-0.0.2.mur.zip`);
      await fs.writeFile(zip, await componentArtifact(name, '0.0.2', (await toolWat()).bytes));
      const result = await runMur(['publish', zip], { env });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain(`Published ${name}@0.0.2`);
      return zip;
    }

    it('reinstalls a version already in the global store with install -g, as often as asked', async () => {
      const env = home('reinstall');
      await published('local-install', env);
      const stored = path.join(globalStore(env), 'local-install', '0.0.2', 'local-install-0.0.2.mur.zip');
      const before = await fs.readFile(stored);
      for (let attempt = 0; attempt < 2; attempt++) {
        const result = await runMur(['install', '-g', 'local-install@0.0.2'], { env });
        expect(result.code, result.stderr).toBe(0);
        expect(result.stdout).toContain('Installed local-install@0.0.2');
      }
      expect(await fs.readFile(stored)).toEqual(before);
    });

    it('refuses a duplicate publish in upstream words, while install -g of the same version succeeds', async () => {
      const env = home('asymmetry');
      const zip = await published('asymmetry', env);
      const again = await runMur(['publish', zip], { env });
      expect(again.code).toBe(1);
      expect(again.stderr).toContain('error[E-REG-003]: artifact asymmetry@0.0.2 already exists in registry');
      const install = await runMur(['install', '-g', 'asymmetry@0.0.2'], { env });
      expect(install.code, install.stderr).toBe(0);
      expect(install.stdout).toContain('Installed asymmetry@0.0.2');
    });

    it('says an artifact is not found in registry when no store has it', async () => {
      const env = home('not-found');
      const result = await runMur(['install', '-g', 'missing-local@0.0.2'], { env });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('artifact missing-local@0.0.2 not found in registry');
    });

    it('aborts install -g of a tampered stored archive with an integrity error, leaving the store as it was', async () => {
      const env = home('tamper');
      await published('tamper-local', env);
      const stored = path.join(globalStore(env), 'tamper-local', '0.0.2', 'tamper-local-0.0.2.mur.zip');
      await fs.writeFile(stored, 'this-is-not-a-valid-zip');
      const result = await runMur(['install', '-g', 'tamper-local@0.0.2'], { env });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-REG-002]: artifact integrity check failed for tamper-local@0.0.2');
      expect(await fs.readFile(stored, 'utf8')).toBe('this-is-not-a-valid-zip');
    });
  });

  describe('session selectors (trace_cmd.rs)', () => {
    /** A complete trace of `turns` turns, written by hand: what a reader needs and no more. */
    function handTrace(sessionId: string, turns: number): string {
      const events = [
        {
          event_type: 'session_start',
          session_id: sessionId,
          timestamp: 1000,
          capsule_name: 'hand-written',
          capsule_version: '0.1.0',
          model: 'm',
          max_turns: 8,
        },
        ...Array.from({ length: turns }, (_, turn) => ({
          event_type: 'inference',
          session_id: sessionId,
          timestamp: 1100 + turn,
          turn,
          input_tokens: 10,
          output_tokens: 3,
          decision: 'end_turn',
          tool_name: null,
        })),
        {
          event_type: 'session_end',
          session_id: sessionId,
          timestamp: 2000,
          total_turns: turns,
          total_input_tokens: 10 * turns,
          total_output_tokens: 3 * turns,
          total_tool_calls: 0,
          total_shell_calls: 0,
          duration_ms: 250 * turns,
          exit_status: 'ok',
        },
      ];
      return events.map((event) => `${JSON.stringify(event)}\n`).join('');
    }

    async function workdirWith(name: string, sessions: Record<string, number>): Promise<string> {
      const workdir = path.join(scratch.dir, name);
      await fs.mkdir(workdir, { recursive: true });
      for (const [id, turns] of Object.entries(sessions)) {
        await fs.mkdir(path.join(workdir, id));
        await fs.writeFile(path.join(workdir, id, 'trace.jsonl'), handTrace(id, turns));
      }
      return workdir;
    }

    const first = `ses_${'1'.repeat(12)}7${'1'.repeat(15)}0cab`;
    const second = `ses_${'2'.repeat(12)}7${'2'.repeat(15)}1cab`;
    const third = `ses_${'3'.repeat(12)}7${'3'.repeat(15)}0002`;

    it('takes a suffix shorter than 4 characters, refusing it only when it names several sessions', async () => {
      const workdir = await workdirWith('short-suffix', { [first]: 1, [second]: 2, [third]: 3 });
      const unique = await runMur(['trace', 'show', '--workdir', workdir, '1CAB']);
      expect(unique.code, unique.stderr).toBe(0);
      expect(unique.stdout).toContain(`session:    ${second}\n`);
      const ambiguous = await runMur(['trace', 'diff', '--workdir', workdir, 'cab', '002']);
      expect(ambiguous.code).toBe(1);
      expect(ambiguous.stderr).toContain(`error[E-TRC-002]: before: ambiguous: 'cab' matches 2 sessions — provide more characters\n  ${first}\n  ${second}\n`);
      const two = await runMur(['trace', 'diff', '--workdir', workdir, '0CAB', '02']);
      expect(two.code, two.stderr).toBe(0);
      expect(two.stdout).toMatch(/^turns {18}1 {16}3 {16}\+2 \(A better\)$/m);
    });

    it('says a full session id is not found, also in a workdir that holds no sessions', async () => {
      const workdir = await workdirWith('no-sessions', {});
      const result = await runMur(['trace', 'show', '--workdir', workdir, first]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`error[E-TRC-002]: session ${first} not found in ${workdir}\n`);
      const suffix = await runMur(['trace', 'show', '--workdir', workdir, '0cab']);
      expect(suffix.stderr).toContain(`error[E-TRC-002]: no session found matching suffix '0cab' in ${workdir}\n`);
      const newest = await runMur(['trace', 'show', '--workdir', workdir]);
      expect(newest.stderr).toContain(`error[E-TRC-002]: no sessions found in workdir at ${workdir}\n`);
    });

    it('prints its output to a reader that stops early without crashing on the closed pipe', async () => {
      const workdir = await workdirWith('closed-pipe', { [first]: 400 });
      const child = spawn(murBin, ['trace', 'steps', '--workdir', workdir], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.stdout.once('data', () => child.stdout.destroy());
      const [code] = await once(child, 'exit');
      expect(stderr).not.toContain('EPIPE');
      expect(code).toBe(0);
    });
  });
});
