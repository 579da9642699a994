import { describe, expect, it } from 'vitest';
import { type CapabilityPolicy, capabilityPolicy, parseCapsuleManifest } from '@murmur/shared';
import { findMisfit, scopeComponents } from '../src/fit.js';

/** The envelope of a capsule whose `capabilities:` block is `yaml` (indented two spaces). */
function policy(yaml: string): CapabilityPolicy {
  return capabilityPolicy(parseCapsuleManifest(`name: local/x\nversion: 0.1.0\ncapabilities:\n${yaml}`).manifest);
}

const base = policy('  containment: advisory\n');
const withPolicy = (changes: Partial<CapabilityPolicy>): CapabilityPolicy => ({ ...base, ...changes });

describe('whether a child envelope fits inside its parent', () => {
  it('fits an envelope inside itself, and the defaults inside the defaults', () => {
    const rich = policy(
      [
        '  network:',
        '    allow: [api.example.com, "https://files.example.com:8443"]',
        '    unix_sockets: true',
        '  filesystem:',
        '    scope: data',
        '    workdir_exec: true',
        '  env:',
        '    allow: [LANG]',
        '  shell:',
        '    allow: [python3, node]',
        '    strip_env: [SECRET_*]',
        '    baseline_env: [PYTHONPATH]',
        '    interpreter_runtime:',
        '      - binary: python3',
        '        dirs: [{ path: /usr/lib/python3, list_dir: true }]',
        '    staged_runtime:',
        '      - { binary: node, source_path: /opt/node, pin: "20.1" }',
        '  spawn:',
        '    allow: [local/a]',
        '  limits:',
        '    memory_bytes: 1000',
        '  containment: sealed',
        '',
      ].join('\n'),
    );
    expect(findMisfit(rich, rich)).toBeUndefined();
    expect(findMisfit(base, base)).toBeUndefined();
  });

  describe('network', () => {
    const parent = withPolicy({ network_allow: ['api.example.com', 'https://files.example.com'] });

    it('lets a bare host rule cover any scheme and port of that host, but not another host', () => {
      expect(
        findMisfit(withPolicy({ network_allow: ['https://api.example.com', 'api.example.com:8080', 'http://api.example.com:81'] }), parent),
      ).toBeUndefined();
      expect(findMisfit(withPolicy({ network_allow: ['sub.api.example.com'] }), parent)).toEqual({
        axis: 'network',
        reason: "network: child rule 'sub.api.example.com' is not covered by the parent's capabilities.network.allow",
      });
    });

    it('does not let a scheme-pinned rule cover a bare host rule or another port', () => {
      expect(findMisfit(withPolicy({ network_allow: ['files.example.com'] }), parent)?.axis).toBe('network');
      expect(findMisfit(withPolicy({ network_allow: ['https://files.example.com:8443'] }), parent)?.axis).toBe('network');
      expect(findMisfit(withPolicy({ network_allow: ['https://files.example.com:443'] }), parent)).toBeUndefined();
    });

    it('refuses unix sockets the parent does not have, and a rule that does not parse', () => {
      expect(findMisfit(withPolicy({ unix_sockets: true }), base)?.reason).toContain('unix_sockets');
      expect(findMisfit(withPolicy({ network_allow: ['ftp://api.example.com'] }), parent)?.reason).toContain(
        "'ftp://api.example.com' is not a valid network rule",
      );
    });
  });

  describe('filesystem', () => {
    it("folds '.' and '..' out of a scope; '.' is the whole workdir", () => {
      expect(scopeComponents('.')).toEqual([]);
      expect(scopeComponents('data/./sub/../other/')).toEqual(['data', 'other']);
      expect(() => scopeComponents('../x')).toThrow(/escape/);
    });

    it('fits a scope equal to the parent’s or beneath it, compared by component rather than by string prefix', () => {
      const parent = withPolicy({ filesystem_scope: 'data' });
      for (const scope of ['data', 'data/sub', './data/deep/er', 'data/sub/..', 'other/../data/x']) {
        expect(findMisfit(withPolicy({ filesystem_scope: scope }), parent), scope).toBeUndefined();
      }
      for (const scope of ['.', 'data2', 'dat', 'data/..', 'other']) {
        expect(findMisfit(withPolicy({ filesystem_scope: scope }), parent), scope).toMatchObject({ axis: 'filesystem' });
      }
      expect(findMisfit(withPolicy({ filesystem_scope: 'anything/at/all' }), withPolicy({ filesystem_scope: '.' }))).toBeUndefined();
    });

    it('refuses workdir_exec the parent does not have', () => {
      expect(findMisfit(withPolicy({ workdir_exec: true }), base)).toEqual({
        axis: 'filesystem',
        reason: "filesystem: child asks for capabilities.filesystem.workdir_exec, which the parent's capabilities do not grant",
      });
    });
  });

  describe('env and shell', () => {
    it('needs env.allow, shell.allow and baseline_env to be subsets', () => {
      const parent = withPolicy({ env_allow: ['A', 'B'], shell_allow: ['git'], shell_baseline_env: ['PYTHONPATH'] });
      expect(findMisfit(withPolicy({ env_allow: ['B'], shell_allow: ['git'], shell_baseline_env: [] }), parent)).toBeUndefined();
      expect(findMisfit(withPolicy({ env_allow: ['C'] }), parent)?.axis).toBe('env');
      expect(findMisfit(withPolicy({ shell_allow: ['git', 'sh'] }), parent)?.reason).toBe(
        "shell: child binary 'sh' is not in the parent's capabilities.shell.allow",
      );
      expect(findMisfit(withPolicy({ shell_baseline_env: ['NODE_PATH'] }), parent)?.reason).toContain("child passes 'NODE_PATH' to subprocesses");
    });

    it('lets a child run a harness only when the parent runs the same one, where a parent with no subprocess at all approved one', () => {
      const harnessChild = capabilityPolicy(
        parseCapsuleManifest('name: local/h\nversion: 0.1.0\ninference:\n  transport: process\n  command: claude\n').manifest,
      );
      expect(harnessChild.harness_command).toBe('claude');
      expect(findMisfit(harnessChild, base)).toEqual({
        axis: 'shell',
        reason:
          "shell: child runs its inference as the host program 'claude' (inference.transport: process), which the parent's capabilities do not run as their own harness",
      });
      expect(findMisfit(harnessChild, withPolicy({ harness_command: 'claude' }))).toBeUndefined();
      // A parent that may run the program as a subprocess gives it no credentials, which a harness is given.
      expect(findMisfit(harnessChild, withPolicy({ shell_allow: ['claude'] }))?.axis).toBe('shell');
      expect(findMisfit(harnessChild, withPolicy({ harness_command: 'codex' }))?.axis).toBe('shell');
    });

    it('needs the child to strip everything the parent strips', () => {
      const parent = withPolicy({ shell_strip_env: ['SECRET_*'] });
      expect(findMisfit(withPolicy({ shell_strip_env: ['SECRET_*', 'MORE'] }), parent)).toBeUndefined();
      expect(findMisfit(withPolicy({ shell_strip_env: [] }), parent)).toEqual({
        axis: 'shell',
        reason: "shell: child does not strip 'SECRET_*', which the parent's capabilities.shell.strip_env strips",
      });
    });

    it('needs interpreter directories covered for the same binary, and listing only where the parent lists', () => {
      const grant = (binary: string, dirPath: string, listDir: boolean) => ({
        shell_allow: [binary],
        interpreter_runtime: [{ binary, dirs: [{ path: dirPath, list_dir: listDir }] }],
      });
      const parent = withPolicy(grant('python3', '/usr/lib/python3', false));
      expect(findMisfit(withPolicy(grant('python3', '/usr/lib/python3/site-packages', false)), parent)).toBeUndefined();
      expect(findMisfit(withPolicy(grant('python3', '/usr/lib/python3x', false)), parent)?.reason).toContain("access to '/usr/lib/python3x'");
      expect(findMisfit(withPolicy(grant('python3', '/usr/lib/python3', true)), parent)?.reason).toContain("listing of '/usr/lib/python3'");
      expect(
        findMisfit(
          withPolicy({
            ...grant('python3', '/usr/lib/python3', false),
            shell_allow: ['python3', 'node'],
            interpreter_runtime: [{ binary: 'node', dirs: [{ path: '/usr/lib/python3', list_dir: false }] }],
          }),
          withPolicy({ ...parent, shell_allow: ['python3', 'node'] }),
        )?.axis,
      ).toBe('shell');
    });

    it('needs a staged runtime to be one the parent stages, pin included', () => {
      const staged = (pin: string) => ({ shell_allow: ['node'], staged_runtime: [{ binary: 'node', source_path: '/opt/node', pin }] });
      expect(findMisfit(withPolicy(staged('20.1')), withPolicy(staged('20.1')))).toBeUndefined();
      expect(findMisfit(withPolicy(staged('20.2')), withPolicy(staged('20.1')))?.reason).toBe(
        "shell: child stages 'node' from '/opt/node' (pin '20.2'), which the parent's capabilities.shell.staged_runtime does not",
      );
    });
  });

  describe('spawn, limits and containment', () => {
    it('needs spawn.allow to be a subset', () => {
      expect(findMisfit(withPolicy({ spawn_allow: ['local/a'] }), withPolicy({ spawn_allow: ['local/a', 'local/b'] }))).toBeUndefined();
      expect(findMisfit(withPolicy({ spawn_allow: ['local/c'] }), withPolicy({ spawn_allow: ['local/a'] }))?.axis).toBe('spawn');
    });

    it('holds every limit and resource to at most the parent’s, naming which', () => {
      const parent = policy('  limits:\n    deadline_seconds: 60\n  resources:\n    cpu_seconds: 30\n');
      expect(findMisfit(policy('  limits:\n    deadline_seconds: 60\n  resources:\n    cpu_seconds: 10\n'), parent)).toBeUndefined();
      // An undeclared limit is the default, which can exceed a parent's declared one.
      expect(findMisfit(policy('  resources:\n    cpu_seconds: 10\n'), parent)).toEqual({
        axis: 'limits',
        reason: "limits: child capabilities.limits.deadline_seconds 600 exceeds the parent's 60",
      });
      expect(findMisfit(policy('  limits:\n    deadline_seconds: 30\n  resources:\n    cpu_seconds: 31\n'), parent)).toEqual({
        axis: 'limits',
        reason: "limits: child capabilities.resources.cpu_seconds 31 exceeds the parent's 30",
      });
    });

    it('lets a child declare a deadline tighter than its parent’s, though it then binds the child’s hooks as well', () => {
      // A deadline binds hooks only when written (else 30 s): a child that writes 120 s under a
      // parent that writes none gives its own hooks 120 s. It is a tighter session than the
      // parent's 600, which is what the fit compares; refusing it would refuse the tighter child.
      expect(findMisfit(policy('  limits:\n    deadline_seconds: 120\n'), policy('  containment: advisory\n'))).toBeUndefined();
    });

    it('lets a child declare the parent’s containment floor or a stronger one, never a weaker one', () => {
      const scoped = withPolicy({ containment: 'scoped' });
      expect(findMisfit(withPolicy({ containment: 'scoped' }), scoped)).toBeUndefined();
      expect(findMisfit(withPolicy({ containment: 'sealed' }), scoped)).toBeUndefined();
      expect(findMisfit(withPolicy({ containment: 'advisory' }), scoped)).toEqual({
        axis: 'containment',
        reason: "containment: child declares 'advisory', a weaker floor than the parent's 'scoped'",
      });
    });
  });

  it('names the ceiling it was given in the reason', () => {
    expect(findMisfit(withPolicy({ env_allow: ['X'] }), base, { ceiling: "the approved local/w@1's" })?.reason).toBe(
      "env: child variable 'X' is not in the approved local/w@1's capabilities.env.allow",
    );
  });
});
