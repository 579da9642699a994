import path from 'node:path';
import { componentFromWat } from '@murmur/guest-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capsuleProject } from './support/artifacts.js';
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

describe('the memory limit', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-memory-limit-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

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
  });

  it('reports an unreachable after growth that was granted as a trap, even with memory close to the ceiling', async () => {
    // 12 MiB of 16 taken, every grow granted, then a bug.
    const result = await run('granted', '(drop (memory.grow (i32.const 191))) unreachable');
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('capsule execution trapped');
    expect(result.stderr).not.toContain('resource limits');
  });
});
