import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ADDRESS_FAMILY,
  ARGUMENT_SYSCALLS,
  FALLOC_FL,
  type BpfInstruction,
  CLONE_NAMESPACE_FLAGS,
  DENIED_SYSCALLS,
  UNAVAILABLE_SYSCALLS,
  ERRNO,
  SECCOMP_RET,
  type SeccompArch,
  seccompFilterBytes,
  seccompProgram,
} from '../src/seccomp.js';

/*
 * The filter is run here by a small classic-BPF interpreter that is as strict as the kernel's
 * checker (`bpf_check_classic` + `seccomp_check_filter`) for the opcodes it knows, and refuses
 * every other opcode. The program it runs is the one decoded from `seccompFilterBytes` — the
 * bytes `murmur-confine` hands the kernel — after checking it matches `seccompProgram`.
 *
 * The expected values below are written as the kernel's literal numbers (from <linux/seccomp.h>,
 * <linux/audit.h>, <asm-generic/errno-base.h>, <linux/socket.h>, <linux/sched.h>), not taken from
 * the module, so a wrong constant in the module shows up as a failure.
 */

// ---------------------------------------------------------------------------------------------
// Kernel constants, written out.

const RET_ALLOW = 0x7fff0000;
const RET_KILL_PROCESS = 0x80000000;
const RET_EPERM = 0x00050001;
const RET_EACCES = 0x0005000d;
const RET_ENOSYS = 0x00050026;
const RET_EOPNOTSUPP = 0x0005005f;

const AUDIT_ARCH_X86_64 = 0xc000003e;
const AUDIT_ARCH_AARCH64 = 0xc00000b7;
const AUDIT_ARCH_I386 = 0x40000003;
const AUDIT_ARCH_ARM = 0x40000028;
const AUDIT_ARCH: Record<SeccompArch, number> = { x64: AUDIT_ARCH_X86_64, arm64: AUDIT_ARCH_AARCH64 };
const ARCHES: readonly SeccompArch[] = ['x64', 'arm64'];
const ARCH_NAME: Record<SeccompArch, string> = { x64: 'x86_64', arm64: 'aarch64' };

const X32_SYSCALL_BIT = 0x40000000;

const AF_UNIX = 1;
const AF_INET = 2;
const AF_INET6 = 10;
const AF_NETLINK = 16;
const AF_PACKET = 17;
const AF_BLUETOOTH = 31;
const AF_ALG = 38;
const AF_VSOCK = 40;

const CLONE_NEW_FLAGS: ReadonlyArray<readonly [string, number]> = [
  ['CLONE_NEWTIME', 0x00000080],
  ['CLONE_NEWNS', 0x00020000],
  ['CLONE_NEWCGROUP', 0x02000000],
  ['CLONE_NEWUTS', 0x04000000],
  ['CLONE_NEWIPC', 0x08000000],
  ['CLONE_NEWUSER', 0x10000000],
  ['CLONE_NEWPID', 0x20000000],
  ['CLONE_NEWNET', 0x40000000],
];
/** What glibc's `pthread_create` passes: VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID. */
const GLIBC_THREAD_FLAGS = 0x003d0f00;
const SIGCHLD = 17;

// ---------------------------------------------------------------------------------------------
// A strict classic-BPF interpreter for seccomp programs.

const BPF_MAXINSNS = 4096;
/** sizeof(struct seccomp_data): int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]. */
const SECCOMP_DATA_SIZE = 64;

// Opcodes (<linux/bpf_common.h>): class | size | mode, class | op | source.
const OP = {
  LD_W_ABS: 0x00 | 0x00 | 0x20,
  ALU_AND_K: 0x04 | 0x50 | 0x00,
  JMP_JA: 0x05 | 0x00,
  JMP_JEQ_K: 0x05 | 0x10 | 0x00,
  JMP_JGT_K: 0x05 | 0x20 | 0x00,
  JMP_JGE_K: 0x05 | 0x30 | 0x00,
  JMP_JSET_K: 0x05 | 0x40 | 0x00,
  RET_K: 0x06 | 0x00,
} as const;
const CONDITIONAL_JUMPS: ReadonlySet<number> = new Set([OP.JMP_JEQ_K, OP.JMP_JGT_K, OP.JMP_JGE_K, OP.JMP_JSET_K]);
const KNOWN_OPCODES: ReadonlySet<number> = new Set(Object.values(OP));

class BpfError extends Error {}

interface SeccompData {
  nr: number;
  arch: number;
  instructionPointer?: bigint;
  /** Up to six 64-bit arguments; missing ones are 0. */
  args?: readonly bigint[];
}

/** `struct seccomp_data` as the kernel lays it out on a little-endian machine. */
function encodeSeccompData(data: SeccompData): Buffer {
  const bytes = Buffer.alloc(SECCOMP_DATA_SIZE);
  bytes.writeUInt32LE(data.nr >>> 0, 0);
  bytes.writeUInt32LE(data.arch >>> 0, 4);
  bytes.writeBigUInt64LE(data.instructionPointer ?? 0n, 8);
  const args = data.args ?? [];
  if (args.length > 6) throw new Error('seccomp_data has six arguments');
  for (const [index, arg] of args.entries()) bytes.writeBigUInt64LE(BigInt.asUintN(64, arg), 16 + 8 * index);
  return bytes;
}

function jumpTarget(program: readonly BpfInstruction[], pc: number, offset: number): number {
  const target = pc + 1 + offset;
  if (target >= program.length) throw new BpfError(`instruction ${pc} jumps to ${target}, past the end (${program.length})`);
  return target;
}

/** Runs `program` on `data` and returns the filter's 32-bit return value. */
function runFilter(program: readonly BpfInstruction[], data: SeccompData): number {
  const packet = encodeSeccompData(data);
  let accumulator = 0;
  let pc = 0;
  for (;;) {
    const instruction = program[pc];
    if (instruction === undefined) throw new BpfError(`ran off the end of the program at ${pc} without a return`);
    const { code, jt, jf, k } = instruction;
    switch (code) {
      case OP.LD_W_ABS:
        if (k % 4 !== 0 || k + 4 > SECCOMP_DATA_SIZE) throw new BpfError(`instruction ${pc} loads at offset ${k}, outside or misaligned in seccomp_data`);
        accumulator = packet.readUInt32LE(k);
        pc += 1;
        break;
      case OP.ALU_AND_K:
        accumulator = (accumulator & k) >>> 0;
        pc += 1;
        break;
      case OP.JMP_JA:
        pc = jumpTarget(program, pc, k);
        break;
      case OP.JMP_JEQ_K:
        pc = jumpTarget(program, pc, accumulator === k ? jt : jf);
        break;
      case OP.JMP_JGT_K:
        pc = jumpTarget(program, pc, accumulator > k ? jt : jf);
        break;
      case OP.JMP_JGE_K:
        pc = jumpTarget(program, pc, accumulator >= k ? jt : jf);
        break;
      case OP.JMP_JSET_K:
        pc = jumpTarget(program, pc, (accumulator & k) !== 0 ? jt : jf);
        break;
      case OP.RET_K:
        return k >>> 0;
      default:
        throw new BpfError(`instruction ${pc} has opcode 0x${code.toString(16)}, which this interpreter (and the filter) does not use`);
    }
  }
}

/**
 * The static checks the kernel makes before it accepts a filter, for the opcodes above: a length
 * of 1–4096, fields in range, known opcodes, loads aligned inside seccomp_data, both branches of
 * every jump inside the program, and a return as the last instruction. Because classic BPF only
 * jumps forwards, these together mean every path ends in a return.
 */
function verifyProgram(program: readonly BpfInstruction[]): void {
  if (program.length < 1 || program.length > BPF_MAXINSNS) throw new BpfError(`program has ${program.length} instructions`);
  program.forEach(({ code, jt, jf, k }, pc) => {
    const where = `instruction ${pc}`;
    if (!Number.isInteger(code) || code < 0 || code > 0xffff) throw new BpfError(`${where}: code ${code} is not a u16`);
    if (!Number.isInteger(jt) || jt < 0 || jt > 0xff || !Number.isInteger(jf) || jf < 0 || jf > 0xff)
      throw new BpfError(`${where}: jt/jf ${jt}/${jf} are not u8`);
    if (!Number.isInteger(k) || k < 0 || k > 0xffffffff) throw new BpfError(`${where}: k ${k} is not a u32`);
    if (!KNOWN_OPCODES.has(code)) throw new BpfError(`${where}: opcode 0x${code.toString(16)} is not allowed`);
    if (code === OP.LD_W_ABS && (k % 4 !== 0 || k + 4 > SECCOMP_DATA_SIZE)) throw new BpfError(`${where}: load at ${k}`);
    if (code === OP.JMP_JA) jumpTarget(program, pc, k);
    if (CONDITIONAL_JUMPS.has(code)) {
      jumpTarget(program, pc, jt);
      jumpTarget(program, pc, jf);
    } else if (jt !== 0 || jf !== 0) {
      throw new BpfError(`${where}: jt/jf set on an instruction that does not branch`);
    }
  });
  const last = program[program.length - 1];
  if (last?.code !== OP.RET_K) throw new BpfError('the last instruction is not a return');
}

/** The instructions reachable from the entry, following both branches of every jump. */
function reachableInstructions(program: readonly BpfInstruction[]): Set<number> {
  const seen = new Set<number>();
  const pending = [0];
  while (pending.length > 0) {
    const pc = pending.pop() as number;
    if (seen.has(pc)) continue;
    seen.add(pc);
    const instruction = program[pc];
    if (instruction === undefined) throw new BpfError(`path reaches ${pc}, outside the program`);
    if (instruction.code === OP.RET_K) continue;
    if (instruction.code === OP.JMP_JA) pending.push(pc + 1 + instruction.k);
    else if (CONDITIONAL_JUMPS.has(instruction.code)) pending.push(pc + 1 + instruction.jt, pc + 1 + instruction.jf);
    else pending.push(pc + 1);
  }
  return seen;
}

/** `struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }`, little-endian. */
function decodeSockFilter(bytes: Buffer): BpfInstruction[] {
  if (bytes.length % 8 !== 0) throw new BpfError(`filter is ${bytes.length} bytes, not a whole number of sock_filter records`);
  const program: BpfInstruction[] = [];
  for (let offset = 0; offset < bytes.length; offset += 8) {
    program.push({ code: bytes.readUInt16LE(offset), jt: bytes.readUInt8(offset + 2), jf: bytes.readUInt8(offset + 3), k: bytes.readUInt32LE(offset + 4) });
  }
  return program;
}

// ---------------------------------------------------------------------------------------------
// The programs under test, as the kernel would receive them.

const kernelPrograms = new Map<string, BpfInstruction[]>();
/** The filter decoded from its bytes (checked against `seccompProgram` in its own test). */
function kernelProgram(arch: SeccompArch, unixSockets: boolean): BpfInstruction[] {
  const key = `${arch}/${unixSockets}`;
  let program = kernelPrograms.get(key);
  if (program === undefined) {
    program = decodeSockFilter(seccompFilterBytes({ arch, unixSockets }));
    kernelPrograms.set(key, program);
  }
  return program;
}

function syscall(arch: SeccompArch, nr: number, args: readonly bigint[] = [], options: { unixSockets?: boolean; auditArch?: number } = {}): number {
  return runFilter(kernelProgram(arch, options.unixSockets ?? false), { nr, arch: options.auditArch ?? AUDIT_ARCH[arch], args });
}

function argumentNumber(arch: SeccompArch, name: keyof typeof ARGUMENT_SYSCALLS): number {
  const nr = ARGUMENT_SYSCALLS[name][arch];
  if (nr === undefined) throw new Error(`${name} has no number on ${arch}`);
  return nr;
}

function hex(value: number): string {
  return `0x${(value >>> 0).toString(16).padStart(8, '0')}`;
}

/** Names and numbers of DENIED_SYSCALLS that exist on `arch`. */
function deniedOn(arch: SeccompArch): Array<[string, number]> {
  return Object.entries(DENIED_SYSCALLS).flatMap(([name, numbers]): Array<[string, number]> => (numbers[arch] === undefined ? [] : [[name, numbers[arch]]]));
}

/** Ordinary syscalls a capsule needs, with their numbers from the kernel headers (checked below). */
const ALLOWED_SYSCALLS: Record<SeccompArch, ReadonlyArray<readonly [string, number]>> = {
  x64: [
    ['read', 0],
    ['write', 1],
    ['close', 3],
    ['mmap', 9],
    ['connect', 42],
    ['sendto', 44],
    ['bind', 49],
    ['fork', 57],
    ['vfork', 58],
    ['execve', 59],
    ['wait4', 61],
    ['prctl', 157],
    ['futex', 202],
    ['exit_group', 231],
    ['openat', 257],
    ['getrandom', 318],
    ['landlock_create_ruleset', 444],
    ['landlock_add_rule', 445],
    ['landlock_restrict_self', 446],
  ],
  arm64: [
    ['openat', 56],
    ['close', 57],
    ['read', 63],
    ['write', 64],
    ['exit_group', 94],
    ['futex', 98],
    ['prctl', 167],
    ['bind', 200],
    ['connect', 203],
    ['sendto', 206],
    ['execve', 221],
    ['mmap', 222],
    ['wait4', 260],
    ['getrandom', 278],
    ['landlock_create_ruleset', 444],
    ['landlock_add_rule', 445],
    ['landlock_restrict_self', 446],
  ],
};

/**
 * The policy the module's comment describes, written independently of the BPF: what every
 * syscall should get. Used to compare against the interpreter over a wide sweep of inputs.
 */
const deniedNumbers: Record<SeccompArch, ReadonlySet<number>> = {
  x64: new Set(deniedOn('x64').map(([, nr]) => nr)),
  arm64: new Set(deniedOn('arm64').map(([, nr]) => nr)),
};
const unavailableNumbers: Record<SeccompArch, ReadonlySet<number>> = {
  x64: new Set(Object.values(UNAVAILABLE_SYSCALLS).flatMap((numbers) => numbers.x64 ?? [])),
  arm64: new Set(Object.values(UNAVAILABLE_SYSCALLS).flatMap((numbers) => numbers.arm64 ?? [])),
};
function expectedVerdict(arch: SeccompArch, unixSockets: boolean, data: SeccompData): number {
  if (data.arch >>> 0 !== AUDIT_ARCH[arch]) return RET_KILL_PROCESS;
  const nr = data.nr >>> 0;
  if (arch === 'x64' && nr >= X32_SYSCALL_BIT) return RET_KILL_PROCESS;
  if (deniedNumbers[arch].has(nr)) return RET_EPERM;
  if (unavailableNumbers[arch].has(nr)) return RET_ENOSYS;
  const arg0Low = Number(BigInt.asUintN(32, data.args?.[0] ?? 0n));
  if (nr === argumentNumber(arch, 'socket')) {
    if (arg0Low === AF_INET || arg0Low === AF_INET6) return RET_ALLOW;
    if (arg0Low === AF_UNIX) return unixSockets ? RET_ALLOW : RET_EACCES;
    if (arg0Low === AF_NETLINK || arg0Low === AF_PACKET) return RET_EACCES;
    return RET_EPERM;
  }
  if (nr === argumentNumber(arch, 'socketpair')) return arg0Low === AF_UNIX ? RET_ALLOW : RET_EPERM;
  if (nr === argumentNumber(arch, 'clone')) return CLONE_NEW_FLAGS.some(([, bit]) => (arg0Low & bit) !== 0) ? RET_EPERM : RET_ALLOW;
  if (nr === argumentNumber(arch, 'clone3')) return RET_ENOSYS;
  if (nr === argumentNumber(arch, 'fallocate')) {
    const mode = Number(BigInt.asUintN(32, data.args?.[1] ?? 0n));
    const keepSize = (mode & 0x01) !== 0;
    const punchHole = (mode & 0x02) !== 0;
    return keepSize && !punchHole ? RET_EOPNOTSUPP : RET_ALLOW;
  }
  return RET_ALLOW;
}

// ---------------------------------------------------------------------------------------------
// The interpreter itself.

describe('the test BPF interpreter', () => {
  const ret = (k: number): BpfInstruction => ({ code: OP.RET_K, jt: 0, jf: 0, k });
  const load = (k: number): BpfInstruction => ({ code: OP.LD_W_ABS, jt: 0, jf: 0, k });

  it('loads nr, arch and both words of an argument little-endian', () => {
    const data: SeccompData = { nr: 7, arch: AUDIT_ARCH_X86_64, args: [0x11111111_22222222n, 0n, 0n, 0n, 0n, 0xaaaaaaaa_bbbbbbbbn] };
    expect(runFilter([load(0), { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: 7 }, ret(1), ret(2)], data)).toBe(1);
    expect(runFilter([load(4), { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: AUDIT_ARCH_X86_64 }, ret(1), ret(2)], data)).toBe(1);
    expect(runFilter([load(16), { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: 0x22222222 }, ret(1), ret(2)], data)).toBe(1);
    expect(runFilter([load(20), { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: 0x11111111 }, ret(1), ret(2)], data)).toBe(1);
    expect(runFilter([load(60), { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: 0xaaaaaaaa }, ret(1), ret(2)], data)).toBe(1);
  });

  it('takes JGT, JGE, JSET and JA the way the kernel does, and masks with AND', () => {
    const data: SeccompData = { nr: 10, arch: 0 };
    const branch = (code: number, k: number): number => runFilter([load(0), { code, jt: 0, jf: 1, k }, ret(1), ret(0)], data);
    expect([branch(OP.JMP_JGT_K, 9), branch(OP.JMP_JGT_K, 10)]).toEqual([1, 0]);
    expect([branch(OP.JMP_JGE_K, 10), branch(OP.JMP_JGE_K, 11)]).toEqual([1, 0]);
    expect([branch(OP.JMP_JSET_K, 0b0010), branch(OP.JMP_JSET_K, 0b0101)]).toEqual([1, 0]);
    expect(runFilter([{ code: OP.JMP_JA, jt: 0, jf: 0, k: 1 }, ret(1), ret(2)], data)).toBe(2);
    expect(runFilter([load(0), { code: OP.ALU_AND_K, jt: 0, jf: 0, k: 0b0110 }, { code: OP.JMP_JEQ_K, jt: 0, jf: 1, k: 0b0010 }, ret(1), ret(0)], data)).toBe(
      1,
    );
    // Comparisons are unsigned.
    expect(runFilter([load(0), { code: OP.JMP_JGE_K, jt: 0, jf: 1, k: 0x40000000 }, ret(1), ret(0)], { nr: 0xffffffff, arch: 0 })).toBe(1);
  });

  it('refuses what the kernel refuses: other opcodes, bad loads, jumps past the end, falling off the end', () => {
    const data: SeccompData = { nr: 0, arch: 0 };
    expect(() => runFilter([{ code: 0x16 /* RET|A */, jt: 0, jf: 0, k: 0 }], data)).toThrow(BpfError);
    expect(() => runFilter([{ code: 0x1d /* JEQ|X */, jt: 0, jf: 0, k: 0 }, ret(0)], data)).toThrow(BpfError);
    expect(() => runFilter([load(64), ret(0)], data)).toThrow(BpfError);
    expect(() => runFilter([load(2), ret(0)], data)).toThrow(BpfError);
    expect(() => runFilter([{ code: OP.JMP_JA, jt: 0, jf: 0, k: 1 }, ret(0)], data)).toThrow(BpfError);
    expect(() => runFilter([{ code: OP.JMP_JEQ_K, jt: 0, jf: 5, k: 1 }, ret(0)], data)).toThrow(BpfError);
    expect(() => runFilter([load(0)], data)).toThrow(BpfError);
    expect(() => verifyProgram([load(0)])).toThrow(BpfError);
    expect(() => verifyProgram([{ code: OP.JMP_JEQ_K, jt: 0, jf: 5, k: 0 }, ret(0)])).toThrow(BpfError);
    expect(() => verifyProgram(Array.from({ length: BPF_MAXINSNS + 1 }, () => ret(0)))).toThrow(BpfError);
    expect(() => verifyProgram([])).toThrow(BpfError);
  });
});

/**
 * Every syscall the filter must refuse, by name: the module comment's list (io_uring, userfaultfd,
 * bpf, perf_event_open, open_by_handle_at, the keyring, ptrace and process_vm_*, the mount family
 * old and new, chroot, unshare, setns, module and kexec loading, swap, reboot, clock setting, NUMA
 * policy, fanotify, seccomp, personality, kcmp) plus the legacy and host-administration calls the
 * table adds. Written out so that dropping an entry from DENIED_SYSCALLS fails a test.
 */
const MUST_DENY = [
  ...['io_uring_setup', 'io_uring_enter', 'io_uring_register', 'userfaultfd', 'bpf', 'perf_event_open', 'open_by_handle_at'],
  ...['keyctl', 'add_key', 'request_key', 'ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp'],
  ...['mount', 'umount2', 'pivot_root', 'chroot', 'open_tree', 'move_mount', 'fsopen', 'fsconfig', 'fsmount', 'fspick', 'mount_setattr'],
  ...['unshare', 'setns', 'init_module', 'finit_module', 'delete_module', 'create_module', 'get_kernel_syms', 'query_module', 'kexec_load', 'kexec_file_load'],
  ...[
    'swapon',
    'swapoff',
    'reboot',
    'acct',
    'quotactl',
    'quotactl_fd',
    'nfsservctl',
    'iopl',
    'ioperm',
    '_sysctl',
    'sysfs',
    'uselib',
    'lookup_dcookie',
    'syslog',
    'vhangup',
  ],
  ...[
    'clock_adjtime',
    'clock_settime',
    'settimeofday',
    'adjtimex',
    'set_mempolicy',
    'get_mempolicy',
    'mbind',
    'migrate_pages',
    'move_pages',
    'set_mempolicy_home_node',
  ],
  ...['fanotify_init', 'fanotify_mark', 'seccomp', 'personality'],
] as const;

// ---------------------------------------------------------------------------------------------
// The program's shape.

describe('the seccomp program', () => {
  it("uses the kernel's values for return actions, errnos, address families, namespace flags and fallocate's modes", () => {
    expect(SECCOMP_RET).toEqual({ KILL_PROCESS: RET_KILL_PROCESS, ERRNO: 0x00050000, ALLOW: RET_ALLOW });
    expect(ERRNO).toEqual({ EPERM: 1, EACCES: 13, ENOSYS: 38, EOPNOTSUPP: 95 });
    expect(FALLOC_FL).toEqual({ KEEP_SIZE: 0x01, PUNCH_HOLE: 0x02 });
    expect(ADDRESS_FAMILY).toEqual({ AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET });
    expect(CLONE_NAMESPACE_FLAGS).toBe(CLONE_NEW_FLAGS.reduce((all, [, bit]) => all | bit, 0));
  });

  it('keeps every syscall that must stay denied in DENIED_SYSCALLS, each with a number on some architecture', () => {
    expect(MUST_DENY.filter((name) => DENIED_SYSCALLS[name] === undefined)).toEqual([]);
    expect(MUST_DENY.filter((name) => DENIED_SYSCALLS[name]?.x64 === undefined && DENIED_SYSCALLS[name]?.arm64 === undefined)).toEqual([]);
  });

  describe.each(ARCHES.flatMap((arch) => [false, true].map((unixSockets): [SeccompArch, boolean] => [arch, unixSockets])))(
    'for %s with unixSockets %s',
    (arch, unixSockets) => {
      it('decodes from its sock_filter bytes to exactly the instructions seccompProgram returns', () => {
        const bytes = seccompFilterBytes({ arch, unixSockets });
        expect(bytes.length).toBe(seccompProgram({ arch, unixSockets }).length * 8);
        expect(decodeSockFilter(bytes)).toEqual(seccompProgram({ arch, unixSockets }));
      });

      it("passes the kernel's static checks: at most 4096 instructions, known opcodes, in-bounds loads and jumps, a return last", () => {
        const program = kernelProgram(arch, unixSockets);
        expect(program.length).toBeLessThanOrEqual(BPF_MAXINSNS);
        expect(() => verifyProgram(program)).not.toThrow();
        expect(program[program.length - 1]?.code).toBe(OP.RET_K);
      });

      it('has no unreachable instructions', () => {
        const program = kernelProgram(arch, unixSockets);
        const reachable = reachableInstructions(program);
        expect(program.map((_, pc) => pc).filter((pc) => !reachable.has(pc))).toEqual([]);
      });

      it('checks the architecture before anything else', () => {
        const [first, second] = kernelProgram(arch, unixSockets);
        expect(first).toEqual({ code: OP.LD_W_ABS, jt: 0, jf: 0, k: 4 });
        expect(second?.code).toBe(OP.JMP_JEQ_K);
        expect(second?.k).toBe(AUDIT_ARCH[arch]);
      });

      it('reads only nr, arch and the low words of args[0] and args[1] from seccomp_data', () => {
        const offsets = new Set(
          kernelProgram(arch, unixSockets)
            .filter((instruction) => instruction.code === OP.LD_W_ABS)
            .map((instruction) => instruction.k),
        );
        expect([...offsets].sort((a, b) => a - b)).toEqual([0, 4, 16, 24]);
      });

      it('ends every path in a return and gives the documented verdict across a wide sweep of syscalls, arguments and architectures', () => {
        const program = kernelProgram(arch, unixSockets);
        const numbers = [
          ...Array.from({ length: 600 }, (_, nr) => nr),
          0x3fffffff,
          0x40000000,
          0x40000001,
          0x40000000 | argumentNumber(arch, 'socket'),
          0x7fffffff,
          0x80000000,
          0xffffffff,
        ];
        const archFields = [AUDIT_ARCH[arch], AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_ARM, 0, 0xffffffff].filter(
          (value, index, all) => all.indexOf(value) === index,
        );
        const firstArgs = [
          0n,
          1n,
          2n,
          10n,
          16n,
          17n,
          38n,
          0xffffffffn,
          BigInt(SIGCHLD),
          BigInt(GLIBC_THREAD_FLAGS),
          0x80n,
          0x40000000n,
          0x1_00000000n | 17n,
          0xffffffff_00000000n | 2n,
          0xffffffff_ffffffffn,
        ];
        // fallocate's modes: none, keep size, punch a hole (with and without keep size), zero a range with keep size, in a high word too.
        const secondArgs = [0n, 1n, 2n, 3n, 0x11n, 0x1_00000000n | 1n, 0xffffffff_ffffffffn];
        const mismatches: string[] = [];
        let runs = 0;
        for (const nr of numbers) {
          for (const archField of archFields) {
            for (const arg0 of firstArgs) {
              for (const arg1 of secondArgs) {
                const data: SeccompData = { nr, arch: archField, args: [arg0, arg1, 0n, 0n, 0n, 0n], instructionPointer: 0x7f00_0000_1234n };
                const got = runFilter(program, data); // throws if a path falls off the end or leaves the program
                const want = expectedVerdict(arch, unixSockets, data);
                runs += 1;
                if (got !== want)
                  mismatches.push(
                    `nr ${hex(nr)} arch ${hex(archField)} arg0 0x${arg0.toString(16)} arg1 0x${arg1.toString(16)}: got ${hex(got)}, want ${hex(want)}`,
                  );
              }
            }
          }
        }
        expect(runs).toBe(numbers.length * archFields.length * firstArgs.length * secondArgs.length);
        expect(mismatches.slice(0, 20)).toEqual([]);
      });
    },
  );
});

// ---------------------------------------------------------------------------------------------
// Behaviour, per architecture.

describe.each(ARCHES)('on %s', (arch) => {
  const archName = ARCH_NAME[arch];
  const socketNr = argumentNumber(arch, 'socket');
  const cloneNr = argumentNumber(arch, 'clone');
  const clone3Nr = argumentNumber(arch, 'clone3');

  describe('denied syscalls', () => {
    it.each(deniedOn(arch))(`refuses %s (number %i) with EPERM on ${archName}`, (_name, nr) => {
      expect(hex(syscall(arch, nr))).toBe(hex(RET_EPERM));
      expect(hex(syscall(arch, nr, [], { unixSockets: true }))).toBe(hex(RET_EPERM));
      // Arguments do not rescue a denied call.
      expect(hex(syscall(arch, nr, [0xffffffff_ffffffffn, 1n, 2n, 3n, 4n, 5n]))).toBe(hex(RET_EPERM));
    });

    it(`has no two denied syscalls with the same number, and none shares a number with socket, clone or clone3 on ${archName}`, () => {
      const numbers = deniedOn(arch).map(([, nr]) => nr);
      expect(new Set(numbers).size).toBe(numbers.length);
      expect(numbers).not.toContain(socketNr);
      expect(numbers).not.toContain(cloneNr);
      expect(numbers).not.toContain(clone3Nr);
    });
  });

  describe('ordinary syscalls', () => {
    it.each(ALLOWED_SYSCALLS[arch])(`allows %s (number %i) on ${archName}`, (_name, nr) => {
      expect(hex(syscall(arch, nr))).toBe(hex(RET_ALLOW));
      expect(hex(syscall(arch, nr, [], { unixSockets: true }))).toBe(hex(RET_ALLOW));
    });
  });

  describe('socketpair()', () => {
    const socketpairNr = argumentNumber(arch, 'socketpair');
    it(`allows an AF_UNIX pair on ${archName} whether or not unix sockets are granted: a pair reaches nothing`, () => {
      expect(hex(syscall(arch, socketpairNr, [BigInt(AF_UNIX), 1n, 0n]))).toBe(hex(RET_ALLOW));
      expect(hex(syscall(arch, socketpairNr, [BigInt(AF_UNIX), 1n, 0n], { unixSockets: true }))).toBe(hex(RET_ALLOW));
    });

    it.each([
      ['AF_INET', AF_INET],
      ['AF_TIPC', 30],
      ['AF_NETLINK', AF_NETLINK],
    ])(`refuses a %s pair with EPERM on ${archName}`, (_name, family) => {
      expect(hex(syscall(arch, socketpairNr, [BigInt(family), 1n, 0n], { unixSockets: true }))).toBe(hex(RET_EPERM));
    });
  });

  describe('socket()', () => {
    it.each([
      ['AF_INET', AF_INET],
      ['AF_INET6', AF_INET6],
    ])(`allows %s sockets on ${archName}`, (_name, family) => {
      expect(hex(syscall(arch, socketNr, [BigInt(family), 1n, 0n]))).toBe(hex(RET_ALLOW));
      expect(hex(syscall(arch, socketNr, [BigInt(family), 1n, 0n], { unixSockets: true }))).toBe(hex(RET_ALLOW));
    });

    it(`refuses AF_UNIX sockets with EACCES on ${archName} unless unix sockets are granted`, () => {
      expect(hex(syscall(arch, socketNr, [BigInt(AF_UNIX), 1n, 0n]))).toBe(hex(RET_EACCES));
    });

    it(`allows AF_UNIX sockets on ${archName} when unix sockets are granted`, () => {
      expect(hex(syscall(arch, socketNr, [BigInt(AF_UNIX), 1n, 0n], { unixSockets: true }))).toBe(hex(RET_ALLOW));
    });

    it.each([
      ['AF_NETLINK', AF_NETLINK],
      ['AF_PACKET', AF_PACKET],
    ])(`refuses %s sockets with EACCES on ${archName}, granted unix sockets or not`, (_name, family) => {
      expect(hex(syscall(arch, socketNr, [BigInt(family), 3n, 0n]))).toBe(hex(RET_EACCES));
      expect(hex(syscall(arch, socketNr, [BigInt(family), 3n, 0n], { unixSockets: true }))).toBe(hex(RET_EACCES));
    });

    it.each([
      ['AF_UNSPEC', 0],
      ['AF_BLUETOOTH', AF_BLUETOOTH],
      ['AF_ALG', AF_ALG],
      ['AF_VSOCK', AF_VSOCK],
      ['an out-of-range family', 0xffff],
    ])(`refuses %s sockets with EPERM on ${archName}`, (_name, family) => {
      expect(hex(syscall(arch, socketNr, [BigInt(family), 1n, 0n]))).toBe(hex(RET_EPERM));
      expect(hex(syscall(arch, socketNr, [BigInt(family), 1n, 0n], { unixSockets: true }))).toBe(hex(RET_EPERM));
    });
  });

  describe('clone()', () => {
    it.each([
      ['the glibc thread flags', GLIBC_THREAD_FLAGS],
      ['plain SIGCHLD (fork)', SIGCHLD],
      ['no flags at all', 0],
      ['CLONE_VM|CLONE_VFORK|SIGCHLD (posix_spawn)', 0x00004100 | SIGCHLD],
    ])(`allows clone with %s on ${archName}`, (_name, flags) => {
      expect(hex(syscall(arch, cloneNr, [BigInt(flags), 0n, 0n, 0n, 0n]))).toBe(hex(RET_ALLOW));
    });

    it.each(CLONE_NEW_FLAGS)(`refuses clone with %s (%i) with EPERM on ${archName}`, (_name, bit) => {
      expect(hex(syscall(arch, cloneNr, [BigInt(bit)]))).toBe(hex(RET_EPERM));
      expect(hex(syscall(arch, cloneNr, [BigInt(bit | SIGCHLD)]))).toBe(hex(RET_EPERM));
      expect(hex(syscall(arch, cloneNr, [BigInt((bit | GLIBC_THREAD_FLAGS) >>> 0)]))).toBe(hex(RET_EPERM));
    });

    it(`refuses clone with every namespace flag at once with EPERM on ${archName}`, () => {
      expect(hex(syscall(arch, cloneNr, [BigInt(CLONE_NAMESPACE_FLAGS)]))).toBe(hex(RET_EPERM));
    });
  });

  describe('fallocate()', () => {
    const fallocateNr = argumentNumber(arch, 'fallocate');
    it.each([
      ['FALLOC_FL_KEEP_SIZE', 0x01],
      ['FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE', 0x11],
    ])(`answers %s, which reserves disk past the file's end, with EOPNOTSUPP on ${archName}`, (_name, mode) => {
      expect(hex(syscall(arch, fallocateNr, [3n, BigInt(mode), 0n, 1n << 32n]))).toBe(hex(RET_EOPNOTSUPP));
      expect(hex(syscall(arch, fallocateNr, [3n, BigInt(mode), 0n, 1n << 32n], { unixSockets: true }))).toBe(hex(RET_EOPNOTSUPP));
    });

    it.each([
      ['mode 0 (extends the file, as posix_fallocate does)', 0x00],
      ['FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (frees)', 0x03],
      ['FALLOC_FL_ZERO_RANGE (within the size RLIMIT_FSIZE bounds)', 0x10],
    ])(`allows fallocate with %s on ${archName}`, (_name, mode) => {
      expect(hex(syscall(arch, fallocateNr, [3n, BigInt(mode), 0n, 4096n]))).toBe(hex(RET_ALLOW));
    });
  });

  it(`answers clone3 with ENOSYS on ${archName}, whatever its arguments`, () => {
    expect(hex(syscall(arch, clone3Nr))).toBe(hex(RET_ENOSYS));
    expect(hex(syscall(arch, clone3Nr, [0x7ffd_0000_1000n, 88n]))).toBe(hex(RET_ENOSYS));
    expect(hex(syscall(arch, clone3Nr, [], { unixSockets: true }))).toBe(hex(RET_ENOSYS));
  });

  it(`answers memfd_create with ENOSYS on ${archName}, whatever its arguments, as a kernel without it would`, () => {
    const memfdNr = UNAVAILABLE_SYSCALLS.memfd_create?.[arch] as number;
    expect(hex(syscall(arch, memfdNr))).toBe(hex(RET_ENOSYS));
    expect(hex(syscall(arch, memfdNr, [0x7ffd_0000_1000n, 1n]))).toBe(hex(RET_ENOSYS));
    expect(hex(syscall(arch, memfdNr, [], { unixSockets: true }))).toBe(hex(RET_ENOSYS));
  });

  describe('other architectures', () => {
    const foreign: Array<[string, number]> = [
      ['i386', AUDIT_ARCH_I386],
      ['32-bit ARM', AUDIT_ARCH_ARM],
      arch === 'x64' ? ['aarch64', AUDIT_ARCH_AARCH64] : ['x86_64', AUDIT_ARCH_X86_64],
      ['an unknown architecture (0)', 0],
    ];
    const numbers = [
      0,
      1,
      11,
      59,
      120,
      socketNr,
      cloneNr,
      clone3Nr,
      ...deniedOn(arch).map(([, nr]) => nr),
      ...Object.values(UNAVAILABLE_SYSCALLS).flatMap((entry) => entry[arch] ?? []),
      0xffffffff,
    ];

    it.each(foreign)(`kills the process for a syscall made as %s on ${archName}, whatever the number`, (_name, auditArch) => {
      for (const unixSockets of [false, true]) {
        for (const nr of numbers) {
          expect(hex(syscall(arch, nr, [BigInt(AF_INET)], { auditArch, unixSockets })), `nr ${nr}`).toBe(hex(RET_KILL_PROCESS));
        }
      }
    });
  });

  if (arch === 'x64') {
    it.each([
      ['read', 0],
      ['write', 1],
      ['socket', 41],
      ['execve', 59],
      ['an x32-only number (512, rt_sigaction)', 512],
      ['the largest x32 number', 0x3fffffff],
    ])('kills the process for the x32 form of %s (nr | 0x40000000) on x86_64', (_name, nr) => {
      expect(hex(syscall('x64', (X32_SYSCALL_BIT | nr) >>> 0))).toBe(hex(RET_KILL_PROCESS));
      expect(hex(syscall('x64', (X32_SYSCALL_BIT | nr) >>> 0, [], { unixSockets: true }))).toBe(hex(RET_KILL_PROCESS));
    });
  }

  /*
   * High argument words. The program loads only offset 16, the low word of args[0], so the high
   * word (offset 20) cannot influence a decision. That matches the kernel: socket() takes an
   * `int` family, and clone() uses `lower_32_bits(clone_flags)` (kernel/fork.c), and every
   * CLONE_NEW* bit is in the low word — so what the filter sees is what the kernel acts on.
   */
  describe('high argument words', () => {
    const HIGH_WORDS = [0x1_00000000n, 0x80000000_00000000n, 0xffffffff_00000000n];

    it.each([
      ['AF_UNIX', AF_UNIX, RET_EACCES],
      ['AF_NETLINK', AF_NETLINK, RET_EACCES],
      ['AF_PACKET', AF_PACKET, RET_EACCES],
      ['AF_ALG', AF_ALG, RET_EPERM],
      ['AF_VSOCK', AF_VSOCK, RET_EPERM],
    ])(`does not let a set high word turn a refused %s socket into an allowed one on ${archName}`, (_name, family, verdict) => {
      for (const high of HIGH_WORDS) expect(hex(syscall(arch, socketNr, [high | BigInt(family), 1n, 0n]))).toBe(hex(verdict));
    });

    it(`judges AF_INET and AF_INET6 by the low word alone on ${archName}, as the kernel's int family does`, () => {
      for (const high of HIGH_WORDS) {
        expect(hex(syscall(arch, socketNr, [high | BigInt(AF_INET)]))).toBe(hex(RET_ALLOW));
        expect(hex(syscall(arch, socketNr, [high | BigInt(AF_INET6)]))).toBe(hex(RET_ALLOW));
      }
    });

    it(`does not let a set high word turn a refused namespace clone into an allowed one on ${archName}`, () => {
      for (const high of HIGH_WORDS) {
        for (const [, bit] of CLONE_NEW_FLAGS) expect(hex(syscall(arch, cloneNr, [high | BigInt(bit)]))).toBe(hex(RET_EPERM));
      }
    });

    it(`allows clone whose namespace-free low word comes with a set high word on ${archName} (the kernel ignores the high word)`, () => {
      for (const high of HIGH_WORDS) expect(hex(syscall(arch, cloneNr, [high | BigInt(GLIBC_THREAD_FLAGS)]))).toBe(hex(RET_ALLOW));
    });

    it(`ignores the high word of the syscall's other arguments and the instruction pointer on ${archName}`, () => {
      const noise = [0xffffffff_ffffffffn, 0xffffffff_ffffffffn, 0xffffffff_ffffffffn, 0xffffffff_ffffffffn, 0xffffffff_ffffffffn];
      const program = kernelProgram(arch, false);
      const run = (nr: number, arg0: bigint): number =>
        runFilter(program, { nr, arch: AUDIT_ARCH[arch], args: [arg0, ...noise], instructionPointer: 0xffffffff_ffffffffn });
      expect(hex(run(socketNr, BigInt(AF_NETLINK)))).toBe(hex(RET_EACCES));
      expect(hex(run(socketNr, BigInt(AF_INET)))).toBe(hex(RET_ALLOW));
      expect(hex(run(cloneNr, 0x10000000n))).toBe(hex(RET_EPERM));
      expect(hex(run(cloneNr, BigInt(SIGCHLD)))).toBe(hex(RET_ALLOW));
    });
  });
});

// ---------------------------------------------------------------------------------------------
// The tables against the kernel headers.

const X64_HEADER = '/usr/include/x86_64-linux-gnu/asm/unistd_64.h';
const GENERIC_HEADER = '/usr/include/asm-generic/unistd.h';

/** `#define __NR_<name> <n>` lines of asm/unistd_64.h. */
function parseX64Header(text: string): Map<string, number> {
  const numbers = new Map<string, number>();
  for (const match of text.matchAll(/^#define\s+__NR_(\w+)\s+(\d+)\s*$/gm)) {
    const [, name, nr] = match;
    if (name !== undefined && nr !== undefined) numbers.set(name, Number(nr));
  }
  return numbers;
}

/**
 * asm-generic/unistd.h as arm64 includes it: a tiny preprocessor that honours its
 * `#if`/`#ifdef`/`#ifndef`/`#else`/`#endif` with arm64's configuration (64-bit, not compat, and
 * the `__ARCH_WANT_*` macros arch/arm64/include/uapi/asm/unistd.h defines), and resolves
 * `#define __NR_<name> __NR3264_<name>` to the `__NR3264_` number. Anything it does not
 * understand throws, so a change in the header's form fails the test instead of passing it.
 */
function parseGenericHeader(text: string): Map<string, number> {
  const defined = new Set([
    '__ARCH_WANT_RENAMEAT',
    '__ARCH_WANT_NEW_STAT',
    '__ARCH_WANT_SET_GET_RLIMIT',
    '__ARCH_WANT_TIME32_SYSCALLS',
    '__ARCH_WANT_SYS_CLONE3',
    '__ARCH_WANT_MEMFD_SECRET',
  ]);
  const values: Record<string, number> = { __BITS_PER_LONG: 64 };
  const macros = new Map<string, string>();
  /** One entry per open conditional: whether its current branch is taken, and whether any was. */
  const stack: Array<{ active: boolean; taken: boolean; parentActive: boolean }> = [];
  const active = (): boolean => stack.every((frame) => frame.active);

  const evaluate = (expression: string): boolean => {
    const tokens = expression.match(/defined|\(|\)|==|!=|&&|\|\||!|\d+|[A-Za-z_]\w*|\S/g) ?? [];
    let at = 0;
    const next = (): string => {
      const token = tokens[at++];
      if (token === undefined) throw new Error(`header: expression '${expression}' ended early`);
      return token;
    };
    const peek = (): string | undefined => tokens[at];
    const primary = (): number => {
      const token = next();
      if (token === '(') {
        const value = or();
        if (next() !== ')') throw new Error(`header: unbalanced '${expression}'`);
        return value;
      }
      if (token === '!') return primary() === 0 ? 1 : 0;
      if (token === 'defined') {
        const parenthesised = peek() === '(';
        if (parenthesised) next();
        const name = next();
        if (parenthesised && next() !== ')') throw new Error(`header: bad defined() in '${expression}'`);
        return defined.has(name) || macros.has(name) ? 1 : 0;
      }
      if (/^\d+$/.test(token)) return Number(token);
      const value = values[token];
      if (value === undefined) throw new Error(`header: unknown identifier '${token}' in '${expression}'`);
      return value;
    };
    const comparison = (): number => {
      const left = primary();
      const op = peek();
      if (op === '==' || op === '!=') {
        next();
        const right = primary();
        return (left === right) === (op === '==') ? 1 : 0;
      }
      return left;
    };
    const and = (): number => {
      let value = comparison();
      while (peek() === '&&') {
        next();
        const right = comparison();
        value = value !== 0 && right !== 0 ? 1 : 0;
      }
      return value;
    };
    const or = (): number => {
      let value = and();
      while (peek() === '||') {
        next();
        const right = and();
        value = value !== 0 || right !== 0 ? 1 : 0;
      }
      return value;
    };
    const result = or();
    if (at !== tokens.length) throw new Error(`header: trailing tokens in '${expression}'`);
    return result !== 0;
  };

  const open = (condition: () => boolean): void => {
    const parentActive = active();
    const taken = parentActive && condition();
    stack.push({ active: taken, taken, parentActive });
  };

  const withoutComments = text.replace(/\/\*[\s\S]*?\*\//g, ' ');
  for (const rawLine of withoutComments.split('\n')) {
    const line = rawLine.trim();
    if (!line.startsWith('#')) continue;
    const directive = /^#\s*(\w+)\s*(.*)$/.exec(line);
    const [, keyword, rest = ''] = directive ?? [];
    switch (keyword) {
      case 'ifdef':
        open(() => defined.has(rest.trim()) || macros.has(rest.trim()));
        break;
      case 'ifndef':
        open(() => !(defined.has(rest.trim()) || macros.has(rest.trim())));
        break;
      case 'if':
        open(() => evaluate(rest));
        break;
      case 'else': {
        const frame = stack[stack.length - 1];
        if (frame === undefined) throw new Error('header: #else without #if');
        frame.active = frame.parentActive && !frame.taken;
        frame.taken = frame.taken || frame.active;
        break;
      }
      case 'endif':
        if (stack.pop() === undefined) throw new Error('header: #endif without #if');
        break;
      case 'include':
        break;
      case 'undef':
        if (active()) macros.delete(rest.trim());
        break;
      case 'define': {
        if (!active()) break;
        const definition = /^(\w+)(\([^)]*\))?\s*(.*)$/.exec(rest);
        if (definition?.[1] === undefined) throw new Error(`header: cannot read '${line}'`);
        macros.set(definition[1], definition[2] === undefined ? (definition[3] ?? '') : '<function-like>');
        break;
      }
      default:
        throw new Error(`header: unexpected directive '${line}'`);
    }
  }
  if (stack.length !== 0) throw new Error('header: unterminated #if');

  const numbers = new Map<string, number>();
  for (const [macro, body] of macros) {
    const name = /^__NR_(\w+)$/.exec(macro)?.[1];
    if (name === undefined) continue;
    if (/^\d+$/.test(body)) numbers.set(name, Number(body));
    else {
      const aliased = macros.get(body);
      if (/^__NR3264_\w+$/.test(body) && aliased !== undefined && /^\d+$/.test(aliased)) numbers.set(name, Number(aliased));
      else throw new Error(`header: __NR_${name} is '${body}', which is neither a number nor a __NR3264_ number`);
    }
  }
  return numbers;
}

function readHeader(file: string, what: string): string | undefined {
  if (existsSync(file)) return readFileSync(file, 'utf8');
  console.warn(`[seccomp.test] ${file} is missing (install linux-libc-dev); skipping the ${what} syscall-number cross-check`);
  return undefined;
}

const headerText: Record<SeccompArch, string | undefined> = {
  x64: readHeader(X64_HEADER, 'x86_64'),
  arm64: readHeader(GENERIC_HEADER, 'aarch64'),
};
const parsedHeaders = new Map<SeccompArch, Map<string, number>>();
function headerNumbers(arch: SeccompArch): Map<string, number> {
  let numbers = parsedHeaders.get(arch);
  if (numbers === undefined) {
    const text = headerText[arch];
    if (text === undefined) throw new Error(`the ${arch} header is missing`);
    numbers = arch === 'x64' ? parseX64Header(text) : parseGenericHeader(text);
    parsedHeaders.set(arch, numbers);
  }
  return numbers;
}

describe.each(ARCHES)('syscall numbers on %s against the kernel headers', (arch) => {
  const header = arch === 'x64' ? X64_HEADER : GENERIC_HEADER;
  const missing = headerText[arch] === undefined;

  it.skipIf(missing)(`reads plausible numbers from ${header}`, () => {
    const numbers = headerNumbers(arch);
    expect(numbers.size).toBeGreaterThan(250);
    // Spot checks of the parser itself, including a __NR3264_ name and a conditional one.
    expect(numbers.get('read')).toBe(arch === 'x64' ? 0 : 63);
    expect(numbers.get('mmap')).toBe(arch === 'x64' ? 9 : 222);
    expect(numbers.get('fstatfs')).toBe(arch === 'x64' ? 138 : 44);
    expect(numbers.get('clone3')).toBe(435);
    if (arch === 'arm64') {
      expect(numbers.has('mmap2')).toBe(false); // the 32-bit branch is not taken
      expect(numbers.has('fstatfs64')).toBe(false);
    }
  });

  const tables: Array<[string, string, number | undefined]> = [
    ...Object.entries(DENIED_SYSCALLS).map(([name, numbers]): [string, string, number | undefined] => ['DENIED_SYSCALLS', name, numbers[arch]]),
    ...Object.entries(ARGUMENT_SYSCALLS).map(([name, numbers]): [string, string, number | undefined] => ['ARGUMENT_SYSCALLS', name, numbers[arch]]),
    ...Object.entries(UNAVAILABLE_SYSCALLS).map(([name, numbers]): [string, string, number | undefined] => ['UNAVAILABLE_SYSCALLS', name, numbers[arch]]),
    ...ALLOWED_SYSCALLS[arch].map(([name, nr]): [string, string, number | undefined] => ['the allowed-syscall list', name, nr]),
  ];

  it.skipIf(missing).each(tables)(`has %s.%s match ${header}`, (_table, name, nr) => {
    const numbers = headerNumbers(arch);
    if (nr === undefined) expect(numbers.has(name), `__NR_${name} should not exist on ${arch}`).toBe(false);
    // A syscall newer than the installed headers: its number is past every number they know.
    else if (!numbers.has(name))
      expect(nr, `__NR_${name} is not in ${header}, so it must be newer than all it lists`).toBeGreaterThan(Math.max(...numbers.values()));
    else expect(numbers.get(name), `__NR_${name}`).toBe(nr);
  });
});
