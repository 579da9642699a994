/**
 * The seccomp filter every sandboxed process runs under — the capsule host and every subprocess
 * it starts — compiled here to classic BPF and installed by `murmur-confine` just before the host
 * starts (Node has no seccomp API; bubblewrap's `--seccomp` would install it before the helper
 * has made the network namespace it needs).
 *
 * What it refuses, with `EPERM` (the syscall is not part of a capsule's surface): at least
 * upstream's must-stay-denied set — io_uring, userfaultfd, bpf, perf_event_open, open_by_handle_at,
 * the keyring, ptrace and process_vm_*, the mount family (old and new API), chroot, unshare,
 * setns, module and kexec loading, swap, reboot, clock setting, NUMA policy, fanotify, seccomp
 * itself, personality and kcmp — and `clone` with any flag that makes a namespace. `clone3` gets
 * `ENOSYS`, so C libraries fall back to `clone`, whose flags a filter can see, and so does
 * `memfd_create` (`UNAVAILABLE_SYSCALLS` says why). `socket` is judged by family: IPv4 and IPv6 pass, `AF_UNIX` only when
 * `network.unix_sockets` grants it, netlink and packet sockets get `EACCES` (the sandbox looked
 * and refused), every other family `EPERM`; `socketpair` is allowed for `AF_UNIX` only.
 * `fallocate` that keeps the file's size (`FALLOC_FL_KEEP_SIZE`, and not to punch a hole) gets
 * `EOPNOTSUPP`, as from a filesystem without the mode: it reserves disk past the file's end,
 * which neither `RLIMIT_FSIZE` bounds nor the file's size shows — a tool reserved 3 GiB at once
 * under a 1 MiB `max_file_size_bytes`. Extending a file (mode 0, what `posix_fallocate` asks)
 * is bounded as a write is, and passes.
 *
 * The architecture is checked first: a syscall made through another ABI (i386 `int 0x80` on
 * x86_64, 32-bit ARM on aarch64, x32) kills the process rather than slipping past numbers meant
 * for the native one.
 */

export type SeccompArch = 'x64' | 'arm64';

/** `AUDIT_ARCH_*` from `<linux/audit.h>`. */
const AUDIT_ARCH: Record<SeccompArch, number> = { x64: 0xc000003e, arm64: 0xc00000b7 };
/** x32 syscalls are x86_64 numbers with this bit set. */
const X32_SYSCALL_BIT = 0x40000000;

/** Syscall numbers per architecture; `undefined` where the architecture has no such call. */
interface SyscallNumbers {
  x64: number | undefined;
  arm64: number | undefined;
}

/**
 * Every syscall refused outright, with its number on each architecture (read from the kernel's
 * `asm/unistd_64.h` and `asm-generic/unistd.h`; the table's test checks them against the
 * headers when they are installed).
 */
export const DENIED_SYSCALLS: Readonly<Record<string, SyscallNumbers>> = {
  io_uring_setup: { x64: 425, arm64: 425 },
  io_uring_enter: { x64: 426, arm64: 426 },
  io_uring_register: { x64: 427, arm64: 427 },
  userfaultfd: { x64: 323, arm64: 282 },
  bpf: { x64: 321, arm64: 280 },
  perf_event_open: { x64: 298, arm64: 241 },
  open_by_handle_at: { x64: 304, arm64: 265 },
  keyctl: { x64: 250, arm64: 219 },
  add_key: { x64: 248, arm64: 217 },
  request_key: { x64: 249, arm64: 218 },
  ptrace: { x64: 101, arm64: 117 },
  process_vm_readv: { x64: 310, arm64: 270 },
  process_vm_writev: { x64: 311, arm64: 271 },
  kcmp: { x64: 312, arm64: 272 },
  mount: { x64: 165, arm64: 40 },
  umount2: { x64: 166, arm64: 39 },
  pivot_root: { x64: 155, arm64: 41 },
  chroot: { x64: 161, arm64: 51 },
  open_tree: { x64: 428, arm64: 428 },
  move_mount: { x64: 429, arm64: 429 },
  fsopen: { x64: 430, arm64: 430 },
  fsconfig: { x64: 431, arm64: 431 },
  fsmount: { x64: 432, arm64: 432 },
  fspick: { x64: 433, arm64: 433 },
  mount_setattr: { x64: 442, arm64: 442 },
  // Newer than some kernels' headers: reading the mount table (statmount, listmount) and the
  // mount API's open_tree with attributes.
  statmount: { x64: 457, arm64: 457 },
  listmount: { x64: 458, arm64: 458 },
  open_tree_attr: { x64: 467, arm64: 467 },
  unshare: { x64: 272, arm64: 97 },
  setns: { x64: 308, arm64: 268 },
  init_module: { x64: 175, arm64: 105 },
  finit_module: { x64: 313, arm64: 273 },
  delete_module: { x64: 176, arm64: 106 },
  create_module: { x64: 174, arm64: undefined },
  get_kernel_syms: { x64: 177, arm64: undefined },
  query_module: { x64: 178, arm64: undefined },
  kexec_load: { x64: 246, arm64: 104 },
  kexec_file_load: { x64: 320, arm64: 294 },
  swapon: { x64: 167, arm64: 224 },
  swapoff: { x64: 168, arm64: 225 },
  reboot: { x64: 169, arm64: 142 },
  acct: { x64: 163, arm64: 89 },
  quotactl: { x64: 179, arm64: 60 },
  quotactl_fd: { x64: 443, arm64: 443 },
  nfsservctl: { x64: 180, arm64: 42 },
  iopl: { x64: 172, arm64: undefined },
  ioperm: { x64: 173, arm64: undefined },
  _sysctl: { x64: 156, arm64: undefined },
  sysfs: { x64: 139, arm64: undefined },
  uselib: { x64: 134, arm64: undefined },
  lookup_dcookie: { x64: 212, arm64: 18 },
  syslog: { x64: 103, arm64: 116 },
  vhangup: { x64: 153, arm64: 58 },
  clock_adjtime: { x64: 305, arm64: 266 },
  clock_settime: { x64: 227, arm64: 112 },
  settimeofday: { x64: 164, arm64: 170 },
  adjtimex: { x64: 159, arm64: 171 },
  set_mempolicy: { x64: 238, arm64: 237 },
  get_mempolicy: { x64: 239, arm64: 236 },
  mbind: { x64: 237, arm64: 235 },
  migrate_pages: { x64: 256, arm64: 238 },
  move_pages: { x64: 279, arm64: 239 },
  set_mempolicy_home_node: { x64: 450, arm64: 450 },
  fanotify_init: { x64: 300, arm64: 262 },
  fanotify_mark: { x64: 301, arm64: 263 },
  seccomp: { x64: 317, arm64: 277 },
  personality: { x64: 135, arm64: 92 },
};

/**
 * Syscalls answered `ENOSYS`, as a kernel without them would: libraries that use them fall back
 * to what the sandbox judges (a file on a mount), where an `EPERM` could end them.
 *
 * `memfd_create`: an anonymous memory file is on no mount, so neither Landlock's execute right
 * nor a noexec mount can refuse executing one; a capsule's process could write a program it
 * brought into one and run it (by `/proc/self/fd`, by `execveat`, through the dynamic loader),
 * whatever `shell.allow` says. Executable memory inside a process (`mmap` with `PROT_EXEC`) stays
 * possible, as it must for any JIT: what is refused is a brought program run as a process.
 */
export const UNAVAILABLE_SYSCALLS: Readonly<Record<string, SyscallNumbers>> = {
  memfd_create: { x64: 319, arm64: 279 },
};

/** The syscalls judged by their arguments. */
export const ARGUMENT_SYSCALLS: Readonly<Record<'socket' | 'socketpair' | 'clone' | 'clone3' | 'fallocate', SyscallNumbers>> = {
  socket: { x64: 41, arm64: 198 },
  socketpair: { x64: 53, arm64: 199 },
  clone: { x64: 56, arm64: 220 },
  clone3: { x64: 435, arm64: 435 },
  fallocate: { x64: 285, arm64: 47 },
};

export const ERRNO = { EPERM: 1, EACCES: 13, ENOSYS: 38, EOPNOTSUPP: 95 } as const;

/** `fallocate`'s modes the filter reads (`<linux/falloc.h>`). */
export const FALLOC_FL = { KEEP_SIZE: 0x01, PUNCH_HOLE: 0x02 } as const;

export const ADDRESS_FAMILY = { AF_UNIX: 1, AF_INET: 2, AF_INET6: 10, AF_NETLINK: 16, AF_PACKET: 17 } as const;

/** `CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME`. */
export const CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080;

export const SECCOMP_RET = { KILL_PROCESS: 0x80000000, ERRNO: 0x00050000, ALLOW: 0x7fff0000 } as const;

// Classic BPF opcodes (`<linux/filter.h>`).
const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;

/** Offsets into `struct seccomp_data`: the number, the architecture, the low words of args[0] and args[1]. */
const DATA = { nr: 0, arch: 4, arg0: 16, arg1: 24 } as const;

export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

type Step =
  | { kind: 'load'; offset: number }
  | { kind: 'jump'; op: number; k: number; whenTrue: string | null; whenFalse: string | null }
  | { kind: 'return'; value: number }
  | { kind: 'label'; name: string };

/** A tiny assembler: jumps name labels, and are resolved to the 8-bit offsets BPF allows. */
function assemble(steps: Step[]): BpfInstruction[] {
  const positions = new Map<string, number>();
  let index = 0;
  for (const step of steps) {
    if (step.kind === 'label') positions.set(step.name, index);
    else index += 1;
  }
  const program: BpfInstruction[] = [];
  for (const step of steps) {
    if (step.kind === 'label') continue;
    if (step.kind === 'load') program.push({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: step.offset });
    else if (step.kind === 'return') program.push({ code: BPF_RET_K, jt: 0, jf: 0, k: step.value >>> 0 });
    else {
      const here = program.length;
      const offset = (label: string | null): number => {
        if (label === null) return 0;
        const target = positions.get(label);
        if (target === undefined) throw new Error(`seccomp: no label '${label}'`);
        const distance = target - here - 1;
        if (distance < 0 || distance > 255) throw new Error(`seccomp: jump to '${label}' is ${distance} instructions`);
        return distance;
      };
      program.push({ code: step.op, jt: offset(step.whenTrue), jf: offset(step.whenFalse), k: step.k >>> 0 });
    }
  }
  return program;
}

export interface SeccompOptions {
  arch: SeccompArch;
  /** `capabilities.network.unix_sockets`: whether `socket(AF_UNIX, …)` is allowed. */
  unixSockets: boolean;
}

/** The filter as instructions (what the tests interpret), for one architecture. */
export function seccompProgram(options: SeccompOptions): BpfInstruction[] {
  const { arch } = options;
  const number = (numbers: SyscallNumbers): number | undefined => numbers[arch];
  const steps: Step[] = [
    { kind: 'load', offset: DATA.arch },
    { kind: 'jump', op: BPF_JEQ_K, k: AUDIT_ARCH[arch], whenTrue: null, whenFalse: 'kill' },
    { kind: 'load', offset: DATA.nr },
  ];
  if (arch === 'x64') steps.push({ kind: 'jump', op: BPF_JGE_K, k: X32_SYSCALL_BIT, whenTrue: 'kill', whenFalse: null });
  for (const numbers of Object.values(DENIED_SYSCALLS)) {
    const nr = number(numbers);
    if (nr !== undefined) steps.push({ kind: 'jump', op: BPF_JEQ_K, k: nr, whenTrue: 'eperm', whenFalse: null });
  }
  for (const numbers of Object.values(UNAVAILABLE_SYSCALLS)) {
    const nr = number(numbers);
    if (nr !== undefined) steps.push({ kind: 'jump', op: BPF_JEQ_K, k: nr, whenTrue: 'enosys', whenFalse: null });
  }
  steps.push(
    { kind: 'jump', op: BPF_JEQ_K, k: number(ARGUMENT_SYSCALLS.socket) as number, whenTrue: 'socket', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: number(ARGUMENT_SYSCALLS.clone) as number, whenTrue: 'clone', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: number(ARGUMENT_SYSCALLS.socketpair) as number, whenTrue: 'socketpair', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: number(ARGUMENT_SYSCALLS.fallocate) as number, whenTrue: 'fallocate', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: number(ARGUMENT_SYSCALLS.clone3) as number, whenTrue: 'enosys', whenFalse: 'allow' },
    // socket(domain, …): by family.
    { kind: 'label', name: 'socket' },
    { kind: 'load', offset: DATA.arg0 },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_INET, whenTrue: 'allow', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_INET6, whenTrue: 'allow', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_UNIX, whenTrue: options.unixSockets ? 'allow' : 'eacces', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_NETLINK, whenTrue: 'eacces', whenFalse: null },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_PACKET, whenTrue: 'eacces', whenFalse: 'eperm' },
    // clone(flags, …): no namespaces.
    { kind: 'label', name: 'clone' },
    { kind: 'load', offset: DATA.arg0 },
    { kind: 'jump', op: BPF_JSET_K, k: CLONE_NAMESPACE_FLAGS, whenTrue: 'eperm', whenFalse: 'allow' },
    // socketpair(domain, …): a connected pair of local sockets reaches nothing, so AF_UNIX is
    // always allowed (runtimes make pipes of them); any other family a pair exists for is not.
    { kind: 'label', name: 'socketpair' },
    { kind: 'load', offset: DATA.arg0 },
    { kind: 'jump', op: BPF_JEQ_K, k: ADDRESS_FAMILY.AF_UNIX, whenTrue: 'allow', whenFalse: 'eperm' },
    // fallocate(fd, mode, …): no reserving past the file's end; punching a hole frees.
    { kind: 'label', name: 'fallocate' },
    { kind: 'load', offset: DATA.arg1 },
    { kind: 'jump', op: BPF_JSET_K, k: FALLOC_FL.PUNCH_HOLE, whenTrue: 'allow', whenFalse: null },
    { kind: 'jump', op: BPF_JSET_K, k: FALLOC_FL.KEEP_SIZE, whenTrue: 'eopnotsupp', whenFalse: 'allow' },
    { kind: 'label', name: 'allow' },
    { kind: 'return', value: SECCOMP_RET.ALLOW },
    { kind: 'label', name: 'eperm' },
    { kind: 'return', value: SECCOMP_RET.ERRNO | ERRNO.EPERM },
    { kind: 'label', name: 'eacces' },
    { kind: 'return', value: SECCOMP_RET.ERRNO | ERRNO.EACCES },
    { kind: 'label', name: 'eopnotsupp' },
    { kind: 'return', value: SECCOMP_RET.ERRNO | ERRNO.EOPNOTSUPP },
    { kind: 'label', name: 'enosys' },
    { kind: 'return', value: SECCOMP_RET.ERRNO | ERRNO.ENOSYS },
    { kind: 'label', name: 'kill' },
    { kind: 'return', value: SECCOMP_RET.KILL_PROCESS },
  );
  return assemble(steps);
}

/** The filter as the kernel takes it: `struct sock_filter` records, little-endian. */
export function seccompFilterBytes(options: SeccompOptions): Buffer {
  const program = seccompProgram(options);
  const bytes = Buffer.alloc(program.length * 8);
  program.forEach((instruction, index) => {
    bytes.writeUInt16LE(instruction.code, index * 8);
    bytes.writeUInt8(instruction.jt, index * 8 + 2);
    bytes.writeUInt8(instruction.jf, index * 8 + 3);
    bytes.writeUInt32LE(instruction.k, index * 8 + 4);
  });
  return bytes;
}

/** This machine's architecture as the filter names it, or undefined where no filter is built. */
export function nativeSeccompArch(arch: string = process.arch): SeccompArch | undefined {
  return arch === 'x64' || arch === 'arm64' ? arch : undefined;
}
