import { describe, expect, it } from 'vitest';
import {
  DEFAULT_LIMITS,
  DEFAULT_RESOURCES,
  ERROR_CATALOGUE,
  type ErrorCode,
  LOCK_VERSION,
  MurmurError,
  type MurmurLock,
  MurmurLockSchema,
  type RunningRecord,
  RunningRecordSchema,
  SessionEndedSchema,
  SessionFilesReplySchema,
  SessionStartedSchema,
  TranspiledComponentSchema,
  capabilityPolicy,
  isErrorCode,
  isMurmurError,
  parseCapsuleManifest,
  upsertLockEntry,
} from '@murmur/shared';

describe('the running record', () => {
  const record: RunningRecord = {
    session_id: 'ses_0199c4e2f1b7712a9d3e4f5061728394',
    url: '127.0.0.1:1',
    pid: 1,
    process_start: '42',
    capsule_name: 'demo',
    capsule_version: '0.1.0',
    workdir: '/tmp/demo',
    outlives_launcher: true,
    started_at: '2026-01-01T00:00:00Z',
  };
  const NINE = ['capsule_name', 'capsule_version', 'outlives_launcher', 'pid', 'process_start', 'session_id', 'started_at', 'url', 'workdir'];

  it('has exactly the nine fields', () => {
    expect(Object.keys(RunningRecordSchema.shape).sort()).toEqual(NINE);
    expect(Object.keys(RunningRecordSchema.parse(record)).sort()).toEqual(NINE);
  });

  it.each(NINE)('does not parse a record missing %s', (field) => {
    const partial: Record<string, unknown> = { ...record };
    delete partial[field];
    expect(RunningRecordSchema.safeParse(partial).success).toBe(false);
  });

  it('reads a record with a key it does not know (a newer mur wrote it) as the nine, as the seed’s reader does', () => {
    const read = RunningRecordSchema.safeParse({ ...record, trust: 'trusted' });
    expect(read.success).toBe(true);
    expect(Object.keys(read.data ?? {}).sort()).toEqual(NINE);
  });

  it('does not parse a record whose pid is not a positive integer', () => {
    expect(RunningRecordSchema.safeParse({ ...record, pid: 0 }).success).toBe(false);
    expect(RunningRecordSchema.safeParse({ ...record, pid: 1.5 }).success).toBe(false);
    expect(RunningRecordSchema.safeParse({ ...record, pid: '1' }).success).toBe(false);
  });
});

describe('the lockfile', () => {
  const entry = { name: 'fetcher', resolved_version: '1.0.0', sha256: { wasm: 'ab'.repeat(32) } };

  it('parses a lock at version 1', () => {
    expect(LOCK_VERSION).toBe(1);
    expect(MurmurLockSchema.parse({ lock_version: 1, artifacts: [entry] })).toEqual({ lock_version: 1, artifacts: [entry] });
  });

  it('refuses any other lock_version', () => {
    for (const lock_version of [0, 2, '1']) {
      const result = MurmurLockSchema.safeParse({ lock_version, artifacts: [] });
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]?.message).toBe('unsupported lock_version (expected 1)');
    }
  });

  it.each([
    ['name', { ...entry, name: '  ' }, 'name must not be empty'],
    ['resolved_version', { ...entry, resolved_version: '' }, 'resolved_version must not be empty'],
    ['sha256.wasm', { ...entry, sha256: { wasm: ' ' } }, 'sha256.wasm must not be empty'],
  ])('refuses an entry with a blank %s', (_field, blank, message) => {
    const result = MurmurLockSchema.safeParse({ lock_version: 1, artifacts: [blank] });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.message).toBe(message);
  });

  it('starts a lock when there is none', () => {
    expect(upsertLockEntry(undefined, entry)).toEqual({ lock_version: 1, artifacts: [entry] });
  });

  it('replaces the entry of the same name in place', () => {
    const other = { name: 'notes', resolved_version: '0.2.0', sha256: { wasm: 'cd'.repeat(32) } };
    const lock: MurmurLock = { lock_version: 1, artifacts: [entry, other] };
    const bumped = { name: 'fetcher', resolved_version: '1.1.0', sha256: { wasm: 'ef'.repeat(32) } };
    expect(upsertLockEntry(lock, bumped)).toEqual({ lock_version: 1, artifacts: [bumped, other] });
    expect(lock.artifacts).toEqual([entry, other]);
  });

  it('appends an entry of a new name at the end', () => {
    const added = { name: 'audit', resolved_version: '2.0.0', sha256: { wasm: '01'.repeat(32) } };
    expect(upsertLockEntry({ lock_version: 1, artifacts: [entry] }, added)).toEqual({ lock_version: 1, artifacts: [entry, added] });
  });
});

describe('the error catalogue', () => {
  it('formats an error without a hint as error[CODE]: message', () => {
    expect(new MurmurError('E-CAP-003', 'scoped containment is unachievable').format()).toBe('error[E-CAP-003]: scoped containment is unachievable');
  });

  it('formats an error with a hint on an indented second line', () => {
    expect(new MurmurError('E-IO-001', 'no such file', { hint: 'check the path' }).format()).toBe('error[E-IO-001]: no such file\n  hint: check the path');
  });

  it("keeps the message and the hint on their own lines whatever they quote, and prints a listing's lines beneath the message", () => {
    const quoting = new MurmurError('E-MAN-003', "invalid artifact name 'a\nstatus:  ok'", { hint: 'x\n  hint: forged' });
    expect(quoting.format()).toBe("error[E-MAN-003]: invalid artifact name 'a\\nstatus:  ok'\n  hint: x\\n  hint: forged");
    const listed = new MurmurError('E-TRC-002', "ambiguous: 'ab' matches 2 sessions", { listing: ['ses_1ab', 'ses_\u001b2ab'], hint: 'give more' });
    expect(listed.format()).toBe("error[E-TRC-002]: ambiguous: 'ab' matches 2 sessions\n  ses_1ab\n  ses_\\x1b2ab\n  hint: give more");
    // What crosses a bus or an HTTP body is the message with its listing, as before.
    expect(listed.message).toBe("ambiguous: 'ab' matches 2 sessions\n  ses_1ab\n  ses_\u001b2ab");
  });

  it('takes the catalogue hint unless the error is given its own', () => {
    expect(new MurmurError('E-REG-003', 'fetcher@1.0.0 exists').hint).toBe('published versions are immutable: bump the version and publish again');
    expect(new MurmurError('E-REG-003', 'fetcher@1.0.0 exists', { hint: 'use 1.0.1' }).hint).toBe('use 1.0.1');
    expect(new MurmurError('E-IO-003', 'read failed').hint).toBeUndefined();
  });

  it('round-trips an error through its JSON wire shape', () => {
    const original = new MurmurError('E-CAP-001', "invalid network allow entry 'ftp://x': nope", { path: 'capabilities.network.allow[0]' });
    const json = original.toJSON();
    expect(json).toEqual({
      code: 'E-CAP-001',
      message: "invalid network allow entry 'ftp://x': nope",
      hint: ERROR_CATALOGUE['E-CAP-001'].hint,
      path: 'capabilities.network.allow[0]',
    });
    const restored = MurmurError.fromJSON(json);
    expect(restored).toBeInstanceOf(MurmurError);
    expect(restored.toJSON()).toEqual(json);
    expect(restored.format()).toBe(original.format());
  });

  it('leaves hint and path out of the JSON when the error has none', () => {
    expect(new MurmurError('E-IO-003', 'read failed').toJSON()).toStrictEqual({ code: 'E-IO-003', message: 'read failed' });
  });

  it('reads an unknown code from the wire as E-BUS-006', () => {
    expect(MurmurError.fromJSON({ code: 'E-NOPE-999' as ErrorCode, message: 'odd' }).code).toBe('E-BUS-006');
  });

  it('gives every catalogue code a title and a well-formed name', () => {
    const codes = Object.keys(ERROR_CATALOGUE);
    expect(codes.length).toBeGreaterThan(40);
    for (const code of codes) {
      expect(code).toMatch(/^[EW]-[A-Z]+-\d{3}$/);
      expect(isErrorCode(code)).toBe(true);
      const entry: { title: string; hint?: string } = ERROR_CATALOGUE[code as ErrorCode];
      expect(entry.title.trim()).not.toBe('');
    }
    expect(isErrorCode('E-NOPE-999')).toBe(false);
    expect(isErrorCode('toString')).toBe(false);
  });

  it('tells a MurmurError of a given code from anything else', () => {
    const error = new MurmurError('E-DLG-001', 'unreadable');
    expect(isMurmurError(error)).toBe(true);
    expect(isMurmurError(error, 'E-DLG-001')).toBe(true);
    expect(isMurmurError(error, 'E-CAP-001')).toBe(false);
    expect(isMurmurError(new Error('plain'))).toBe(false);
  });
});

describe('event payloads', () => {
  const started = {
    session_id: 'ses_0199c4e2f1b7712a9d3e4f5061728394',
    capsule_name: 'demo',
    capsule_version: '0.1.0',
    executor_id: 'executor-1',
    pid: 4242,
    process_start: '123456',
    workdir: '/tmp/demo',
    url: null,
    started_at: '2026-01-01T00:00:00Z',
  };
  const ended = {
    session_id: 'ses_0199c4e2f1b7712a9d3e4f5061728394',
    capsule_name: 'demo',
    capsule_version: '0.1.0',
    executor_id: 'executor-1',
    pid: 4242,
    process_start: '123456',
    exit_status: 'failed',
    exit_code: 1,
    signal: null,
    error: { code: 'E-RUN-001', message: 'trapped' },
    duration_ms: 1500,
    ended_at: '2026-01-01T00:00:01Z',
  };

  it('parses a valid session.started payload, filling in that it does not outlive its launcher', () => {
    expect(SessionStartedSchema.parse(started)).toEqual({ ...started, outlives_launcher: false });
  });

  it('parses a valid session.ended payload, filling in an empty stderr tail and no completion reported', () => {
    expect(SessionEndedSchema.parse(ended)).toEqual({ ...ended, stderr_tail: [], completion_reported: false });
  });

  it('refuses a session.started or session.ended payload that names no pid', () => {
    const { pid: _startedPid, ...startedWithoutPid } = started;
    const { pid: _endedPid, ...endedWithoutPid } = ended;
    expect(SessionStartedSchema.safeParse(startedWithoutPid).success).toBe(false);
    expect(SessionEndedSchema.safeParse(endedWithoutPid).success).toBe(false);
  });

  it('refuses an exit status outside ok, failed and trapped', () => {
    expect(SessionEndedSchema.safeParse({ ...ended, exit_status: 'crashed' }).success).toBe(false);
  });
});

describe('the capability policy of a manifest that declares nothing', () => {
  const policy = capabilityPolicy(parseCapsuleManifest('name: tiny\nversion: 1.0.0\n').manifest);

  it('applies the upstream limits: 512 MiB memory, 100000 table elements, 1000 instances, a 600 s deadline', () => {
    expect(DEFAULT_LIMITS).toEqual({ memory_bytes: 536_870_912, table_elements: 100_000, instances: 1_000, deadline_seconds: 600 });
    expect(policy.limits).toEqual(DEFAULT_LIMITS);
    expect(policy.deadline_declared).toBe(false);
  });

  it('applies the upstream resource ceilings', () => {
    expect(policy.resources).toEqual(DEFAULT_RESOURCES);
    expect(policy.resources).toEqual({
      max_processes: 128,
      max_open_files: 1024,
      max_file_size_bytes: 4 * 1024 ** 3,
      cpu_seconds: 3600,
      memory_bytes: 2 * 1024 ** 3,
      cgroup_memory_bytes: 4 * 1024 ** 3,
      cgroup_pids_max: 256,
      cgroup_cpu_percent: 200,
      cgroup_io_bytes_per_sec: 100 * 1024 ** 2,
      workdir_max_bytes: 10 * 1024 ** 3,
    });
  });

  it('grants no network, no shell, no spawn and no env, the whole workdir and advisory containment', () => {
    expect(policy).toMatchObject({
      network_allow: [],
      unix_sockets: false,
      filesystem_scope: '.',
      workdir_exec: false,
      shell_allow: [],
      shell_strip_env: [],
      shell_baseline_env: [],
      interpreter_runtime: [],
      staged_runtime: [],
      spawn_allow: [],
      env_allow: [],
      containment: 'advisory',
    });
  });

  it('keeps the defaults it was not told to change when one limit is written', () => {
    const written = capabilityPolicy(parseCapsuleManifest('name: tiny\nversion: 1.0.0\ncapabilities:\n  limits:\n    deadline_seconds: 30\n').manifest);
    expect(written.limits).toEqual({ ...DEFAULT_LIMITS, deadline_seconds: 30 });
    expect(written.deadline_declared).toBe(true);
  });
});

describe("a plan's transpiled component", () => {
  const digit = (d: string) => d.repeat(64);
  const component = (entry: string, coreModules: string[]) => ({
    sha256: digit('a'),
    size_bytes: 10,
    bundle: {
      key: `jco-test/${digit('a')}`,
      files: [
        { path: 'component.js', sha256: digit('b'), size: 1 },
        { path: 'component.core.wasm', sha256: digit('c'), size: 1 },
      ],
    },
    entry,
    core_modules: coreModules,
    imports: [],
    exports: [],
    cache_hit: false,
  });

  it('names as its entry and core modules only files its bundle brings', () => {
    expect(TranspiledComponentSchema.safeParse(component('component.js', ['component.core.wasm'])).success).toBe(true);
    const outside = TranspiledComponentSchema.safeParse(component('../../../outside/glue.js', ['component.core.wasm', '../../fifo']));
    expect(outside.success).toBe(false);
    expect(outside.error?.issues.map((issue) => [issue.path.join('.'), issue.message])).toEqual([
      ['entry', "'../../../outside/glue.js' is not one of the bundle's files"],
      ['core_modules.1', "'../../fifo' is not one of the bundle's files"],
    ]);
  });
});

describe("a session's directory listing", () => {
  const entry = (name: string) => ({ type: 'directory', path: '.', entries: [{ name, type: 'file', size: 1, modified_at: '2026-01-01T00:00:00.000Z' }] });

  it('takes one name per entry, a name with spaces, dots or a backslash included', () => {
    for (const name of ['result.txt', 'a b', '..hidden', 'x.', 'back\\slash']) expect(SessionFilesReplySchema.safeParse(entry(name)).success, name).toBe(true);
  });

  it('refuses an entry that is a path, or . or .., which `mur files --out` would write outside its target', () => {
    for (const name of ['', '.', '..', '../../.bashrc', 'a/b', '/etc/passwd', 'nul\0byte']) {
      const parsed = SessionFilesReplySchema.safeParse(entry(name));
      expect(parsed.success, JSON.stringify(name)).toBe(false);
    }
  });
});
