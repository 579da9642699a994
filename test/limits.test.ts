import path from 'node:path';
import { componentFromWat } from '@murmur/guest-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capsuleProject } from './support/artifacts.js';
import { BUMP_REALLOC_WAT, stdoutImportsWat } from './support/guests.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';

/**
 * `capabilities.limits.memory_bytes` as upstream's `limits.rs` has it: a guest stopped at the
 * ceiling is reported as having exceeded its configured resource limits, naming the limit — also
 * when, as a Rust guest does, it meets the refused growth with an `unreachable` of its own — and a
 * plain `unreachable` that had nothing to do with memory is still a trap. Upstream's fixture is a
 * Rust capsule retaining 8 MiB chunks; these are WAT components doing what its allocator does.
 */

/** A script capsule whose `run` is `body`, over one exported memory of one page. */
function capsuleWat(body: string): string {
  return `(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "run") ${body}))
  (core instance $i (instantiate $m))
  (func $run (canon lift (core func $i "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;
}

/** Grows by `pages` at a time, touching each new chunk, until a grow returns -1; then aborts as Rust's alloc error handler does. */
function balloon(pages: number): string {
  return `(local $at i32)
    (loop $more
      (local.set $at (memory.grow (i32.const ${pages})))
      (if (i32.eq (local.get $at) (i32.const -1)) (then unreachable))
      (i32.store8 (i32.mul (local.get $at) (i32.const 65536)) (i32.const 1))
      (br $more))`;
}

const LIMIT = 16 * 1024 * 1024;

/** One home for the file's capsules: each is a project of its own name beside the others. */
let scratch: { dir: string; cleanup: () => Promise<void> };
let env: Record<string, string>;

beforeAll(async () => {
  scratch = await tempDir('murmur-limits-');
  env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
});

afterAll(async () => {
  await scratch.cleanup();
});

describe('the memory limit', () => {
  async function run(name: string, body: string) {
    const wasm = (await componentFromWat(capsuleWat(body))).bytes;
    const project = await capsuleProject(
      path.join(scratch.dir, name),
      `name: ${name}\nversion: 0.0.1\ncapabilities:\n  limits:\n    memory_bytes: ${LIMIT}\n`,
      wasm,
    );
    return runMur(['run', '--verbose'], { cwd: project, env, timeoutMs: 60_000 });
  }

  it('reports a guest that retains 8 MiB chunks until a grow is refused as over its configured resource limits, naming memory_bytes', async () => {
    // Refused at about 8 MiB, half the ceiling away from it: what the refusal did, not how full memory was.
    const result = await run('chunks', balloon(128));
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('E-RUN-001');
    expect(result.stderr).toContain('exceeded its configured resource limits');
    expect(result.stderr).toContain('capabilities.limits.memory_bytes');
  });

  it('reports a guest that grows page by page to the ceiling the same way', async () => {
    const result = await run('pages', balloon(1));
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('E-RUN-001');
    expect(result.stderr).toContain('exceeded its configured resource limits');
    expect(result.stderr).toContain('capabilities.limits.memory_bytes');
  });

  it('reports a plain unreachable as a trap, not as the memory limit', async () => {
    const result = await run('plain', 'unreachable');
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('E-RUN-001');
    expect(result.stderr).toContain('capsule execution trapped');
    expect(result.stderr).not.toContain('resource limits');
    // Where to look next: the capsule's own output.
    expect(result.stderr).toContain("hint: the capsule's own code stopped it: what it wrote to stdout and stderr before is in the session's logs/session.log");
  });

  it('reports an unreachable after growth that was granted as a trap, even with memory close to the ceiling', async () => {
    // 12 MiB of 16 taken, every grow granted, then a bug.
    const result = await run('granted', '(drop (memory.grow (i32.const 191))) unreachable');
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('capsule execution trapped');
    expect(result.stderr).not.toContain('resource limits');
  });
});

/**
 * A script capsule that makes `instances` instances of one core module, each with a memory of its
 * own that it fills with `pages` pages, and a table it grows by `elements`; `run` traps when either
 * grow was refused. What upstream's limiter bounds besides one memory's size: how many instances a
 * store makes (each memory is capped alone, so their sum is what `instances` bounds) and how far
 * each table grows (`table_elements`).
 */
function manyInstancesWat(instances: number, pages: number, elements: number): string {
  const made = Array.from({ length: instances }, (_, index) => index);
  return `(component
  (core module $grower
    (memory 1)
    (table 1 funcref)
    (func (export "grow") (result i32)
      (if (i32.eq (memory.grow (i32.const ${pages})) (i32.const -1)) (then (return (i32.const 0))))
      (if (i32.eq (table.grow (ref.null func) (i32.const ${elements})) (i32.const -1)) (then (return (i32.const 0))))
      (i32.const 1)))
${made.map((index) => `  (core instance $g${index} (instantiate $grower))`).join('\n')}
  (core module $main
${made.map((index) => `    (import "g${index}" "grow" (func $grow${index} (result i32)))`).join('\n')}
    (func (export "run")
${made.map((index) => `      (if (i32.eqz (call $grow${index})) (then unreachable))`).join('\n')}))
  (core instance $m (instantiate $main
${made.map((index) => `    (with "g${index}" (instance (export "grow" (func $g${index} "grow"))))`).join('\n')}))
  (func $run (canon lift (core func $m "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;
}

describe('the instance and table limits', () => {
  async function run(name: string, wat: string, limits: string) {
    const project = await capsuleProject(
      path.join(scratch.dir, name),
      `name: ${name}\nversion: 0.0.1\ncapabilities:\n  limits:\n${limits}`,
      (await componentFromWat(wat)).bytes,
    );
    return runMur(['run'], { cwd: project, env, timeoutMs: 60_000 });
  }

  it('refuses a component that makes more core instances than limits.instances, naming it, before any runs', async () => {
    // Eight instances of 2 MiB each under a 4 MiB memory cap: each memory alone is within it.
    const result = await run('instances', manyInstancesWat(8, 31, 1), '    memory_bytes: 4194304\n    instances: 4\n');
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-RUN-001]: capsule execution exceeded its configured resource limits');
    expect(result.stderr).toContain('past the limit of 4 instances (capabilities.limits.instances = 4)');
    const within = await run('instances-within', manyInstancesWat(8, 31, 1), '    memory_bytes: 4194304\n    instances: 9\n');
    expect(within.code, within.stderr).toBe(0);
  });

  it('refuses a table grown past limits.table_elements inside the guest, as a memory past its cap is', async () => {
    const past = await run('table-past', manyInstancesWat(1, 0, 100_000), '    table_elements: 1000\n');
    expect(past.code).toBe(1);
    expect(past.stderr).toContain('E-RUN-001');
    const within = await run('table-within', manyInstancesWat(1, 0, 999), '    table_elements: 1000\n');
    expect(within.code, within.stderr).toBe(0);
  });

  it('refuses a component whose table starts past limits.table_elements, naming it', async () => {
    const wat = CAPSULE_WITH_TABLE.replace('TABLE_MIN', '5000');
    const result = await run('table-start', wat, '    table_elements: 1000\n');
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('declares a minimum of 5000 elements, above the table limit of 1000 elements (capabilities.limits.table_elements = 1000)');
  });
});

const CAPSULE_WITH_TABLE = `(component
  (core module $m (table TABLE_MIN funcref) (func (export "run")))
  (core instance $i (instantiate $m))
  (func $run (canon lift (core func $i "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;

/** A capsule of `imports` (component WAT) whose core module, over one page and a bump `realloc`, is `main`. */
function hostCallWat(imports: string, lowered: string, main: string, withs: string): string {
  return `(component
  ${imports}
  (core module $mem
    (memory (export "memory") 1)
    ${BUMP_REALLOC_WAT})
  (core instance $mem-instance (instantiate $mem))
  (alias core export $mem-instance "memory" (core memory $m))
  (alias core export $mem-instance "realloc" (core func $realloc))
  ${lowered}
  (core module $main
    (import "env" "memory" (memory 1))
    ${main})
  (core instance $main-instance (instantiate $main
    (with "env" (instance (export "memory" (memory $m))))
    (with "host" (instance ${withs}))))
  (func $run (canon lift (core func $main-instance "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;
}

describe('what a guest asks its host to make', () => {
  async function run(name: string, wat: string, memoryBytes = LIMIT) {
    const wasm = (await componentFromWat(wat)).bytes;
    const project = await capsuleProject(
      path.join(scratch.dir, name),
      `name: ${name}\nversion: 0.0.1\ncapabilities:\n  limits:\n    memory_bytes: ${memoryBytes}\n`,
      wasm,
    );
    return runMur(['run'], { cwd: project, env: { ...env, MURMUR_EXECUTOR_POOL: '0' } });
  }

  const stdoutCapsule = (body: string, pages = 1): string =>
    hostCallWat(
      stdoutImportsWat({ zeroes: true }),
      `(core func $get-stdout-lowered (canon lower (func $get-stdout)))
  (core func $write-lowered (canon lower (func $write) (memory $m)))
  (core func $zeroes-lowered (canon lower (func $zeroes) (memory $m)))`,
      `(import "host" "get-stdout" (func $get-stdout (result i32)))
    (import "host" "write" (func $write (param i32 i32 i32 i32)))
    (import "host" "zeroes" (func $zeroes (param i32 i64 i32)))
    (func (export "run") ${pages > 1 ? `(drop (memory.grow (i32.const ${pages - 1})))` : ''} ${body})`,
      '(export "get-stdout" (func $get-stdout-lowered)) (export "write" (func $write-lowered)) (export "zeroes" (func $zeroes-lowered))',
    );

  it('refuses write-zeroes of more than check-write permits as a trap, before making them, and the host ends the session itself', async () => {
    const result = await run('zeroes', stdoutCapsule('(call $zeroes (call $get-stdout) (i64.const 100000000) (i32.const 64))'));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-RUN-001]: capsule execution trapped');
    expect(result.stderr).toContain('a write of 100000000 zeroes, more than the 1048576 check-write permits');
    expect(result.stderr).not.toContain('ended without a result');
  });

  it('carries one write of 4 MiB of control characters whole, in pieces, as a pipe would', async () => {
    // Four MiB of NULs, each six characters of JSON on its way to the executor, then a last line.
    const result = await run(
      'control-characters',
      stdoutCapsule(
        `(call $write (call $get-stdout) (i32.const 65536) (i32.const 4194304) (i32.const 64))
      (i32.store (i32.const 32) (i32.const 0x656e6f64)) (i32.store8 (i32.const 36) (i32.const 10))
      (call $write (call $get-stdout) (i32.const 32) (i32.const 5) (i32.const 64))`,
        66,
      ),
      8 * 1024 * 1024,
    );
    expect(result.code, result.stderr).toBe(0);
    const nuls = result.stdout.match(/\0+/)?.[0].length;
    expect(nuls).toBe(4 * 1024 * 1024);
    expect(result.stdout).toContain('\0done\n');
  });

  it('refuses get-random-bytes of more than the guest memory may hold, naming memory_bytes, before making them', async () => {
    const wat = hostCallWat(
      '(import "wasi:random/random@0.2.0" (instance $random (export "get-random-bytes" (func (param "len" u64) (result (list u8))))))\n  (alias export $random "get-random-bytes" (func $random-bytes))',
      '(core func $random-lowered (canon lower (func $random-bytes) (memory $m) (realloc $realloc)))',
      '(import "host" "random" (func $random (param i64 i32)))\n    (func (export "run") (call $random (i64.const 2000000000) (i32.const 16)))',
      '(export "random" (func $random-lowered))',
    );
    const result = await run('random-bytes', wat);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `wasi:random get-random-bytes asked for 2000000000 bytes, more than the guest's memory may hold (capabilities.limits.memory_bytes: ${LIMIT})`,
    );
  });
});
