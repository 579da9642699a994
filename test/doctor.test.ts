import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_NAMES, currentPlatform } from '@murmur/shared';
import { sha256Hex, writeLockfile } from '@murmur/shared/artifacts';
import { capsuleProject, nativeEchoTool, publishInto, skillArtifact } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat } from './support/guests.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { freePort } from './support/ports.js';
import { type ServiceProcess, runMur, startService } from './support/processes.js';

/**
 * `mur doctor` as a user runs it: the real `mur`, real stores written by `mur install`, this
 * machine's real sandbox probe, and a real stack on a real nats-server.
 */

const platform = currentPlatform();

/** The lines of stdout that carry a mark and name `what`. */
function markedLines(stdout: string, mark: '✓' | '✗' | '!' | '-', what: string): string[] {
  return stdout.split('\n').filter((line) => line.startsWith(`  ${mark}  `) && line.includes(what));
}

describe('mur doctor in a capsule project', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let globalStore: string;
  let counter = 0;

  beforeAll(async () => {
    scratch = await tempDir('murmur-doctor-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    globalStore = path.join(env.MURMUR_HOME as string, 'artifacts');
    await publishInto(globalStore, await skillArtifact('guide', '0.1.0', '# guidance\n'));
    await publishInto(globalStore, await skillArtifact('style', '1.2.0', '# style\n'));
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  /** A project declaring `artifacts` (YAML list items), with each of `install` installed by `mur install`. */
  async function project(artifacts: string, install: string[] = []): Promise<string> {
    counter += 1;
    const dir = await capsuleProject(path.join(scratch.dir, `project-${counter}`), `name: doctored\nversion: 0.0.1\nartifacts:\n${artifacts}`);
    for (const reference of install) {
      const installed = await runMur(['install', reference], { cwd: dir, env });
      expect(installed.code, installed.stderr).toBe(0);
    }
    return dir;
  }

  const declared = '  - name: guide\n    version: 0.1.0\n    runtime: skill\n  - name: style\n    version: 1.2.0\n    runtime: skill\n';

  it('passes with exit 0 when every declared artifact is installed and murmur.lock agrees', async () => {
    const dir = await project(declared, ['guide@0.1.0', 'style@1.2.0']);
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe(`Checking ${path.join(dir, 'murmur.yaml')} for ${platform}...`);
    expect(lines[1]).toBe(`  ✓  guide@0.1.0   ${platform}`);
    expect(lines[2]).toBe(`  ✓  style@1.2.0   ${platform}`);
    expect(lines[3]).toBe('  ✓  murmur.lock   lock_version 1, agrees with the manifest');
    expect(lines.at(-2)).toBe('All checks passed.');
  });

  it('installs and pins a driver this runtime ships, which doctor then finds in the project', async () => {
    const dir = await project('  - name: murmur-driver-anthropic\n    version: 0.1.0\n    runtime: driver\n', ['murmur-driver-anthropic@0.1.0']);
    const lock = await fs.readFile(path.join(dir, 'murmur.lock'), 'utf8');
    expect(lock).toContain('murmur-driver-anthropic');
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain(`  ✓  murmur-driver-anthropic@0.1.0   ${platform}`);
  });

  it('walks up from a subdirectory to the project, and resolves an artifact from the global store without a lock', async () => {
    const dir = await project('  - name: style\n    version: 1.2.0\n    runtime: skill\n');
    const nested = path.join(dir, 'src', 'deep');
    await fs.mkdir(nested, { recursive: true });
    const result = await runMur(['doctor'], { cwd: nested, env });
    expect(result.code, result.stdout).toBe(0);
    expect(markedLines(result.stdout, '✓', 'style@1.2.0')).toHaveLength(1);
    // No lockfile, nothing said about one (upstream).
    expect(result.stdout).not.toContain('murmur.lock');
  });

  it('fails with exit 1 naming a missing artifact, with the install that fixes it', async () => {
    const dir = await project(`${declared}  - name: absent\n    version: 9.9.9\n    runtime: skill\n`, ['guide@0.1.0']);
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  absent@9.9.9   ${platform}   — missing\n`);
    // style is in the global store but not pinned by the lock `mur install guide` wrote.
    expect(result.stdout).toContain(`  ✗  style@1.2.0    ${platform}   — murmur.lock missing artifact entry for 'style'\n`);
    expect(result.stdout).toContain('  ✗  murmur.lock    disagrees with the manifest or the installed bytes for style\n');
    expect(result.stdout).toContain('1 check passed, 2 errors found.');
    expect(result.stdout).toContain('Fix: mur install absent@9.9.9');
    expect(result.stdout).toContain('Fix: mur install style@1.2.0');
    expect(result.stdout).not.toContain('All checks passed.');
  });

  it('fails on a lock entry whose sha256 is not the installed bytes, showing both digests', async () => {
    const dir = await project(declared, ['guide@0.1.0', 'style@1.2.0']);
    const lockPath = path.join(dir, 'murmur.lock');
    const installed = await fs.readFile(path.join(dir, '.murmur', 'artifacts', 'guide', '0.1.0', 'guide-0.1.0.mur.zip'));
    await writeLockfile(lockPath, {
      lock_version: 1,
      artifacts: [
        { name: 'guide', resolved_version: '0.1.0', sha256: { wasm: '0'.repeat(64) } },
        {
          name: 'style',
          resolved_version: '1.2.0',
          sha256: { wasm: sha256Hex(await fs.readFile(path.join(globalStore, 'style', '1.2.0', 'style-1.2.0.mur.zip'))) },
        },
      ],
    });
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  guide@0.1.0   ${platform}   — artifact integrity check failed for guide@0.1.0\n`);
    expect(result.stdout).toContain(`        expected sha256 (murmur.lock): ${'0'.repeat(64)}\n`);
    expect(result.stdout).toContain(`        actual sha256 (on disk):       ${sha256Hex(installed)}\n`);
    expect(result.stdout).toContain(`  ✓  style@1.2.0   ${platform}`);
    expect(result.stdout).toContain('1 check passed, 1 error found.');
    expect(result.stdout).toContain('Fix: guide: artifact on disk does not match murmur.lock — re-publish or delete the lock');
  });

  it('fails on a lock that pins another version than the manifest, once, without also hashing', async () => {
    const dir = await project('  - name: guide\n    version: 0.1.0\n    runtime: skill\n', ['guide@0.1.0']);
    await writeLockfile(path.join(dir, 'murmur.lock'), {
      lock_version: 1,
      artifacts: [
        { name: 'guide', resolved_version: '0.2.0', sha256: { wasm: '0'.repeat(64) } },
        { name: 'gone', resolved_version: '1.0.0', sha256: { wasm: '1'.repeat(64) } },
      ],
    });
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(markedLines(result.stdout, '✗', "murmur.lock version mismatch for 'guide': manifest requested 0.1.0, lock pinned 0.2.0")).toHaveLength(1);
    expect(result.stdout).not.toContain('artifact integrity check failed');
    expect(result.stdout).toContain('disagrees with the manifest or the installed bytes for guide; also pins gone, which the manifest does not declare');
    expect(result.stdout).toContain('0 checks passed, 1 error found.');
    expect(result.stdout).toContain('Fix: guide: remove the stale murmur.lock entry, then run mur install guide@0.1.0');
  });

  it('fails on stored bytes changed after install, which no longer hash to their recorded digest', async () => {
    const dir = await project('  - name: guide\n    version: 0.1.0\n    runtime: skill\n', ['guide@0.1.0']);
    await fs.rm(path.join(dir, 'murmur.lock'));
    const zip = path.join(dir, '.murmur', 'artifacts', 'guide', '0.1.0', 'guide-0.1.0.mur.zip');
    await fs.writeFile(zip, await skillArtifact('guide', '0.1.0', '# not what was installed\n'));
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  guide@0.1.0   ${platform}   — artifact integrity check failed for guide@0.1.0\n`);
    expect(result.stdout).toContain('        expected sha256 (guide-0.1.0.sha256): ');
    expect(result.stdout).toContain(`        actual sha256 (on disk):       ${sha256Hex(await fs.readFile(zip))}`);
  });

  it('fails on a store whose bytes are another artifact, digest and lock rewritten to match them, as staging refuses them', async () => {
    const dir = await project('  - name: guide\n    version: 0.1.0\n    runtime: skill\n', ['guide@0.1.0']);
    const zip = path.join(dir, '.murmur', 'artifacts', 'guide', '0.1.0', 'guide-0.1.0.mur.zip');
    const other = await skillArtifact('style', '1.2.0', '# style\n');
    await fs.writeFile(zip, other);
    await fs.writeFile(zip.replace(/\.mur\.zip$/, '.sha256'), sha256Hex(other));
    await writeLockfile(path.join(dir, 'murmur.lock'), {
      lock_version: 1,
      artifacts: [{ name: 'guide', resolved_version: '0.1.0', sha256: { wasm: sha256Hex(other) } }],
    });
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  guide@0.1.0   ${platform}   — E-REG-002: ${zip} holds style@1.2.0, not guide@0.1.0\n`);
    const run = await runMur(['run'], { cwd: dir, env });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('error[E-REG-002]');
  });

  it('refuses a malformed murmur.lock with E-RUN-003 before any checklist line', async () => {
    const dir = await project('  - name: guide\n    version: 0.1.0\n    runtime: skill\n', ['guide@0.1.0']);
    await fs.writeFile(path.join(dir, 'murmur.lock'), 'lock_version: [\n');
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-RUN-003]');
    expect(result.stdout).toBe('');
  });

  it('refuses a malformed murmur.yaml with E-MAN-002 before any checklist line', async () => {
    const dir = path.join(scratch.dir, 'broken-manifest');
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'murmur.yaml'), 'name: broken\nversion: [\n');
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-MAN-002]');
    expect(result.stdout).toBe('');
  });

  it('fails, predicting E-PRJ-002, on a project whose manifest or store is a link to outside it, which staging refuses', async () => {
    const outside = path.join(scratch.dir, 'outside-the-project');
    await fs.mkdir(outside, { recursive: true });
    await fs.writeFile(path.join(outside, 'murmur.yaml'), 'name: doctored\nversion: 0.0.1\n');
    const linkedManifest = path.join(scratch.dir, 'linked-manifest');
    await fs.mkdir(linkedManifest);
    await fs.symlink(path.join(outside, 'murmur.yaml'), path.join(linkedManifest, 'murmur.yaml'));
    const linkedStore = await project(declared, ['guide@0.1.0', 'style@1.2.0']);
    await fs.rename(path.join(linkedStore, '.murmur'), path.join(outside, 'store'));
    await fs.symlink(path.join(outside, 'store'), path.join(linkedStore, '.murmur'));
    for (const dir of [linkedManifest, linkedStore]) {
      const result = await runMur(['doctor'], { cwd: dir, env });
      expect(result.code, result.stdout).toBe(1);
      expect(result.stderr).toContain('[mur doctor] warning[E-PRJ-002]');
      expect(result.stderr).toContain('`mur stage` and `mur run` will refuse this project as it is');
      const staged = await runMur(['stage', dir], { env });
      expect(staged.stderr).toContain('error[E-PRJ-002]');
    }
  });

  it('passes a local-source skill as local source, never looking it up in a store or the lock', async () => {
    const dir = await project(
      '  - name: local-skill\n    version: 0.1.0\n    runtime: skill\n    source: ./skills\n  - name: guide\n    version: 0.1.0\n    runtime: skill\n',
      ['guide@0.1.0'],
    );
    await fs.mkdir(path.join(dir, 'skills'));
    await fs.writeFile(path.join(dir, 'skills', 'skill.md'), '# local\n');
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code, result.stdout).toBe(0);
    // Named by the version the manifest declares, as upstream's doctor names it.
    expect(markedLines(result.stdout, '✓', 'local-skill@')).toEqual([expect.stringMatching(/^ {2}✓ {2}local-skill@0\.1\.0\s+local source$/)]);
    expect(result.stdout).not.toContain("murmur.lock missing artifact entry for 'local-skill'");
    expect(result.stdout).toContain('All checks passed.');
  });

  it("reports the host: the executor probe's containment tier and why, bubblewrap, cgroups and nats-server", async () => {
    const dir = await project('  - name: guide\n    version: 0.1.0\n    runtime: skill\n', ['guide@0.1.0']);
    const [doctor, scope] = await Promise.all([runMur(['doctor'], { cwd: dir, env }), runMur(['run', '--explain-scope', '--json'], { cwd: dir, env })]);
    expect(doctor.code, doctor.stdout + doctor.stderr).toBe(0);
    // The same probe `mur run --explain-scope` reports through the executor.
    const grants = JSON.parse(scope.stdout) as { achieved_containment: string; enforcement_tier: string };
    const host = doctor.stdout.slice(doctor.stdout.indexOf(`\nHost (${platform})\n`));
    expect(host).toMatch(
      new RegExp(`\\n  [✓!]  containment   ${grants.achieved_containment} \\(${grants.enforcement_tier.replaceAll('+', '\\+')}\\)\\n       why: `),
    );
    expect(host).toContain(`this capsule: declared advisory, achieved ${grants.achieved_containment}, floor met`);
    // This machine has all three (the suite's prerequisites).
    expect(host).toMatch(/\n {2}✓ {2}bubblewrap {4}bubblewrap \d+\.\d+\.\d+ \(\/\S+\/bwrap\)\n/);
    expect(host).toMatch(/\n {2}✓ {2}cgroups {7}v[12]: this user can make a session cgroup with memory, pids and cpu limits\n/);
    expect(host).toMatch(/\n {2}✓ {2}nats-server {3}nats-server: v\d+\.\d+\.\d+ \(\/\S+\/nats-server\)\n/);
    expect(host).toContain('  -  stack         MURMUR_NATS_URL is not set: mur runs every service in-process\n');
  });

  it('says why the tier drops when bubblewrap is turned off, and what that does to a sealed capsule, without failing', async () => {
    const dir = await capsuleProject(path.join(scratch.dir, 'sealed-without-bwrap'), 'name: sealed\nversion: 0.0.1\ncapabilities:\n  containment: sealed\n');
    const result = await runMur(['doctor'], { cwd: dir, env: { ...env, MURMUR_BWRAP: 'none' } });
    expect(result.code, result.stdout).toBe(0);
    expect(result.stdout).toContain('  -  bubblewrap    turned off (MURMUR_BWRAP=none)\n');
    expect(result.stdout).toMatch(/ {2}! {2}containment {3}advisory \((namespaces|none)\)\n {7}why: .*bubblewrap is disabled \(MURMUR_BWRAP=none\)/);
    expect(result.stdout).toContain('this capsule: declared sealed, achieved advisory, floor not met: ');
    expect(result.stderr).toContain(
      "[mur doctor] warning[E-CAP-003]: declared containment class 'sealed' is not achievable on this host (achieved: 'advisory')",
    );
    // Not "all passed": the run it predicts is refused.
    expect(result.stdout).toContain('All checks of the project passed, but `mur run` would refuse it on this host: the warning above says why.');
    expect(result.stdout).not.toContain('All checks passed.');
  });

  it('still reports the host outside any capsule project, and exits 0', async () => {
    const empty = path.join(scratch.dir, 'no-project');
    await fs.mkdir(empty, { recursive: true });
    const result = await runMur(['doctor'], { cwd: empty, env });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout.split('\n')[0]).toBe(`No murmur.yaml in ${empty} or any parent directory: no artifacts to check.`);
    expect(result.stdout).toMatch(/\n {2}[✓!] {2}containment {3}/);
    expect(result.stdout).toContain('All checks passed.');
  });

  it('fails, naming E-CFG-003, when MURMUR_CGROUP_PARENT names a cgroup no session group can be made under, which refuses every run', async () => {
    const empty = path.join(scratch.dir, 'no-project-parent');
    await fs.mkdir(empty, { recursive: true });
    const result = await runMur(['doctor'], { cwd: empty, env: { ...env, MURMUR_CGROUP_PARENT: 'murmur-no-such-parent' } });
    expect(result.code, result.stdout + result.stderr).toBe(1);
    expect(markedLines(result.stdout, '✗', 'cgroups')).toHaveLength(1);
    expect(result.stdout).toContain("every 'mur run' on this machine is refused (E-CFG-003): MURMUR_CGROUP_PARENT names 'murmur-no-such-parent'");
    expect(result.stdout).toContain('Fix: make MURMUR_CGROUP_PARENT name a cgroup this user may create groups under');
    expect(result.stdout).not.toContain('All checks passed.');
  });

  it("warns, in upstream's words, about the grants a run would warn about or refuse, without failing", async () => {
    const dir = await capsuleProject(
      path.join(scratch.dir, 'postured'),
      [
        'name: postured',
        'version: 0.0.1',
        'capabilities:',
        '  containment: sealed',
        '  filesystem:',
        '    workdir_exec: true',
        '  shell:',
        '    allow: [python3, cc]',
        '    interpreter_runtime:',
        '      - binary: python3',
        '        dirs:',
        '          - { path: /usr/lib/python3, list_dir: true }',
        '',
      ].join('\n'),
    );
    const result = await runMur(['doctor'], { cwd: dir, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(
      "[capsule-runtime] warning[W-SEC-009]: capabilities.shell.interpreter_runtime grants 'python3' host directories outside the workdir [/usr/lib/python3 (list_dir)]",
    );
    expect(result.stderr).toContain('[capsule-runtime] warning[W-SEC-011]: capabilities.filesystem.workdir_exec is true');
    expect(result.stderr).toContain("[capsule-runtime] warning[W-SEC-012]: capabilities.shell.allow grants the compiler driver 'cc', but its helper 'cc1' at ");
    // workdir_exec caps the capsule at advisory, below its sealed floor.
    expect(result.stderr).toContain('[mur doctor] warning[E-CAP-003]:');
  });

  it('says the same posture warnings when the capsule runs: W-SEC-011 at staging, and W-SEC-012 from the machine that launches it', async () => {
    const wasm = (await capsuleWat()).bytes;
    const execDir = await capsuleProject(
      path.join(scratch.dir, 'run-workdir-exec'),
      'name: run-workdir-exec\nversion: 0.0.1\ncapabilities:\n  filesystem:\n    workdir_exec: true\n',
      wasm,
    );
    const staged = await runMur(['run'], { cwd: execDir, env });
    expect(staged.code, staged.stderr).toBe(0);
    expect(staged.stderr).toContain('[capsule-runtime] warning[W-SEC-011]: capabilities.filesystem.workdir_exec is true');

    const compilerDir = await capsuleProject(
      path.join(scratch.dir, 'run-sealed-cc'),
      'name: run-sealed-cc\nversion: 0.0.1\ncapabilities:\n  containment: sealed\n  shell:\n    allow: [cc]\n',
      wasm,
    );
    // --explain-scope stages nothing, so it says what the manifest alone shows, a misspelt key too.
    await fs.appendFile(path.join(execDir, 'murmur.yaml'), '  containmnet: sealed\n');
    const explained = await runMur(['run', '--explain-scope'], { cwd: execDir, env });
    expect(explained.code, explained.stderr).toBe(0);
    expect(explained.stderr).toContain('[capsule-runtime] warning[W-SEC-011]: capabilities.filesystem.workdir_exec is true');
    expect(explained.stderr).toContain(
      "[capsule-runtime] warning[W-SEC-019]: murmur.yaml: unrecognized key 'capabilities.containmnet' (line 6); it is ignored",
    );

    const launched = await runMur(['run'], { cwd: compilerDir, env });
    expect(launched.code, launched.stderr).toBe(0);
    expect(launched.stderr).toContain(
      "[capsule-runtime] warning[W-SEC-012]: capabilities.shell.allow grants the compiler driver 'cc', but its helper 'cc1' at ",
    );
    const bootstrap = await fs.readFile(path.join(compilerDir, 'workdir', await onlySession(compilerDir), 'logs', 'bootstrap.log'), 'utf8');
    expect(bootstrap).toContain("[containment] warning[W-SEC-012]: capabilities.shell.allow grants the compiler driver 'cc'");
  });

  it('predicts E-CAP-005 and E-RUN-012 for a native tool on a host that can neither sandbox nor bound it, and still passes its artifacts', async () => {
    await publishInto(globalStore, await nativeEchoTool('echoer', '0.3.0'));
    const dir = await project('  - name: echoer\n    version: 0.3.0\n    runtime: tool\n');
    const result = await runMur(['doctor'], {
      cwd: dir,
      env: { ...env, MURMUR_BWRAP: 'none', MURMUR_UNSHARE: 'none', MURMUR_CGROUP_ROOT: path.join(scratch.dir, 'no-cgroups') },
    });
    expect(result.code, result.stdout).toBe(0);
    expect(result.stdout).toContain(`  ✓  echoer@0.3.0   ${platform}\n`);
    expect(result.stdout).toContain('  !  containment   advisory (none)\n');
    expect(result.stdout).toContain('  !  cgroups       this user cannot make a session cgroup with memory, pids and cpu limits\n');
    expect(result.stderr).toContain("[mur doctor] warning[E-CAP-005]: this host cannot give the capsule's subprocess tree its own namespaces");
    expect(result.stderr).toContain('[mur doctor] warning[E-RUN-012]: this capsule can spawn native subprocesses but no cgroup could be created to bound them');
    expect(result.stderr).toContain('Nothing in murmur.yaml can change it — the refusal is about the machine, not the manifest.');
    // With a stack named, the prediction is said to be this machine's, not the stack executor's.
    const withStack = await runMur(['doctor'], {
      cwd: dir,
      env: {
        ...env,
        MURMUR_BWRAP: 'none',
        MURMUR_UNSHARE: 'none',
        MURMUR_CGROUP_ROOT: path.join(scratch.dir, 'no-cgroups'),
        MURMUR_NATS_URL: 'nats://127.0.0.1:9',
      },
    });
    expect(withStack.stderr).toContain(
      "will refuse this capsule on this host until that is resolved — on this machine: `mur run` against the stack at nats://127.0.0.1:9 is judged by its executor's host, which 'mur doctor' does not see.",
    );
  });

  it('warns about a staged_runtime below the sealed floor, and mur run refuses it with the same E-CAP-004', async () => {
    const dir = await capsuleProject(
      path.join(scratch.dir, 'staged-advisory'),
      'name: staged\nversion: 0.0.1\ncapabilities:\n  shell:\n    allow: [python3]\n    staged_runtime:\n      - { binary: python3, source_path: /usr/lib/python3, pin: "3" }\n',
      (await capsuleWat()).bytes,
    );
    const doctor = await runMur(['doctor'], { cwd: dir, env });
    expect(doctor.code, doctor.stderr).toBe(0);
    const sentence =
      "capabilities.shell.staged_runtime is declared for python3 but the effective containment floor is 'advisory' — staging a runtime tree requires the 'sealed' floor";
    expect(doctor.stderr).toContain(`[mur doctor] warning[E-CAP-004]: ${sentence}`);
    expect(doctor.stderr).toContain('`mur run` will refuse this capsule unless the floor is raised');
    const run = await runMur(['run'], { cwd: dir, env });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`error[E-CAP-004]: ${sentence}`);
    await expect(fs.stat(path.join(dir, 'workdir'))).rejects.toThrow();
  });
});

describe('mur doctor and the stack', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let nats: NatsServer;
  const services: ServiceProcess[] = [];
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-doctor-stack-');
    nats = await startNatsServer();
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    for (const name of SERVICE_NAMES) services.push(await startService(name, env));
  });

  afterAll(async () => {
    for (const service of services) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });

  it('reports every service of a real stack answering, as one passed check', async () => {
    const result = await runMur(['doctor'], { cwd: scratch.dir, env });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain(`  ✓  stack         ${nats.url}: every service answers (asked with a 2 s timeout)\n`);
    for (const name of SERVICE_NAMES) expect(result.stdout).toMatch(new RegExp(`\\n {7}✓ {2}${name} +${name}-\\S+, pid \\d+, up \\d+s\\n`));
    expect(result.stdout).toContain('All checks passed.');
  });

  it('fails, naming it, when a service of the stack does not answer', async () => {
    const watcher = services.find((service) => service.name === 'watcher') as ServiceProcess;
    await watcher.stop();
    services.splice(services.indexOf(watcher), 1);
    const result = await runMur(['doctor'], { cwd: scratch.dir, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  stack         ${nats.url}: watcher did not answer within 2 s\n`);
    expect(result.stdout).toMatch(/\n {7}✗ {2}watcher {3}no answer: E-BUS-00\d/);
    expect(result.stdout).toContain("Fix: start the stack's services, or unset MURMUR_NATS_URL to run everything in-process");
  });

  it('reports a MURMUR_NATS_URL where nothing listens as a failed check, within its timeout', async () => {
    const port = await freePort();
    const started = Date.now();
    const result = await runMur(['doctor'], { cwd: scratch.dir, env: { ...env, MURMUR_NATS_URL: `nats://127.0.0.1:${port}` }, timeoutMs: 15_000 });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(`  ✗  stack         nats://127.0.0.1:${port}: no bus answers (asked with a 2 s timeout)\n`);
    expect(result.stdout).toContain(`       127.0.0.1:${port}: ECONNREFUSED\n`);
    expect(result.stdout).toContain('0 checks passed, 1 error found.');
  });

  it('gives up on a listener that never greets as NATS does, after its timeout, and exits promptly', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    try {
      const started = Date.now();
      const result = await runMur(['doctor'], { cwd: scratch.dir, env: { ...env, MURMUR_NATS_URL: `nats://127.0.0.1:${port}` }, timeoutMs: 15_000 });
      const elapsed = Date.now() - started;
      expect(result.code).toBe(1);
      expect(result.stdout).toContain(`       127.0.0.1:${port} did not greet within 2 s\n`);
      expect(elapsed).toBeGreaterThanOrEqual(2_000);
      expect(elapsed).toBeLessThan(6_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

/** The id of the one session a capsule directory's `workdir/` holds. */
async function onlySession(capsuleDir: string): Promise<string> {
  const sessions = (await fs.readdir(path.join(capsuleDir, 'workdir'))).filter((name) => name.startsWith('ses_'));
  expect(sessions).toHaveLength(1);
  return sessions[0] as string;
}
