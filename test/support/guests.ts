import { type BuiltGuest, componentFromJs, componentFromRust, componentFromWat, rustToolchain } from '@murmur/guest-kit';
import { probeCapsule, probeTool } from './probe-guests.js';

/**
 * The guest components the suites run, built from the sources below at test time into the
 * ignored guest cache (`.cache/guests`), keyed by source hash. Tiny ones are component WAT; the
 * JavaScript capsule is a real componentize-js build (about 12 MB), which is what a capsule
 * looks like in practice and what staging must handle quickly.
 */

/** The smallest script capsule: exports `murmur:capsule/run@0.1.0` with a `run` that returns. */
export const CAPSULE_WAT = `(component
  (core module $m (func (export "run")))
  (core instance $i (instantiate $m))
  (func $run (canon lift (core func $i "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;

/**
 * A hook that exports `murmur:hook/lifecycle@0.5.0` with one function only (`on-session-start`):
 * every other required export is missing, which the runtime must refuse at launch, naming it.
 */
export const HALF_HOOK_WAT = `(component
  (core module $m (func (export "start")))
  (core instance $i (instantiate $m))
  (func $start (canon lift (core func $i "start")))
  (instance $inst (export "on-session-start" (func $start)))
  (export "murmur:hook/lifecycle@0.5.0" (instance $inst)))`;

export function halfHookWat(): Promise<BuiltGuest> {
  return componentFromWat(HALF_HOOK_WAT);
}

/** Same shape, but exported under the legacy unversioned name, which the runtime must not resolve. */
export const UNVERSIONED_CAPSULE_WAT = CAPSULE_WAT.replace('"murmur:capsule/run@0.1.0"', '"murmur:capsule/run"');

/** A script capsule that imports `wasi:sockets`, which the runtime never offers. */
export const SOCKETS_CAPSULE_WAT = `(component
  (import "wasi:sockets/instance-network@0.2.0" (instance $net (export "instance-network" (func (result u32)))))
  (alias export $net "instance-network" (func $network))
  (core func $lowered (canon lower (func $network)))
  (core module $m
    (import "host" "network" (func $network (result i32)))
    (func (export "run") (drop (call $network))))
  (core instance $i (instantiate $m (with "host" (instance (export "network" (func $lowered))))))
  (func $run (canon lift (core func $i "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;

/**
 * Component WAT importing WASI's stdout and its stream's `blocking-write-and-flush` (as `$write`),
 * and with `zeroes` its `blocking-write-zeroes-and-flush` (as `$zeroes`); `$get-stdout` too.
 */
export function stdoutImportsWat({ zeroes = false }: { zeroes?: boolean } = {}): string {
  return `(import "wasi:io/error@0.2.0" (instance $io-error (export "error" (type (sub resource)))))
  (alias export $io-error "error" (type $error))
  (import "wasi:io/streams@0.2.0" (instance $streams
    (export "error" (type $e (eq $error)))
    (export "output-stream" (type $os (sub resource)))
    (type $stream-error (variant (case "last-operation-failed" (own $e)) (case "closed")))
    (export "stream-error" (type $se (eq $stream-error)))
    (export "[method]output-stream.blocking-write-and-flush" (func (param "self" (borrow $os)) (param "contents" (list u8)) (result (result (error $se)))))${
      zeroes
        ? `
    (export "[method]output-stream.blocking-write-zeroes-and-flush" (func (param "self" (borrow $os)) (param "len" u64) (result (result (error $se)))))`
        : ''
    }))
  (alias export $streams "output-stream" (type $output-stream))
  (alias export $streams "[method]output-stream.blocking-write-and-flush" (func $write))${
    zeroes
      ? `
  (alias export $streams "[method]output-stream.blocking-write-zeroes-and-flush" (func $zeroes))`
      : ''
  }
  (import "wasi:cli/stdout@0.2.0" (instance $stdout
    (export "output-stream" (type $os (eq $output-stream)))
    (export "get-stdout" (func (result (own $os))))))
  (alias export $stdout "get-stdout" (func $get-stdout))`;
}

/**
 * A core function `realloc` that bumps a heap from 4096 and never frees: what a canonical-ABI
 * lowering that returns a list or a string needs of a guest with no allocator.
 */
export const BUMP_REALLOC_WAT = `(global $heap (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (global.get $heap))
      (global.set $heap (i32.add (global.get $heap) (local.get 3)))
      (local.get $at))`;

/**
 * A script capsule whose core module's `run` is `body`: WAT that may call `$write` (a stream, a
 * pointer, a length, where the result goes) on `(call $get-stdout)`, with one page of memory.
 */
function stdoutCapsuleWat(body: string): string {
  return `(component
  ${stdoutImportsWat()}
  (core module $memory (memory (export "memory") 1))
  (core instance $memory-instance (instantiate $memory))
  (alias core export $memory-instance "memory" (core memory $mem))
  (core func $get-stdout-lowered (canon lower (func $get-stdout)))
  (core func $write-lowered (canon lower (func $write) (memory $mem)))
  (core module $main
    (import "env" "memory" (memory 1))
    (import "host" "get-stdout" (func $get-stdout (result i32)))
    (import "host" "write" (func $write (param i32 i32 i32 i32)))
    ${body})
  (core instance $main-instance (instantiate $main
    (with "env" (instance (export "memory" (memory $mem))))
    (with "host" (instance (export "get-stdout" (func $get-stdout-lowered)) (export "write" (func $write-lowered))))))
  (func $run (canon lift (core func $main-instance "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;
}

/**
 * A script capsule of a kilobyte that prints one line, `first output`, through WASI's stdout and
 * returns: the smallest capsule with something to show (what `bench:stack` times a launch by).
 */
export const PRINTING_CAPSULE_WAT = stdoutCapsuleWat(`(data (i32.const 16) "first output\\n")
    (func (export "run") (call $write (call $get-stdout) (i32.const 16) (i32.const 13) (i32.const 64)))`);

/**
 * A script capsule that writes 16 KiB of x to stdout, with no newline, again and again until it
 * is stopped: a guest that floods its host with output.
 */
const FLOODING_CAPSULE_WAT = stdoutCapsuleWat(`(func (export "run")
      (memory.fill (i32.const 1024) (i32.const 120) (i32.const 16384))
      (loop $again (call $write (call $get-stdout) (i32.const 1024) (i32.const 16384) (i32.const 64)) (br $again)))`);

/**
 * A script capsule that prints `status:  ok` with no newline and then traps: a guest forging the
 * runtime's last line, which the real one must not finish.
 */
const FORGING_STATUS_CAPSULE_WAT = stdoutCapsuleWat(`(data (i32.const 16) "status:  ok")
    (func (export "run") (call $write (call $get-stdout) (i32.const 16) (i32.const 11) (i32.const 64)) unreachable)`);

export function forgingStatusCapsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(FORGING_STATUS_CAPSULE_WAT);
}

export function printingCapsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(PRINTING_CAPSULE_WAT);
}

export function floodingCapsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(FLOODING_CAPSULE_WAT);
}

export function socketsCapsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(SOCKETS_CAPSULE_WAT);
}

/**
 * A tool exporting `murmur:tool/run@0.1.0`, whose `run` answers every input with an all-zero
 * result: status `passed`, no summary or data, not truncated, no metadata.
 */
export const TOOL_WAT = toolComponentWat(`(core module $m
    (memory (export "memory") 1)
    ${BUMP_REALLOC_WAT}
    (func (export "run") (param i32 i32 i32 i32 i32 i32) (result i32)
      (i32.const 1024)))`);

/**
 * A component exporting `murmur:tool/run@0.1.0` (a tool, or a driver) around `coreModule`, which
 * must export `memory`, `realloc` and `run` — the canonical ABI's flattening of
 * `run: func(input: tool-input) -> tool-result`: six i32 parameters (two option<string>s) and a
 * pointer to the 52-byte result record (status at 0; summary, data and data-path as
 * option<string> at 4, 16, 28; truncated at 40; metadata's list at 44).
 */
export function toolComponentWat(coreModule: string): string {
  return `(component
  ${coreModule}
  (core instance $i (instantiate $m))
  (type $status (enum "passed" "failed" "error"))
  (type $tool-input (record (field "data" (option string)) (field "log-path" (option string))))
  (type $tool-result (record (field "status" $status) (field "summary" (option string)) (field "data" (option string)) (field "data-path" (option string)) (field "truncated" bool) (field "metadata" (list (tuple string string)))))
  (type $run-type (func (param "input" $tool-input) (result $tool-result)))
  (func $run (type $run-type) (canon lift (core func $i "run") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
  (instance $inst
    (export "status" (type $status))
    (export "tool-input" (type $tool-input))
    (export "tool-result" (type $tool-result))
    (export "run" (func $run)))
  (export "murmur:tool/run@0.1.0" (instance $inst)))`;
}

/** A script capsule in JavaScript that prints a greeting from its allowlisted environment. */
export const HELLO_CAPSULE_JS = {
  source: `import { getEnvironment } from 'wasi:cli/environment@0.2.12';

export const run = {
  run() {
    const env = Object.fromEntries(getEnvironment());
    console.log(\`hello from \${env.MURMUR_CAPSULE_NAME ?? 'a capsule'}: \${env.GREETING ?? 'no greeting'}\`);
  },
};
`,
  world: `package test:hello;

world capsule {
  import wasi:cli/environment@0.2.12;
  export murmur:capsule/run@0.1.0;
}
`,
  worldName: 'capsule',
};

/**
 * A script capsule built the way upstream's are: Rust's standard library on WASI (preview 1,
 * adapted). It greets from its environment, writes the names of the variables it was given to
 * `out/environment.txt`, and says whether a write beside its workdir was refused.
 */
export const RUST_CAPSULE = {
  source: `use std::io::Write;

#[export_name = "murmur:capsule/run@0.1.0#run"]
pub extern "C" fn run() {
    let mut names: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
    names.sort();
    let capsule = std::env::var("MURMUR_CAPSULE_NAME").unwrap_or_else(|_| "a capsule".into());
    let greeting = std::env::var("GREETING").unwrap_or_else(|_| "no greeting".into());
    println!("hello from {} (rust): {}", capsule, greeting);
    std::fs::create_dir_all("out").expect("out/");
    let mut listing = std::fs::File::create("out/environment.txt").expect("out/environment.txt");
    for name in &names {
        writeln!(listing, "{}", name).expect("a line of out/environment.txt");
    }
    let outside = std::fs::write("../outside.txt", b"escaped");
    println!("a write beside the workdir: {}", if outside.is_ok() { "allowed" } else { "refused" });
}
`,
  world: `package test:rust;

world capsule {
  export murmur:capsule/run@0.1.0;
}
`,
  worldName: 'capsule',
};

/** The Rust capsule, or why it cannot be built on this machine (no rustc with a WASI target). */
export async function rustCapsule(): Promise<BuiltGuest | { missing: string }> {
  const toolchain = rustToolchain();
  return 'missing' in toolchain ? { missing: toolchain.missing } : componentFromRust(RUST_CAPSULE);
}

export function capsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(CAPSULE_WAT);
}

export function unversionedCapsuleWat(): Promise<BuiltGuest> {
  return componentFromWat(UNVERSIONED_CAPSULE_WAT);
}

export function toolWat(): Promise<BuiltGuest> {
  return componentFromWat(TOOL_WAT);
}

export function helloCapsuleJs(): Promise<BuiltGuest> {
  return componentFromJs(HELLO_CAPSULE_JS);
}

/** Builds every guest once, before the suites run in parallel and would each build it. */
export async function buildAllGuests(): Promise<void> {
  await capsuleWat();
  await unversionedCapsuleWat();
  await toolWat();
  await socketsCapsuleWat();
  await printingCapsuleWat();
  await floodingCapsuleWat();
  await helloCapsuleJs();
  await probeCapsule();
  await probeTool();
  await rustCapsule();
}
