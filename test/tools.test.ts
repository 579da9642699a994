import { existsSync, promises as fs } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLockfile, sha256Hex } from '@murmur/shared/artifacts';
import { componentArtifact, nativeEchoTool, nativeTool, publishInto, skillArtifact } from './support/artifacts.js';
import { type ProbeResult, probeProject, probeResults, probeRun } from './support/capsules.js';
import { listTree, tempDir } from './support/fs.js';
import { probeTool } from './support/probe-guests.js';
import { eventually, runMur, spawnMur } from './support/processes.js';
import { type CountingServer, startCountingServer } from './support/servers.js';

describe('tools and the artifact manager', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let store: string;
  let server: CountingServer;
  let other: CountingServer;

  beforeAll(async () => {
    scratch = await tempDir('murmur-tools-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home'), GITHUB_TOKEN: 'ghp-must-not-leak', LANG: 'C.UTF-8' };
    store = path.join(env.MURMUR_HOME as string, 'artifacts');
    server = await startCountingServer(() => ({ body: 'tool reached me' }));
    other = await startCountingServer(() => ({ body: 'tool must not reach me' }));
    await publishInto(
      store,
      await componentArtifact(
        'probe-tool',
        '1.0.0',
        (await probeTool()).bytes,
        'tool',
        'input_schema:\n  type: object\n  properties:\n    actions: { type: array }\ntags: [testing]\n',
      ),
    );
    await publishInto(store, await componentArtifact('probe-tool', '2.0.0', (await probeTool()).bytes));
    await publishInto(store, await nativeEchoTool('native-echo', '1.0.0'));
    await publishInto(store, await nativeTool('native-unstartable', '1.0.0', '#!/no/such/interpreter\n'));
    await publishInto(store, await skillArtifact('house-style', '1.0.0', '# House style\nWrite plainly.\n'));
  });

  afterAll(async () => {
    await server.close();
    await other.close();
    await scratch.cleanup();
  });

  async function run(
    name: string,
    manifest: string,
    actions: unknown[],
  ): Promise<{ results: ProbeResult[]; workdir: string; trace: Array<Record<string, unknown>>; project: string }> {
    const project = await probeProject(path.join(scratch.dir, name), manifest);
    const result = await runMur(['run', '--json', '--task', JSON.stringify(actions)], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    return { ...(await probeRun(workdir)), workdir, project };
  }

  const declared = (capabilities = '') => `artifacts:\n  - name: probe-tool\n    version: 1.0.0\n${capabilities}`;

  describe('murmur:tool-registry/invoke', () => {
    let outcome: Awaited<ReturnType<typeof run>>;

    beforeAll(async () => {
      const toolActions = {
        actions: [
          { op: 'env' },
          { op: 'write', path: 'from-tool.txt', text: 'tool wrote this' },
          { op: 'read', path: '../task.md' },
          { op: 'fetch', url: `${server.url}/` },
          { op: 'fetch', url: `${other.url}/` },
        ],
      };
      outcome = await run(
        'invoke',
        `capabilities:\n  network:\n    allow: [127.0.0.1:${server.port}, 127.0.0.1:${other.port}]\n  env:\n    allow: [GREETING]\n${declared(`    capabilities:\n      filesystem:\n        scope: tool-area\n      network:\n        allow: [127.0.0.1:${server.port}, evil.example.com]\n`)}`,
        [
          { op: 'invoke', name: 'probe-tool', data: JSON.stringify(toolActions) },
          { op: 'invoke', name: 'undeclared-tool', data: '{}' },
          { op: 'print', text: 'the session goes on' },
        ],
      );
    });

    const toolResults = (): ProbeResult[] => JSON.parse((outcome.results[0]!.value as { data: string }).data) as ProbeResult[];

    it('runs a declared WASM tool in its own instance and returns its result', () => {
      expect(outcome.results[0]).toMatchObject({ op: 'invoke', ok: true, value: { status: 'passed', summary: 'probe tool ran 5 actions' } });
      expect(toolResults()[0]?.value).toMatchObject({ MURMUR_CAPSULE_NAME: 'probe' });
    });

    it('gives the tool its own preopen, narrowed by its filesystem.scope', async () => {
      expect(await fs.readFile(path.join(outcome.workdir, 'tool-area', 'from-tool.txt'), 'utf8')).toBe('tool wrote this');
      expect(existsSync(path.join(outcome.workdir, 'from-tool.txt'))).toBe(false);
      expect(toolResults()[2]).toMatchObject({ ok: false, error: 'not-permitted' });
    });

    it('judges the tool’s requests by its own network grant, clamped to the capsule’s', async () => {
      expect(toolResults()[3]).toMatchObject({ ok: true, value: { status: 200, body: 'tool reached me' } });
      expect(toolResults()[4]).toMatchObject({ ok: false });
      expect(other.connections()).toBe(0);
      const bootstrap = await fs.readFile(path.join(outcome.workdir, 'logs', 'bootstrap.log'), 'utf8');
      expect(bootstrap).toContain("warning[W-SEC-007]: probe-tool: network allow entry 'evil.example.com' is not covered");
      expect(outcome.trace.filter((event) => event.event_type === 'egress').map((event) => [event.grant, event.decision])).toEqual([
        ['tool:probe-tool', 'allowed'],
        ['tool:probe-tool', 'denied'],
      ]);
    });

    it('answers an undeclared name with an error the guest reads, and the session goes on', () => {
      expect(outcome.results[1]).toEqual({ op: 'invoke', ok: false, error: "tool 'undeclared-tool' is not declared in manifest allowlist" });
      expect(outcome.results[2]).toMatchObject({ op: 'print', ok: true });
    });

    it('records each call as a tool_call', () => {
      const calls = outcome.trace.filter((event) => event.event_type === 'tool_call');
      expect(calls.map((call) => [call.tool_name, call.status])).toEqual([['probe-tool', 'ok']]);
      expect(calls[0]).toMatchObject({ turn: 0, input: expect.objectContaining({ actions: expect.any(Array) }) });
      expect(outcome.trace.at(-1)).toMatchObject({ event_type: 'session_end', total_tool_calls: 1, exit_status: 'ok' });
    });
  });

  it('runs a native tool with JSON on stdin and stdout, in a scrubbed environment', async () => {
    const { results, workdir } = await run('native', 'artifacts:\n  - name: native-echo\n    version: 1.0.0\n', [
      { op: 'invoke', name: 'native-echo', data: 'ping' },
    ]);
    expect(results[0]).toMatchObject({ ok: true, value: { status: 'passed', summary: 'native native-echo' } });
    const data = (results[0]!.value as { data: string }).data;
    expect(data).toContain(`HOME=${path.join(workdir, '.capsule-home')}`);
    expect(data).toContain('TOKEN= ');
    expect(data).toContain('SAFE=C.UTF-8');
    expect(data).toContain('INPUT={data:ping,log_path:null}');
    expect(await fs.stat(path.join(workdir, 'tools', 'native-echo', 'native-echo')).then((stat) => stat.mode & 0o111)).not.toBe(0);
  });

  it('answers a native tool that cannot start with an error the guest reads, and the session goes on', async () => {
    const { results, trace } = await run('unstartable', 'artifacts:\n  - name: native-unstartable\n    version: 1.0.0\n', [
      { op: 'invoke', name: 'native-unstartable', data: 'ping' },
      { op: 'print', text: 'still here' },
    ]);
    // Its sandbox's launcher could not execute it (the interpreter its #! names is not there): the
    // tool's error, with the launcher's reason, for the guest to read.
    expect(results[0]).toMatchObject({
      op: 'invoke',
      ok: true,
      value: { status: 'error', summary: "native tool 'native-unstartable' exited with exit status: 125" },
    });
    expect((results[0]?.value as { data?: string } | undefined)?.data).toMatch(
      /^murmur-confine: running \S+\/native-unstartable: the file is there, but the interpreter its #! line names \(or the loader it was linked for\) is not\n$/,
    );
    expect(results[1]).toMatchObject({ op: 'print', ok: true });
    expect(trace.at(-1)).toMatchObject({ event_type: 'session_end', exit_status: 'ok' });
  });

  it('returns a skill’s text when a skill is invoked', async () => {
    const { results } = await run('skill', 'artifacts:\n  - name: house-style\n    version: 1.0.0\n    runtime: skill\n', [
      { op: 'invoke', name: 'house-style' },
    ]);
    expect(results[0]).toMatchObject({ ok: true, value: { status: 'passed', data: '# House style\nWrite plainly.\n' } });
  });

  describe('murmur:artifact-manager', () => {
    it('lists the declared tools and the shell binaries, and describes them', async () => {
      const { results } = await run('manage', `${declared()}capabilities:\n  shell:\n    allow: [ls]\n`, [
        { op: 'artifacts' },
        { op: 'describe', name: 'probe-tool' },
        { op: 'describe', name: 'ls' },
        { op: 'describe', name: 'nothing-here' },
        { op: 'diagnostics' },
        { op: 'search', query: 'x' },
      ]);
      expect(results[0]?.value).toEqual([
        { name: 'probe-tool', version: '1.0.0', runtime: 'wasm' },
        { name: 'ls', version: '0.0.0', runtime: 'native' },
      ]);
      expect(results[1]?.value).toMatchObject({ name: 'probe-tool', version: '1.0.0', description: 'the probe-tool tool', tags: ['testing'], runtime: 'wasm' });
      expect(JSON.parse((results[1]!.value as { inputSchema: string }).inputSchema)).toEqual({ type: 'object', properties: { actions: { type: 'array' } } });
      expect(results[2]?.value).toMatchObject({ name: 'ls', version: '0.0.0', runtime: 'native' });
      expect(results[3]).toEqual({ op: 'describe', ok: false, error: "artifact 'nothing-here' is not installed" });
      expect(results[4]).toMatchObject({ ok: true, value: { capabilities: 'artifact-manager/search and remove are not implemented' } });
      expect(results[5]).toMatchObject({ ok: false });
    });

    it('pulls an artifact at run time: verified, installed under tools/, pinned, and then callable', async () => {
      const { results, workdir, project } = await run('pull', '', [
        { op: 'pull', name: 'probe-tool', version: '2.0.0' },
        { op: 'invoke', name: 'probe-tool', data: JSON.stringify({ actions: [{ op: 'print', text: 'pulled and run' }] }) },
        // Pulled again: the session holds its pin already, and the pull is as good as the first.
        { op: 'pull', name: 'probe-tool', version: '2.0.0' },
      ]);
      expect(results[0]).toEqual({ op: 'pull', ok: true, value: { name: 'probe-tool', version: '2.0.0', runtime: 'wasm' } });
      expect(results[1]).toMatchObject({ ok: true, value: { status: 'passed' } });
      expect(results[2]).toEqual(results[0]);
      expect(await listTree(path.join(workdir, 'tools'))).toContain('probe-tool/murmur.yaml');
      const zip = await fs.readFile(path.join(store, 'probe-tool', '2.0.0', 'probe-tool-2.0.0.mur.zip'));
      expect((await readLockfile(path.join(project, 'murmur.lock')))?.artifacts).toEqual([
        { name: 'probe-tool', resolved_version: '2.0.0', sha256: { wasm: sha256Hex(zip) } },
      ]);
    });

    it('pulls a skill as a skill, read when called, and a native tool as installed and described but not callable in a sandbox made before it', async () => {
      const { results, workdir } = await run('pull-kinds', '', [
        { op: 'pull', name: 'house-style', version: '1.0.0' },
        { op: 'invoke', name: 'house-style' },
        { op: 'pull', name: 'native-echo', version: '1.0.0' },
        { op: 'describe', name: 'native-echo' },
        { op: 'invoke', name: 'native-echo', data: 'hello' },
      ]);
      expect(results[0]).toEqual({ op: 'pull', ok: true, value: { name: 'house-style', version: '1.0.0', runtime: 'wasm' } });
      expect(results[1]).toMatchObject({ ok: true, value: { status: 'passed', data: '# House style\nWrite plainly.\n' } });
      expect(await fs.readFile(path.join(workdir, 'tools', 'house-style', 'skill.md'), 'utf8')).toBe('# House style\nWrite plainly.\n');
      expect(results[2]).toEqual({ op: 'pull', ok: true, value: { name: 'native-echo', version: '1.0.0', runtime: 'native' } });
      expect(results[3]).toMatchObject({ ok: true, value: { name: 'native-echo', version: '1.0.0', runtime: 'native' } });
      expect(results[4]).toMatchObject({ ok: false, error: expect.stringContaining("'native-echo' is not declared in manifest allowlist") });
    });

    it('a pull writes nothing through a link the guest planted in tools/: a file link is replaced, a directory link refuses the pull', async () => {
      // tools/probe-tool/murmur.yaml → <project>/planted-file, and tools/house-style → <project>/workdir
      // (both outside the session's workdir, which is <project>/workdir/<session>).
      const { results, workdir, project } = await run('pull-through-links', '', [
        { op: 'mkdir', path: 'tools/probe-tool' },
        { op: 'symlink', target: '../../../../planted-file', path: 'tools/probe-tool/murmur.yaml' },
        { op: 'pull', name: 'probe-tool', version: '2.0.0' },
        { op: 'symlink', target: '../..', path: 'tools/house-style' },
        { op: 'pull', name: 'house-style', version: '1.0.0' },
      ]);
      expect(results.slice(0, 2).every((result) => result.ok)).toBe(true);
      expect(results[2]).toEqual({ op: 'pull', ok: true, value: { name: 'probe-tool', version: '2.0.0', runtime: 'wasm' } });
      expect(existsSync(path.join(project, 'planted-file'))).toBe(false);
      expect((await fs.lstat(path.join(workdir, 'tools', 'probe-tool', 'murmur.yaml'))).isFile()).toBe(true);
      expect(results[4]?.ok).toBe(false);
      expect(results[4]?.error).toContain("'house-style' is a link or not a directory");
      expect(existsSync(path.join(project, 'workdir', 'skill.md'))).toBe(false);
      expect(existsSync(path.join(project, 'workdir', 'murmur.yaml'))).toBe(false);
    });

    it('a pull of a tool the manifest declares keeps the folder its entry grants it: pulled again, it reaches no more of the workdir', async () => {
      const toolActions = [
        { op: 'write', path: 'after.txt', text: 'written by the pulled tool' },
        { op: 'read', path: 'task.md' },
      ];
      const { results, workdir } = await run('pull-declared', declared('    capabilities:\n      filesystem:\n        scope: tool-area\n'), [
        { op: 'pull', name: 'probe-tool', version: '1.0.0' },
        { op: 'invoke', name: 'probe-tool', data: JSON.stringify({ actions: toolActions }) },
      ]);
      expect(results[0]).toMatchObject({ op: 'pull', ok: true });
      const toolResults = JSON.parse((results[1]!.value as { data: string }).data) as ProbeResult[];
      expect(toolResults[0]).toMatchObject({ ok: true });
      expect(existsSync(path.join(workdir, 'tool-area', 'after.txt'))).toBe(true);
      expect(existsSync(path.join(workdir, 'after.txt'))).toBe(false);
      // The session's task.md is outside the tool's folder.
      expect(toolResults[1]).toMatchObject({ ok: false });
    });

    it('a pull a copy of which the guest made impossible leaves no manifest saying it is installed', async () => {
      const { results, workdir } = await run('pull-blocked', '', [
        { op: 'mkdir', path: 'tools/house-style' },
        { op: 'mkdir', path: 'tools/house-style/skill.md' },
        { op: 'pull', name: 'house-style', version: '1.0.0' },
      ]);
      expect(results[2]).toMatchObject({ op: 'pull', ok: false, error: expect.stringContaining('failed to install house-style@1.0.0') });
      expect(existsSync(path.join(workdir, 'tools', 'house-style', 'murmur.yaml'))).toBe(false);
    });

    it('refuses a pull that contradicts murmur.lock and writes nothing', async () => {
      const project = await probeProject(path.join(scratch.dir, 'pull-conflict'));
      const lock = `lock_version: 1\nartifacts:\n  - name: probe-tool\n    resolved_version: 1.0.0\n    sha256:\n      wasm: ${'c'.repeat(64)}\n`;
      await fs.writeFile(path.join(project, 'murmur.lock'), lock);
      const result = await runMur(['run', '--json', '--task', JSON.stringify([{ op: 'pull', name: 'probe-tool', version: '2.0.0' }])], { cwd: project, env });
      const { workdir } = JSON.parse(result.stdout) as { workdir: string };
      const results = probeResults((await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8')).replaceAll('[stdout] ', ''));
      expect(results[0]?.ok).toBe(false);
      expect(results[0]?.error).toContain("murmur.lock conflict for 'probe-tool'");
      expect(await fs.readFile(path.join(project, 'murmur.lock'), 'utf8')).toBe(lock);
      expect(await listTree(path.join(workdir, 'tools'))).toEqual([]);
    });

    /**
     * A session that pulls probe-tool@2.0.0 once `lock` has been written over its project's
     * murmur.lock while it ran (by another mur, or by hand): its exit, its stderr and the lock after.
     */
    async function pullAfterLockWritten(name: string, lock: string): Promise<{ code: number | null; stderr: string; lockAfter: string; lockPath: string }> {
      const project = await probeProject(path.join(scratch.dir, name));
      const { child, output } = spawnMur(
        [
          'run',
          '--json',
          '--task',
          JSON.stringify([
            { op: 'waitfor', path: 'go', seconds: 30 },
            { op: 'pull', name: 'probe-tool', version: '2.0.0' },
          ]),
        ],
        { cwd: project, env },
      );
      try {
        const { workdir } = await eventually(
          () => (output.stdout.includes('\n') ? (JSON.parse(output.stdout.split('\n')[0] as string) as { workdir: string }) : undefined),
          30_000,
          'the launch line',
        );
        const lockPath = path.join(project, 'murmur.lock');
        await fs.writeFile(lockPath, lock);
        await fs.writeFile(path.join(workdir, 'go'), 'go');
        const [code] = (await once(child, 'exit')) as [number | null];
        return { code, stderr: output.stderr, lockAfter: await fs.readFile(lockPath, 'utf8'), lockPath };
      } finally {
        child.kill('SIGKILL');
      }
    }

    it('leaves a murmur.lock it cannot read as it is when a pull pins: the pin is said, not written over it', async () => {
      // A lock of a version this mur does not read.
      const unreadable = 'lock_version: 2\nartifacts:\n  - name: precious\n    resolved_version: 1.0.0\n    sha256:\n      wasm: abc\n';
      const { code, stderr, lockAfter, lockPath } = await pullAfterLockWritten('pull-unreadable-lock', unreadable);
      expect(code, stderr).toBe(0);
      expect(lockAfter).toBe(unreadable);
      expect(stderr).toContain(`warning: could not pin probe-tool@2.0.0 in ${lockPath}: invalid murmur.lock`);
    });

    it('leaves a pin written while the session ran as it is when the session pulls another version: the conflict is said, not written over', async () => {
      // Pinned by someone else while the session runs (mur install probe-tool@1.0.0, say).
      const pinned = `lock_version: 1\nartifacts:\n  - name: probe-tool\n    resolved_version: 1.0.0\n    sha256:\n      wasm: ${'c'.repeat(64)}\n`;
      const { code, stderr, lockAfter } = await pullAfterLockWritten('pull-pinned-meanwhile', pinned);
      expect(code, stderr).toBe(0);
      expect(lockAfter).toBe(pinned);
      expect(stderr).toContain('warning: the session pulled probe-tool@2.0.0, but');
      expect(stderr).toContain('now pins probe-tool@1.0.0; the pin is left as it is (murmur.lock conflict)');
    });

    it('writes no first-run pins for a run whose launch is refused', async () => {
      const project = await probeProject(path.join(scratch.dir, 'refused-pins'), declared());
      const refused = await runMur(['run', '--json', '--workdir', path.join(scratch.dir, 'no-such-workdir')], { cwd: project, env });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('error[E-IO-001]');
      expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
      // The same run launched pins what it resolved.
      expect((await runMur(['run', '--json'], { cwd: project, env })).code).toBe(0);
      expect((await readLockfile(path.join(project, 'murmur.lock')))?.artifacts.map((entry) => entry.name)).toEqual(['probe-tool']);
    });

    it('refuses a pull of an artifact that is not published, naming it', async () => {
      const { results, workdir } = await run('pull-missing', '', [{ op: 'pull', name: 'ghost-tool', version: '9.9.9' }]);
      expect(results[0]?.ok).toBe(false);
      expect(results[0]?.error).toContain('ghost-tool@9.9.9');
      expect(results[0]?.error).toContain('E-RUN-008');
      expect(await listTree(path.join(workdir, 'tools'))).toEqual([]);
    });
  });
});
