import { type BuiltGuest, componentFromWat } from '@murmur/guest-kit';
import { toolComponentWat } from '../test/support/guests.js';

/**
 * An inference driver that echoes: it answers every turn with `end_turn` and, as its text, the
 * first `"text":"…"` string of the request — the user's message, since the wire puts `messages`
 * first and a fresh task has one. It makes no HTTP call, so an agent capsule using it measures the
 * runtime (door, bus, capsule host, task loop, driver call), not a model. Written as component
 * WAT so an instance costs almost nothing to start.
 *
 * The echoed span is copied byte for byte, escapes included, so the reply stays valid JSON.
 */

const PREFIX = '{"stop_reason":"end_turn","content":[{"type":"text","text":"';
const SUFFIX = '"}]}';
/** `"text":"` as one little-endian 64-bit word: the needle compared at every offset. */
const NEEDLE = '0x223a227478657422';

function watString(text: string): string {
  return text.replaceAll('\\', '\\\\').replaceAll('"', '\\"');
}

export const ECHO_DRIVER_WAT = toolComponentWat(`(core module $m
    (memory (export "memory") 2)
    (global $heap (mut i32) (i32.const 8192))
    (data (i32.const 1024) "${watString(PREFIX)}")
    (data (i32.const 1152) "${watString(SUFFIX)}")
    (func $alloc (param $size i32) (result i32)
      (local $at i32)
      (local.set $at (global.get $heap))
      (global.set $heap (i32.and (i32.add (i32.add (local.get $at) (local.get $size)) (i32.const 7)) (i32.const -8)))
      (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
        (then (drop (memory.grow (i32.add (i32.div_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 65536)) (i32.const 1))))))
      (local.get $at))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (call $alloc (local.get 3)))
    (func (export "run") (param $has i32) (param $ptr i32) (param $len i32) (param i32 i32 i32) (result i32)
      (local $at i32) (local $end i32) (local $start i32) (local $escaped i32) (local $byte i32) (local $text i32) (local $out i32) (local $result i32)
      (local.set $end (i32.add (local.get $ptr) (local.get $len)))
      (local.set $start (local.get $end))
      (if (i32.and (local.get $has) (i32.ge_u (local.get $len) (i32.const 8)))
        (then
          (local.set $at (local.get $ptr))
          (block $found
            (loop $search
              (br_if $found (i32.gt_u (i32.add (local.get $at) (i32.const 8)) (local.get $end)))
              (if (i64.eq (i64.load (local.get $at)) (i64.const ${NEEDLE}))
                (then (local.set $start (i32.add (local.get $at) (i32.const 8))) (br $found)))
              (local.set $at (i32.add (local.get $at) (i32.const 1)))
              (br $search)))))
      (local.set $at (local.get $start))
      (block $closed
        (loop $scan
          (br_if $closed (i32.ge_u (local.get $at) (local.get $end)))
          (local.set $byte (i32.load8_u (local.get $at)))
          (if (local.get $escaped)
            (then (local.set $escaped (i32.const 0)))
            (else
              (if (i32.eq (local.get $byte) (i32.const 92)) (then (local.set $escaped (i32.const 1))))
              (br_if $closed (i32.eq (local.get $byte) (i32.const 34)))))
          (local.set $at (i32.add (local.get $at) (i32.const 1)))
          (br $scan)))
      (local.set $text (i32.sub (local.get $at) (local.get $start)))
      (local.set $out (call $alloc (i32.add (local.get $text) (i32.const ${PREFIX.length + SUFFIX.length}))))
      (memory.copy (local.get $out) (i32.const 1024) (i32.const ${PREFIX.length}))
      (memory.copy (i32.add (local.get $out) (i32.const ${PREFIX.length})) (local.get $start) (local.get $text))
      (memory.copy (i32.add (i32.add (local.get $out) (i32.const ${PREFIX.length})) (local.get $text)) (i32.const 1152) (i32.const ${SUFFIX.length}))
      ;; tool-result: status passed (0), summary none, data some(out), data-path none, not truncated, no metadata
      (local.set $result (call $alloc (i32.const 52)))
      (i32.store8 (i32.add (local.get $result) (i32.const 16)) (i32.const 1))
      (i32.store (i32.add (local.get $result) (i32.const 20)) (local.get $out))
      (i32.store (i32.add (local.get $result) (i32.const 24)) (i32.add (local.get $text) (i32.const ${PREFIX.length + SUFFIX.length})))
      (local.get $result)))`);

export function echoDriver(): Promise<BuiltGuest> {
  return componentFromWat(ECHO_DRIVER_WAT);
}

/**
 * The echo agent's manifest: the echo driver (published as `echo-driver@1.0.0`), queue and sleep,
 * and `hooks` (each a `runtime: hook` artifact at 1.0.0) among its artifacts.
 */
export function echoManifest(options: { hooks?: string[]; queueDepth?: number } = {}): string {
  return [
    'name: echo',
    'version: 1.0.0',
    'description: answers every message with its text',
    'artifacts:',
    '  - name: echo-driver',
    '    version: 1.0.0',
    '    runtime: driver',
    ...(options.hooks ?? []).flatMap((hook) => [`  - name: ${hook}`, '    version: 1.0.0', '    runtime: hook']),
    'lifecycle:',
    '  task_acceptance: queue',
    '  after_task: sleep',
    ...(options.queueDepth === undefined ? [] : [`  queue_depth: ${options.queueDepth}`]),
    'inference:',
    '  endpoint: http://127.0.0.1:9',
    '  model: echo',
    '  driver:',
    '    artifact: echo-driver',
    '',
  ].join('\n');
}
