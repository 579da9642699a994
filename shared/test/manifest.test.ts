import { describe, expect, it } from 'vitest';
import {
  CapsuleManifestSchema,
  type MurmurError,
  capabilityCategories,
  capabilityPolicy,
  parseArtifactManifest,
  parseCapsuleManifest,
  parseWorkspaceConfig,
  resolveManifestSecrets,
} from '@murmur/shared';

function refusal(text: string, env?: Record<string, string>): MurmurError {
  try {
    parseCapsuleManifest(text, env === undefined ? {} : { env });
  } catch (error) {
    return error as MurmurError;
  }
  throw new Error('expected the manifest to be refused');
}

const FULL = `name: research-agent
version: "0.3.0"
mur_version: 0.2.0
description: reads and summarises
artifacts:
  - name: anthropic-driver
    version: 1.0.0
    runtime: driver
    gateway:
      endpoint: https://api.anthropic.com
      api_key: \${ANTHROPIC_API_KEY}
  - name: local/fetcher
    version: 0.1.0
    capabilities:
      network:
        allow: [https://api.example.com]
      filesystem:
        scope: cache
  - name: notes
    runtime: skill
    source: ./skills/notes
  - name: audit
    version: 2.0.0
    runtime: hook
    on_overflow: block
capabilities:
  network:
    allow: [https://api.example.com, api.anthropic.com:443, localhost]
    unix_sockets: false
  filesystem:
    scope: data
    workdir_exec: false
  shell:
    allow: [git, python3]
    strip_env: [SECRET_*]
    baseline_env: [LANG]
    interpreter_runtime:
      - binary: python3
        dirs:
          - path: /usr/lib/python3
            list_dir: true
  spawn:
    allow: [local/worker]
  env:
    allow: [GREETING]
  limits:
    memory_bytes: 67108864
    deadline_seconds: 30
  resources:
    max_processes: 16
    cgroup_memory_bytes: 268435456
  containment: scoped
inference:
  transport: http
  model: claude-sonnet
  driver:
    artifact: anthropic-driver
    config:
      temperature: 0.2
  max_turns: 5
  system_prompt: You are careful.
context:
  max_tokens: 100000
trace:
  include_tool_output: true
  capture: content
observability:
  otel_endpoint: " http://localhost:4318 "
  eval:
    dataset_id: ds-1
    scorers:
      - type: exit_ok
network:
  internal_port: 8099
lifecycle:
  task_acceptance: queue
  after_task: sleep
  queue_depth: 4
  input_timeout_secs: 120
  conversation: threaded
`;

describe('the capsule manifest', () => {
  it('parses every section of a complete manifest and applies the defaults it leaves out', () => {
    const { manifest, warnings } = parseCapsuleManifest(FULL, { env: { ANTHROPIC_API_KEY: 'sk-test' } });
    expect(warnings).toEqual([]);
    expect(manifest.name).toBe('research-agent');
    expect(manifest.version).toBe('0.3.0');
    expect(manifest.artifacts.map((artifact) => [artifact.name, artifact.runtime, artifact.version])).toEqual([
      ['anthropic-driver', 'driver', '1.0.0'],
      ['local/fetcher', 'tool', '0.1.0'],
      ['notes', 'skill', 'local'],
      ['audit', 'hook', '2.0.0'],
    ]);
    expect(manifest.artifacts[0]?.gateway).toEqual({ endpoint: 'https://api.anthropic.com', api_key: '${ANTHROPIC_API_KEY}' });
    expect(manifest.artifacts[2]).toMatchObject({ source: './skills/notes', local_source: true, prompt_payload: true });
    expect(manifest.artifacts[3]).toMatchObject({ on_overflow: 'block' });
    expect(manifest.inference).toMatchObject({
      transport: 'http',
      model: 'claude-sonnet',
      max_turns: 5,
      max_task_reopens: 1,
      max_tokens: 8192,
      driver: { artifact: 'anthropic-driver', config: { temperature: 0.2 } },
    });
    expect(manifest.lifecycle).toEqual({ task_acceptance: 'queue', after_task: 'sleep', queue_depth: 4, input_timeout_secs: 120, conversation: 'threaded' });
    expect(manifest.observability?.otel_endpoint).toBe('http://localhost:4318');
    expect(manifest.trace).toEqual({ include_tool_output: true, capture: 'content' });

    const policy = capabilityPolicy(manifest);
    expect(policy.limits).toEqual({ memory_bytes: 67108864, table_elements: 100000, instances: 1000, deadline_seconds: 30 });
    expect(policy.resources.max_processes).toBe(16);
    expect(policy.resources.max_open_files).toBe(1024);
    expect(policy.containment).toBe('scoped');
    expect(policy.spawn_allow).toEqual(['local/worker']);
  });

  it('gives an empty manifest of a script capsule the upstream defaults', () => {
    const { manifest } = parseCapsuleManifest('name: tiny\nversion: 1.0.0\n');
    const policy = capabilityPolicy(manifest);
    expect(manifest.artifacts).toEqual([]);
    expect(policy.network_allow).toEqual([]);
    expect(policy.filesystem_scope).toBe('.');
    expect(policy.limits).toEqual({ memory_bytes: 536870912, table_elements: 100000, instances: 1000, deadline_seconds: 600 });
    expect(policy.containment).toBe('advisory');
    expect(policy.deadline_declared).toBe(false);
  });

  it('keeps a version written like a number as the text that was written', () => {
    const { manifest } = parseCapsuleManifest('name: tiny\nversion: 1.0\nartifacts:\n  - name: t\n    version: 1.10\n');
    expect(manifest.version).toBe('1.0');
    expect(manifest.artifacts[0]?.version).toBe('1.10');
  });

  it('refuses malformed YAML with E-MAN-002 and the line it breaks on', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities: [\n');
    expect(error.code).toBe('E-MAN-002');
    expect(error.message).toMatch(/murmur\.yaml: YAML syntax error at line \d+, column \d+/);
  });

  it('refuses a key given twice in one mapping with E-MAN-002 and the line of the second', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  env:\n    allow: [HOME]\n  env:\n    allow: [PATH]\n');
    expect(error.code).toBe('E-MAN-002');
    expect(error.message).toBe('murmur.yaml: YAML syntax error at line 6, column 3: Map keys must be unique');
    // The same key in two mappings is no repetition.
    expect(() => parseCapsuleManifest('name: tiny\nversion: 1.0.0\nx:\n  a: 1\ny:\n  a: 2\n')).not.toThrow();
  });

  it('refuses YAML whose aliases would expand past the bound with E-MAN-002, not a crash', () => {
    const laughs = 'a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nname: x\nversion: 1.0.0\n';
    const error = refusal(laughs);
    expect(error.code).toBe('E-MAN-002');
    expect(error.message).toMatch(/^murmur\.yaml: .*alias/i);
    expect(error.hint).toContain('aliases');
    // The workspace configuration reads YAML the same way, and says it as its own refusal.
    expect(() => parseWorkspaceConfig(laughs, '.murmur/config.yaml')).toThrow(expect.objectContaining({ code: 'E-CFG-003' }));
  });

  it('refuses, before composing any of it, YAML with more tokens than any manifest holds or values nested past 64 (brackets, block lists, explicit keys), each time it is read', () => {
    const list = `name: x\nversion: 1.0.0\nx:\n${'  - 1\n'.repeat(200_000)}`;
    // Counted, not composed (composing this took seconds and a gigabyte): the refusal says so.
    const long = refusal(list);
    expect(long.code).toBe('E-MAN-002');
    expect(long.message).toBe('murmur.yaml: more than 100000 YAML tokens, far more than any such file holds; it is not read');
    const deep = refusal(`name: x\nversion: 1.0.0\nx: ${'['.repeat(65)}${']'.repeat(65)}\n`);
    expect(deep.message).toBe('murmur.yaml: values nested more than 64 deep; it is not read');
    expect(deep.hint).toContain('unclosed');
    expect(() => parseCapsuleManifest(`name: x\nversion: 1.0.0\nx: ${'['.repeat(64)}${']'.repeat(64)}\n`)).not.toThrow();
    // Block lists and explicit keys nest as deep as brackets do: 2 KB of `- ` ended the process that
    // composed it (V8 out of memory, nothing to catch), on its second read if not its first.
    for (const nested of [
      `${'- '.repeat(1_000)}x`,
      `${'? '.repeat(3_000)}x`,
      `x:\n${Array.from({ length: 70 }, (_, level) => `${' '.repeat(level + 2)}k${level}:`).join('\n')} 1\n`,
    ]) {
      for (let read = 0; read < 3; read += 1) expect(refusal(nested).message).toBe('murmur.yaml: values nested more than 64 deep; it is not read');
    }
    // The lockfile and the workspace configuration read YAML the same way.
    expect(() => parseWorkspaceConfig(list, '.murmur/config.yaml')).toThrow(expect.objectContaining({ code: 'E-CFG-003' }));
  });

  it('refuses a key that is a list, a mapping or an alias with E-MAN-002 naming its line, where Node printed a warning of its own on stderr', () => {
    const warned: unknown[] = [];
    const listen = (warning: unknown): void => {
      warned.push(warning);
    };
    process.on('warning', listen);
    try {
      for (const [text, line] of [
        ['name: x\nversion: 1.0.0\n? [a, b]\n: 1\n', '3, column 3'],
        ['name: x\nversion: 1.0.0\n{a: 1}: 2\n', '3, column 1'],
        ['name: &n x\nversion: 1.0.0\n*n : 2\n', '3, column 1'],
      ] as const) {
        const error = refusal(text);
        expect(error.code).toBe('E-MAN-002');
        expect(error.message).toMatch(
          new RegExp(`^murmur\\.yaml: YAML syntax error at line ${line}: a key must be a plain name, not a list, a mapping or an alias$`),
        );
      }
    } finally {
      process.off('warning', listen);
    }
    expect(warned).toEqual([]);
  });

  it('warns of an unrecognized key at any depth, with its path and line, where a misspelt one was dropped without a word', () => {
    const { manifest, warnings } = parseCapsuleManifest(
      [
        'name: x',
        'version: 1.0.0',
        'capabilities:',
        '  containmnet: sealed',
        '  resources:',
        '    max_proceses: 1',
        'artifacts:',
        '  - name: t',
        '    version: 1.0.0',
        '    runtime: tool',
        '    capabilitys: {}',
        '',
      ].join('\n'),
    );
    expect(warnings).toEqual([
      { code: 'W-SEC-019', message: "murmur.yaml: unrecognized key 'capabilities.containmnet' (line 4); it is ignored", path: 'capabilities.containmnet' },
      {
        code: 'W-SEC-019',
        message: "murmur.yaml: unrecognized key 'capabilities.resources.max_proceses' (line 6); it is ignored",
        path: 'capabilities.resources.max_proceses',
      },
      { code: 'W-SEC-019', message: "murmur.yaml: unrecognized key 'artifacts[0].capabilitys' (line 11); it is ignored", path: 'artifacts[0].capabilitys' },
    ]);
    // Ignored as it says: the default floor, no per-artifact block.
    expect(manifest.capabilities?.containment).toBeUndefined();
    expect(manifest.artifacts[0]?.capabilities).toBeUndefined();
  });

  it("names the capability categories as upstream's session_start does: filesystem for any declared scope, '.' included", () => {
    const categories = (caps: string) => capabilityCategories(capabilityPolicy(parseCapsuleManifest(`name: x\nversion: 1.0.0\n${caps}`).manifest));
    expect(categories('capabilities:\n  filesystem:\n    scope: "."\n')).toEqual(['filesystem']);
    expect(categories('capabilities:\n  filesystem:\n    scope: data\n  network:\n    allow: [a.example]\n')).toEqual(['network', 'filesystem']);
    expect(categories('capabilities:\n  filesystem:\n    workdir_exec: true\n')).toEqual([]);
    expect(categories('')).toEqual([]);
  });

  it("refuses an agent capsule with no driver as upstream's E-RUN-005, driver not configured, saying how to name one", () => {
    for (const driver of ['', '  driver: {}\n']) {
      const error = refusal(`name: x\nversion: 1.0.0\ninference:\n  endpoint: https://api.example.com\n  model: m\n${driver}`);
      expect(error.code, driver).toBe('E-RUN-005');
      expect(error.message).toContain('missing required field: no driver is configured');
      expect(error.hint).toContain('inference.driver.artifact');
    }
  });

  it('refuses a manifest with no name with E-MAN-001 naming the field', () => {
    const error = refusal('version: 1.0.0\n');
    expect(error.code).toBe('E-MAN-001');
    expect(error.message).toBe("murmur.yaml: missing required field 'name'");
    expect(error.path).toBe('name');
  });

  it('refuses a blank version as missing', () => {
    const error = refusal('name: tiny\nversion: "  "\n');
    expect(error.code).toBe('E-MAN-001');
    expect(error.path).toBe('version');
  });

  it('refuses a name or version holding a line break or an escape with E-MAN-003 naming the field, where it would add lines to what mur prints', () => {
    const name = refusal('name: "evil\\nstatus:  ok"\nversion: 1.0.0\n');
    expect(name.code).toBe('E-MAN-003');
    expect(name.path).toBe('name');
    expect(name.message).toContain('control character');
    const version = refusal('name: tiny\nversion: "1.0.0\\u001b[2J"\n');
    expect(version.code).toBe('E-MAN-003');
    expect(version.path).toBe('version');
    // A name mur build would refuse is still run from a project, as upstream runs it.
    expect(parseCapsuleManifest('name: My Agent\nversion: 1.0.0\n').manifest.name).toBe('My Agent');
  });

  it('warns about an unknown top-level key with W-SEC-019 instead of refusing the manifest', () => {
    const { manifest, warnings } = parseCapsuleManifest('name: tiny\nversion: 1.0.0\ncapabilites:\n  network:\n    allow: [example.com]\n');
    expect(manifest.name).toBe('tiny');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.code).toBe('W-SEC-019');
    expect(warnings[0]?.message).toContain("unrecognized key 'capabilites'");
    expect(warnings[0]?.message).toContain('line 3');
  });

  const zeroable = [
    ['limits', 'memory_bytes'],
    ['limits', 'table_elements'],
    ['limits', 'instances'],
    ['limits', 'deadline_seconds'],
    ['resources', 'max_processes'],
    ['resources', 'max_open_files'],
    ['resources', 'max_file_size_bytes'],
    ['resources', 'cpu_seconds'],
    ['resources', 'memory_bytes'],
    ['resources', 'cgroup_memory_bytes'],
    ['resources', 'cgroup_pids_max'],
    ['resources', 'cgroup_cpu_percent'],
    ['resources', 'cgroup_io_bytes_per_sec'],
    ['resources', 'workdir_max_bytes'],
  ] as const;

  it('refuses a runtime grant of the whole filesystem, of what the sandbox mounts fresh, or of its own /tmp, naming the field', () => {
    const interpreter = (dir: string): string =>
      `name: a\nversion: 1.0.0\ncapabilities:\n  shell:\n    allow: [python3]\n    interpreter_runtime:\n      - binary: python3\n        dirs:\n          - { path: "${dir}", list_dir: true }\n`;
    for (const [dir, said] of [
      ['/', "'/' is the host's whole filesystem"],
      ['/usr/..', "'/usr/..' holds '.' or '..': name the directory as it is"],
      ['/usr/lib/ssl/certs/../../../home', "'/usr/lib/ssl/certs/../../../home' holds '.' or '..'"],
      ['/proc/1/root', "'/proc/1/root' lies in /proc, which the sandbox mounts fresh"],
      ['/dev', "'/dev' lies in /dev, which the sandbox mounts fresh"],
      ['/tmp/', "'/tmp/' is the sandbox's own /tmp, which the grant would hide"],
    ] as const) {
      const error = refusal(interpreter(dir));
      expect(error.code, dir).toBe('E-MAN-003');
      expect(error.message, dir).toContain(`'capabilities.shell.interpreter_runtime[0].dirs[0].path': ${said}`);
    }
    // A tree under /tmp is a runtime's as any other.
    expect(() => parseCapsuleManifest(interpreter('/tmp/venv/lib'))).not.toThrow();
    const staged = refusal(
      'name: a\nversion: 1.0.0\ncapabilities:\n  containment: sealed\n  shell:\n    allow: [python3]\n    staged_runtime:\n      - { binary: python3, source_path: /sys/fs, pin: "1" }\n',
    );
    expect(staged.message).toContain("'capabilities.shell.staged_runtime[0].source_path': '/sys/fs' lies in /sys, which the sandbox mounts fresh");
  });

  it("names a context field's refusal as the context's, not the inference's", () => {
    const error = refusal('name: a\nversion: 1.0.0\ncontext:\n  record: "a b"\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.message).toMatch(/^murmur\.yaml: invalid context config for 'context\.record': 'a b' is not a record name/);
  });

  it.each(zeroable)('refuses a zero capabilities.%s.%s as "must be greater than zero" with its YAML path', (block, field) => {
    const error = refusal(`name: tiny\nversion: 1.0.0\ncapabilities:\n  ${block}:\n    ${field}: 0\n`);
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe(`capabilities.${block}.${field}`);
    expect(error.message).toBe(`murmur.yaml: invalid capability config for 'capabilities.${block}.${field}': must be greater than zero (line 5)`);
  });

  it.each(zeroable.filter(([block]) => block === 'resources'))('refuses a negative capabilities.%s.%s the same way', (block, field) => {
    const error = refusal(`name: tiny\nversion: 1.0.0\ncapabilities:\n  ${block}:\n    ${field}: -4096\n`);
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe(`capabilities.${block}.${field}`);
    expect(error.message).toBe(`murmur.yaml: invalid capability config for 'capabilities.${block}.${field}': must be greater than zero (line 5)`);
  });

  it.each([
    ['cgroup_pids_max', 4_194_048, "must be at most 4194048 (the kernel's limit on a group's tasks, less the host's own)"],
    ['cgroup_cpu_percent', 102_400, 'must be at most 102400 (100 for each of 1 024 CPUs)'],
  ] as const)('refuses a capabilities.resources.%s the kernel would not take, naming the bound', (field, most, said) => {
    const manifest = (value: number) => `name: tiny\nversion: 1.0.0\ncapabilities:\n  resources:\n    ${field}: ${value}\n`;
    expect(() => parseCapsuleManifest(manifest(most))).not.toThrow();
    const error = refusal(manifest(most + 1));
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe(`capabilities.resources.${field}`);
    expect(error.message).toBe(`murmur.yaml: invalid capability config for 'capabilities.resources.${field}': ${said} (line 5)`);
  });

  it('refuses a capabilities.resources.max_open_files below what any tool needs to start, naming the floor', () => {
    const manifest = (value: number) => `name: tiny\nversion: 1.0.0\ncapabilities:\n  resources:\n    max_open_files: ${value}\n`;
    expect(() => parseCapsuleManifest(manifest(8))).not.toThrow();
    const error = refusal(manifest(4));
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe('capabilities.resources.max_open_files');
    expect(error.message).toBe(
      "murmur.yaml: invalid capability config for 'capabilities.resources.max_open_files': must be at least 8 (a program's standard streams and the files its loader opens; below it no tool can start) (line 5)",
    );
  });

  it.each([
    ['capabilities:\n  limits:\n    deadline_seconds', 'capabilities.limits.deadline_seconds'],
    ['lifecycle:\n  input_timeout_secs', 'lifecycle.input_timeout_secs'],
  ])('refuses a duration longer than a timer can hold (%s), which would end the session at once', (prefix, at) => {
    const manifest = (seconds: number) => `name: tiny\nversion: 1.0.0\n${prefix}: ${seconds}\n`;
    expect(() => parseCapsuleManifest(manifest(2_000_000))).not.toThrow();
    const error = refusal(manifest(2_200_000));
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe(at);
    expect(error.message).toContain('must be at most 2000000 seconds (about 23 days)');
  });

  it('refuses a unix_sockets grant on a capsule without shell, at its YAML path', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  network:\n    unix_sockets: true\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe('capabilities.network.unix_sockets');
    expect(error.message).toBe(
      "murmur.yaml: invalid capability config for 'capabilities.network.unix_sockets': grants AF_UNIX sockets to subprocesses, but the capsule declares no capabilities.shell.allow, so nothing could use it; declare the shell binaries that need unix sockets, or remove the grant (line 5)",
    );
    expect(() =>
      parseCapsuleManifest('name: tiny\nversion: 1.0.0\ncapabilities:\n  network:\n    unix_sockets: true\n  shell:\n    allow: [python3]\n'),
    ).not.toThrow();
  });

  it('refuses a limit of the wrong type with E-MAN-003 naming the path, the types and the line', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  limits:\n    memory_bytes: lots\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.message).toBe("murmur.yaml: field 'capabilities.limits.memory_bytes' has invalid type (expected number, got string) (line 5)");
  });

  it('refuses a number too large to hold, or not a number, saying which rather than that a number is not a number', () => {
    const infinite = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  limits:\n    deadline_seconds: 1e400\n');
    expect(infinite.code).toBe('E-MAN-003');
    expect(infinite.message).toBe(
      "murmur.yaml: field 'capabilities.limits.deadline_seconds' has invalid type (expected number, got a number too large to hold (infinite)) (line 5)",
    );
    const notANumber = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  limits:\n    deadline_seconds: .nan\n');
    expect(notANumber.message).toContain('(expected number, got not-a-number (.nan))');
  });

  it('refuses a malformed network rule with E-CAP-001 naming the entry and its position', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  network:\n    allow:\n      - example.com\n      - ftp://files.example.com\n');
    expect(error.code).toBe('E-CAP-001');
    expect(error.path).toBe('capabilities.network.allow[1]');
    expect(error.message).toContain("invalid network allow entry 'ftp://files.example.com': unsupported URL scheme 'ftp' (expected http or https)");
    expect(error.message).toContain('line 7');
  });

  it('refuses a per-artifact network rule that does not parse, at its own path', () => {
    const error = refusal(
      'name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    version: 1.0.0\n    capabilities:\n      network:\n        allow: ["https://x.example.com/path"]\n',
    );
    expect(error.code).toBe('E-CAP-001');
    expect(error.path).toBe('artifacts[0].capabilities.network.allow[0]');
  });

  it.each([
    ['/etc', 'scope must be relative to the workdir'],
    ['../outside', "scope cannot escape the workdir via '..'"],
    ['a/../../b', "scope cannot escape the workdir via '..'"],
  ])('refuses the filesystem scope %s with E-CAP-002', (scope, reason) => {
    const error = refusal(`name: tiny\nversion: 1.0.0\ncapabilities:\n  filesystem:\n    scope: ${scope}\n`);
    expect(error.code).toBe('E-CAP-002');
    expect(error.path).toBe('capabilities.filesystem.scope');
    expect(error.message).toContain(reason);
  });

  it('accepts a scope that wanders but stays inside the workdir', () => {
    const { manifest } = parseCapsuleManifest('name: tiny\nversion: 1.0.0\ncapabilities:\n  filesystem:\n    scope: a/../b\n');
    expect(manifest.capabilities?.filesystem?.scope).toBe('a/../b');
  });

  it('refuses an unknown containment class, listing the ones there are', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  containment: fortress\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe('capabilities.containment');
    expect(error.message).toContain("must be one of: advisory, scoped, sealed; got 'fortress'");
  });

  it('refuses a shell block with no binaries', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\ncapabilities:\n  shell:\n    allow: []\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.message).toContain("'capabilities.shell.allow': must contain at least one binary");
  });

  it('refuses an interpreter grant for a binary the shell does not allow', () => {
    const error = refusal(
      'name: tiny\nversion: 1.0.0\ncapabilities:\n  shell:\n    allow: [git]\n    interpreter_runtime:\n      - binary: python3\n        dirs: [{ path: /usr/lib, list_dir: true }]\n',
    );
    expect(error.path).toBe('capabilities.shell.interpreter_runtime[0].binary');
    expect(error.message).toContain("'python3' is not in capabilities.shell.allow");
  });

  it('refuses an interpreter directory or a staged source whose path holds a line break, naming where', () => {
    const interpreter = refusal(
      'name: tiny\nversion: 1.0.0\ncapabilities:\n  shell:\n    allow: [python3]\n    interpreter_runtime:\n      - binary: python3\n        dirs: [{ path: "/opt/none\\nallow rwxdm /", list_dir: true }]\n',
    );
    expect(interpreter.path).toBe('capabilities.shell.interpreter_runtime[0].dirs[0].path');
    expect(interpreter.message).toContain('must not contain a control character');
    const staged = refusal(
      'name: tiny\nversion: 1.0.0\ncapabilities:\n  shell:\n    allow: [python3]\n    staged_runtime:\n      - { binary: python3, source_path: "/opt/py\\tx", pin: "3" }\n',
    );
    expect(staged.path).toBe('capabilities.shell.staged_runtime[0].source_path');
    expect(staged.message).toContain('must not contain a control character');
  });

  describe('artifact declarations', () => {
    it("refuses runtime: wasm with upstream's advice to use runtime: tool", () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    version: 1.0.0\n    runtime: wasm\n');
      expect(error.code).toBe('E-MAN-003');
      expect(error.message).toContain('invalid artifact declaration at index 0');
      expect(error.message).toContain("use 'runtime: tool'");
    });

    it("refuses an artifact's own manifest whose runtime is no role, as a capsule's declaration of it is", () => {
      let error: unknown;
      try {
        parseArtifactManifest('name: odd\nversion: 1.0.0\nruntime: banana\nrequires_files: [odd.wasm]\n');
      } catch (caught) {
        error = caught;
      }
      expect(error).toMatchObject({
        code: 'E-MAN-003',
        message: expect.stringContaining("field 'runtime' has invalid value 'banana' (expected one of: tool, driver, hook, skill)"),
      });
    });

    it('refuses an unknown role, listing the four there are', () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    version: 1.0.0\n    runtime: plugin\n');
      expect(error.message).toContain("unknown runtime 'plugin'; expected one of: tool, driver, hook, skill");
    });

    it('requires a version unless the artifact comes from a local source', () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n');
      expect(error.code).toBe('E-MAN-003');
      expect(error.path).toBe('artifacts[0].version');
    });

    it('refuses a source on a tool that did not opt into local_source', () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    source: ./t\n');
      expect(error.message).toContain("declares 'source:' but does not declare 'local_source: true'");
    });

    it('refuses a gateway on anything but a driver', () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    version: 1.0.0\n    gateway:\n      endpoint: https://x.example.com\n');
      expect(error.path).toBe('artifacts[0].gateway');
    });

    it('refuses the same artifact declared twice', () => {
      const error = refusal('name: tiny\nversion: 1.0.0\nartifacts:\n  - name: t\n    version: 1.0.0\n  - name: t\n    version: 2.0.0\n');
      expect(error.message).toContain("artifact 't' is declared twice");
    });
  });

  describe('inference', () => {
    const agent = (inference: string, artifacts = '') => `name: agent\nversion: 1.0.0\n${artifacts}inference:\n${inference}`;

    it('takes the endpoint from the driver artifact’s gateway when inference names none', () => {
      const { manifest } = parseCapsuleManifest(
        agent(
          '  model: m\n  driver:\n    artifact: d\n',
          'artifacts:\n  - name: d\n    version: 1.0.0\n    runtime: driver\n    gateway:\n      endpoint: http://127.0.0.1:9999\n',
        ),
      );
      expect(manifest.inference?.endpoint).toBeUndefined();
      expect(manifest.artifacts[0]?.gateway?.endpoint).toBe('http://127.0.0.1:9999');
    });

    it('refuses an http agent with no endpoint anywhere', () => {
      const error = refusal(agent('  model: m\n  driver:\n    artifact: d\n'));
      expect(error.path).toBe('inference.endpoint');
      expect(error.message).toContain('missing required field');
    });

    it('refuses plain http to a host that is not this machine', () => {
      const error = refusal(agent('  endpoint: http://api.example.com\n  model: m\n  driver:\n    artifact: d\n'));
      expect(error.path).toBe('inference.endpoint');
      expect(error.message).toContain("uses plain http:// with non-loopback host 'api.example.com'");
    });

    it('accepts the older provider spelling of driver', () => {
      const { manifest } = parseCapsuleManifest(agent('  endpoint: https://api.example.com\n  model: m\n  provider:\n    artifact: d\n'));
      expect(manifest.inference?.driver).toEqual({ artifact: 'd' });
    });

    it('refuses an endpoint on the process transport', () => {
      const error = refusal(agent('  transport: process\n  command: claude\n  endpoint: https://api.example.com\n'));
      expect(error.path).toBe('inference.endpoint');
      expect(error.message).toContain('is not valid with transport: process');
    });

    it('refuses two system prompt sources', () => {
      const error = refusal(
        agent('  endpoint: https://a.example.com\n  model: m\n  driver: { artifact: d }\n  system_prompt: hi\n  system_prompt_file: p.md\n'),
      );
      expect(error.message).toContain('at most one of system_prompt, system_prompt_file, system_prompt_artifact may be set');
    });

    it('refuses a zero max_turns', () => {
      const error = refusal(agent('  endpoint: https://a.example.com\n  model: m\n  driver: { artifact: d }\n  max_turns: 0\n'));
      expect(error.path).toBe('inference.max_turns');
    });
  });

  describe('${VAR} references', () => {
    const withKey = (value: string) =>
      `name: agent\nversion: 1.0.0\ninference:\n  endpoint: https://a.example.com\n  model: m\n  driver: { artifact: d }\n  api_key: "${value}"\n`;

    it('keeps a whole-value reference in the parsed manifest and resolves it on request', () => {
      const { manifest } = parseCapsuleManifest(withKey('${MY_KEY}'), { env: { MY_KEY: 'sk-live' } });
      expect(manifest.inference?.api_key).toBe('${MY_KEY}');
      expect(resolveManifestSecrets(manifest, { MY_KEY: 'sk-live' }).inference?.api_key).toBe('sk-live');
    });

    it('refuses a reference to a variable that is not set, naming it', () => {
      const error = refusal(withKey('${MISSING_KEY}'), {});
      expect(error.code).toBe('E-MAN-003');
      expect(error.message).toBe('murmur.yaml: inference.api_key references ${MISSING_KEY} but the environment variable is not set');
    });

    it('refuses a reference to one of the runtime’s own settings, set or not: its value would go where the capsule says', () => {
      for (const [text, path, name] of [
        [withKey('${MURMUR_DOOR_AUTH}'), 'inference.api_key', 'MURMUR_DOOR_AUTH'],
        [
          'name: agent\nversion: 1.0.0\ninference:\n  endpoint: ${MURMUR_NATS_URL}\n  model: m\n  driver: { artifact: d }\n',
          'inference.endpoint',
          'MURMUR_NATS_URL',
        ],
        [
          'name: probe\nversion: 1.0.0\nobservability:\n  otel_endpoint: ${OTEL_EXPORTER_OTLP_HEADERS}\n',
          'observability.otel_endpoint',
          'OTEL_EXPORTER_OTLP_HEADERS',
        ],
      ] as const) {
        const error = refusal(text, { [name]: 'the-operators-secret' });
        expect(error).toMatchObject({ code: 'E-MAN-003', path });
        expect(error.message).toBe(`murmur.yaml: ${path} references \${${name}}, one of the runtime's own settings, which no capsule is given`);
        expect(error.message).not.toContain('the-operators-secret');
      }
      // Nor is a manifest that came by another way than parsing resolved with one.
      const { manifest } = parseCapsuleManifest(withKey('${MY_KEY}'), { env: { MY_KEY: 'k' } });
      const smuggled = structuredClone(manifest);
      if (smuggled.inference) smuggled.inference.api_key = '${MURMUR_ROOST_TOKEN}';
      expect(() => resolveManifestSecrets(smuggled, { MURMUR_ROOST_TOKEN: 'roost-secret' })).toThrow(/MURMUR_ROOST_TOKEN\}, one of the runtime's own settings/);
    });

    it('holds an endpoint that comes from a variable to the https rule once it is resolved', () => {
      const viaVariable = 'name: agent\nversion: 1.0.0\ninference:\n  endpoint: ${MODEL_ENDPOINT}\n  model: m\n  driver: { artifact: d }\n';
      const { manifest } = parseCapsuleManifest(viaVariable, { env: { MODEL_ENDPOINT: '' } });
      expect(resolveManifestSecrets(manifest, { MODEL_ENDPOINT: 'https://models.example.com' }).inference?.endpoint).toBe('https://models.example.com');
      expect(resolveManifestSecrets(manifest, { MODEL_ENDPOINT: 'http://127.0.0.1:8080' }).inference?.endpoint).toBe('http://127.0.0.1:8080');
      let refused: MurmurError | undefined;
      try {
        resolveManifestSecrets(manifest, { MODEL_ENDPOINT: 'http://models.example.com' });
      } catch (error) {
        refused = error as MurmurError;
      }
      expect(refused?.code).toBe('E-MAN-003');
      expect(refused?.message).toContain(
        "'inference.endpoint' (from ${MODEL_ENDPOINT}): the value of ${MODEL_ENDPOINT} uses plain http:// with non-loopback host — use https://",
      );
      expect(refused?.message).not.toContain('models.example.com');
    });

    it('refuses an endpoint that carries credentials in its URL, written or from a variable, since the capsule’s code is given the endpoint', () => {
      const written = refusal(
        'name: agent\nversion: 1.0.0\ninference:\n  endpoint: https://user:pass@models.example.com\n  model: m\n  driver: { artifact: d }\n',
      );
      expect(written.code).toBe('E-MAN-003');
      expect(written.message).toContain(
        "'https://models.example.com/' carries credentials in its URL, and the endpoint is given to the capsule's own code: put the key in inference.api_key",
      );
      // The credential itself is not printed back.
      expect(written.message).not.toContain('pass@');
      const { manifest } = parseCapsuleManifest('name: agent\nversion: 1.0.0\ninference:\n  endpoint: ${EP}\n  model: m\n  driver: { artifact: d }\n', {
        env: { EP: '' },
      });
      let refused: MurmurError | undefined;
      try {
        resolveManifestSecrets(manifest, { EP: 'http://u:SECRETUSERINFO@127.0.0.1:18555' });
      } catch (error) {
        refused = error as MurmurError;
      }
      expect(refused?.message).toBe(
        "murmur.yaml: invalid inference config for 'inference.endpoint' (from ${EP}): the value of ${EP} carries credentials in its URL, and the endpoint is given to the capsule's own code: put the key in inference.api_key",
      );
    });

    it('never shows a variable’s value in a refusal of it: a key named where a URL belongs is said by its name alone', () => {
      const secret = 'ghp_QAPARENTSECRET0123456789';
      const refusals: string[] = [];
      for (const yaml of [
        'inference:\n  endpoint: ${GITHUB_TOKEN}\n  model: m\n  driver: { artifact: d }\n',
        'observability:\n  otel_endpoint: ${GITHUB_TOKEN}\n',
      ]) {
        const { manifest } = parseCapsuleManifest(`name: agent\nversion: 1.0.0\n${yaml}`, { env: { GITHUB_TOKEN: secret } });
        try {
          resolveManifestSecrets(manifest, { GITHUB_TOKEN: secret });
        } catch (error) {
          refusals.push(`${(error as MurmurError).code}: ${(error as MurmurError).message}`);
        }
      }
      expect(refusals).toEqual([
        "E-MAN-003: murmur.yaml: invalid inference config for 'inference.endpoint' (from ${GITHUB_TOKEN}): failed to parse the value of ${GITHUB_TOKEN} as a URL",
        "E-MAN-003: murmur.yaml: invalid value for 'observability.otel_endpoint' (from ${GITHUB_TOKEN}): the value of ${GITHUB_TOKEN} is not an http(s) URL",
      ]);
    });

    it('treats anything but a whole ${NAME} as a literal', () => {
      for (const literal of ['prefix${MY_KEY}', '${lower}', '$MY_KEY']) {
        const { manifest } = parseCapsuleManifest(withKey(literal), { env: {} });
        expect(resolveManifestSecrets(manifest, {}).inference?.api_key).toBe(literal);
      }
    });
  });

  it('refuses an unknown task acceptance mode, listing the modes', () => {
    const error = refusal('name: tiny\nversion: 1.0.0\nlifecycle:\n  task_acceptance: many\n');
    expect(error.message).toContain("must be one of: none, single, queue; got 'many'");
  });

  it('refuses a manifest that is not a mapping', () => {
    const error = refusal('- name: tiny\n');
    expect(error.code).toBe('E-MAN-003');
    expect(error.message).toContain("field '<root>' has invalid type (expected mapping, got sequence)");
  });
});

describe('a local-source artifact', () => {
  it('is versioned local for resolving, and keeps the version the manifest declared for reports, across a plan’s round trip', () => {
    const { manifest } = parseCapsuleManifest(
      'name: tiny\nversion: 1.0.0\nartifacts:\n  - name: local-skill\n    version: 0.1.0\n    runtime: skill\n    source: ./skills\n',
    );
    expect(manifest.artifacts[0]).toMatchObject({ name: 'local-skill', version: 'local', declared_version: '0.1.0', source: './skills' });
    const again = CapsuleManifestSchema.parse(JSON.parse(JSON.stringify(manifest)));
    expect(again.artifacts[0]).toMatchObject({ version: 'local', declared_version: '0.1.0' });
  });
});
