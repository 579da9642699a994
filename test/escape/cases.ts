import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The escape-conformance cases: 28 probes, each a small Python script under `probes/`, run inside
 * the real sandbox as `python3 <probe>` from a shell tool with the capsule's workdir as cwd. Each
 * prints one `EC_RESULT {"id", "verdict", "detail"}` line; this registry says what the sealed
 * containment class must make of it.
 *
 * Boundary cases (1–23) ask whether a limit of the sandbox can be crossed; resource cases (24–28)
 * ask whether a declared ceiling holds. A resource ceiling that gives way is denial of service,
 * NOT AN ESCAPE.
 */

export type Verdict = 'REFUSED' | 'ALLOWED' | 'SUCCESS' | 'CONTAINED' | 'UNCONTAINED' | 'INCONCLUSIVE';

/**
 * Where a case's verdict comes from: the probe's own EC_RESULT line; whether a second shell spawn
 * after the probe is refused naming `workdir_max_bytes`; or the shell tool's exit code (137).
 */
export type Evidence = 'probe' | 'second-spawn-refused' | 'shell-exit';

export interface EscapeCase {
  id: string; // kebab-case, = probe file name without .py
  number: number; // 1..28
  category: 'boundary' | 'resource';
  /** What the sealed class must show; undefined = recorded, not asserted (the two EXDEV cases). */
  sealed: Verdict | undefined;
  evidence: Evidence; // 26 → 'second-spawn-refused', 27 → 'shell-exit', others 'probe'
  summary: string; // one sentence: what the probe tries, in our words
  /** Why the sealed verdict is right (e.g. "/tmp is a directory of the workdir"), or why it is not asserted. */
  rationale: string;
}

const VERDICTS: readonly Verdict[] = ['REFUSED', 'ALLOWED', 'SUCCESS', 'CONTAINED', 'UNCONTAINED', 'INCONCLUSIVE'];

const NOT_AN_ESCAPE = 'If it gives way that is denial of service, NOT AN ESCAPE.';

function syscallRationale(call: string, extra: string): string {
  return `${call} is not on the seccomp allowlist, and the filter's default answer to anything it does not allow is EPERM; ${extra}`;
}

export const ESCAPE_CASES: readonly EscapeCase[] = [
  {
    id: 'read-etc-shadow',
    number: 1,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Opens /etc/shadow for reading, with /etc/passwd as a readable control.',
    rationale:
      'The composed root binds only a chosen set of /etc entries and shadow is not among them, so the open fails (ENOENT) before file permissions come into it.',
  },
  {
    id: 'write-outside-workdir',
    number: 2,
    category: 'boundary',
    sealed: 'ALLOWED',
    evidence: 'probe',
    summary: 'Creates and writes a new file under /tmp, a path outside the workdir as the capsule sees it.',
    rationale:
      '/tmp is a directory of the workdir bound at /tmp, so the write lands inside the workdir (and counts toward its size); ALLOWED is the sandbox working as designed, and a stricter REFUSED also passes.',
  },
  {
    id: 'stat-outside-workdir',
    number: 3,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Stats /etc/shadow to see whether even its metadata is visible.',
    rationale: 'Landlock does not mediate stat, but under sealed /etc/shadow has no inode in the mount namespace at all, so stat fails with ENOENT.',
  },
  {
    id: 'symlink-escape',
    number: 4,
    category: 'boundary',
    sealed: 'ALLOWED',
    evidence: 'probe',
    summary: 'Plants a symlink in the workdir pointing at /etc/passwd and opens the file through it.',
    rationale:
      "The link resolves inside the composed root, whose /etc/passwd is the sandbox's own synthetic user database and readable by design; nothing of the host is reached.",
  },
  {
    id: 'hardlink-escape',
    number: 5,
    category: 'boundary',
    sealed: undefined,
    evidence: 'probe',
    summary: 'Hard-links /etc/passwd into the workdir and reads it through the new name.',
    rationale:
      'Not asserted: /etc/passwd and the workdir are separate mounts in the composed root, so link() fails with EXDEV before any policy is consulted and the probe reports INCONCLUSIVE; the result is recorded only.',
  },
  {
    id: 'rename-across-boundary',
    number: 6,
    category: 'boundary',
    sealed: undefined,
    evidence: 'probe',
    summary: 'Creates a file in the workdir and renames it into /tmp.',
    rationale:
      'Not asserted: the workdir and /tmp are bound as distinct mounts, so rename() fails with EXDEV whatever the policy and the probe reports INCONCLUSIVE; the result is recorded only.',
  },
  {
    id: 'proc-self-cwd-reopen',
    number: 7,
    category: 'boundary',
    sealed: 'ALLOWED',
    evidence: 'probe',
    summary: "Walks up out of the workdir through /proc/self/cwd with one '..' per path component and opens etc/passwd at the top.",
    rationale:
      "The magic link resolves in the sandbox's mount namespace, so the walk ends at the composed root and its synthetic, readable /etc/passwd rather than the host's.",
  },
  {
    id: 'proc-pid-root-reopen',
    number: 8,
    category: 'boundary',
    sealed: 'ALLOWED',
    evidence: 'probe',
    summary: 'Opens /proc/<own pid>/root/etc/passwd, the root alias /proc offers.',
    rationale:
      "/proc is the sandbox's own, of its own pid namespace, so the root alias is the composed root itself and reaches only its synthetic /etc/passwd.",
  },
  {
    id: 'proc-self-fd-reopen',
    number: 9,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Opens /dev/urandom read-only, then reopens that descriptor through /proc/self/fd/<n> for reading and writing.',
    rationale:
      'Landlock grants /dev/urandom read-only and the reopen is a fresh open checked against that grant, so O_RDWR is refused (EACCES) while a same-mode reopen still works.',
  },
  {
    id: 'inherited-fd-after-exec',
    number: 10,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary:
      'Looks with fcntl(F_GETFD) for descriptors 7 and 20, which the test left open without close-on-exec when it launched the runtime, and reads from them if present.',
    rationale:
      "Descriptors the runtime inherited from whoever launched it must not reach the capsule's subprocesses; with neither 7 nor 20 open the capsule cannot read the launcher's file.",
  },
  {
    id: 'mknod-block-device-in-workdir',
    number: 11,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Creates a block-device node for disk 8:0 in the workdir and tries to read raw sectors through it.',
    rationale: "The workdir's Landlock grant withholds making device nodes (EACCES), and every capability, CAP_MKNOD included, is dropped as well.",
  },
  {
    id: 'exec-renamed-disallowed-binary',
    number: 12,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Runs ./bash --version where ./bash is a non-allowlisted binary (ls) the test copied into the workdir under an allowlisted name.',
    rationale:
      'The workdir carries no execute right under Landlock, so nothing copied there can run whatever it is called (EACCES from execve); the shell allowlist grants the real files, not names. This case is permanent.',
  },
  {
    id: 'connect-unlisted-tcp-host',
    number: 13,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Opens a TCP connection to 1.1.1.1:443, a host no grant names.',
    rationale:
      'In the network namespace every IPv4 address is local and nothing listens for an ungranted host, so connect gets ECONNREFUSED without a packet leaving.',
  },
  {
    id: 'udp-exfiltration',
    number: 14,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Sends a UDP datagram to 1.1.1.1:46053 while listening for it on 0.0.0.0:46053 on its own side.',
    rationale:
      "UDP to 1.1.1.1 is delivered inside the namespace, so the probe's own receiver catches the payload: proof it never left, which the probe reports as REFUSED.",
  },
  {
    id: 'dns-exfiltration',
    number: 15,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Resolves a unique name under .invalid to see whether the label reaches a resolver outside the sandbox.',
    rationale:
      "The sandbox's DNS stub at 127.0.0.1:53 answers REFUSED for names not on the allowlist, so getaddrinfo fails with EAI_AGAIN instead of an outside NXDOMAIN.",
  },
  {
    id: 'abstract-unix-socket-connect',
    number: 16,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Creates a Unix stream socket and connects to a name in the abstract namespace.',
    rationale:
      'Without network.unix_sockets the seccomp filter refuses socket(AF_UNIX, …) with EACCES, before any name is looked up; abstract names are not files, so only this refusal stops them.',
  },
  {
    id: 'pathname-unix-socket-connect',
    number: 17,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: "Creates a Unix stream socket and connects to the Docker daemon's socket at /var/run/docker.sock or /run/docker.sock.",
    rationale: 'Without network.unix_sockets the seccomp filter refuses socket(AF_UNIX, …) with EACCES, and the composed root holds no daemon sockets anyway.',
  },
  {
    id: 'syscall-io-uring-setup',
    number: 18,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls io_uring_setup(1, NULL) by raw syscall number; a permitted call would answer EFAULT.',
    rationale: syscallRationale('io_uring_setup', 'io_uring would let work run outside the reach of the syscall filter.'),
  },
  {
    id: 'syscall-userfaultfd',
    number: 19,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls userfaultfd(0) by raw syscall number, closing any descriptor it returns.',
    rationale: syscallRationale('userfaultfd', 'it is a classic tool for widening kernel race windows.'),
  },
  {
    id: 'syscall-bpf',
    number: 20,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls bpf(BPF_MAP_CREATE, NULL, 0) by raw syscall number.',
    rationale: syscallRationale('bpf', 'loading programs into the kernel is no business of a capsule.'),
  },
  {
    id: 'syscall-open-by-handle-at',
    number: 21,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls open_by_handle_at(AT_FDCWD, NULL, 0) by raw syscall number; a permitted call would answer EFAULT.',
    rationale: syscallRationale('open_by_handle_at', 'file handles open inodes without walking a path, around every mount boundary.'),
  },
  {
    id: 'syscall-perf-event-open',
    number: 22,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls perf_event_open(NULL, 0, -1, -1, 0) by raw syscall number; a permitted call would answer EFAULT.',
    rationale: syscallRationale('perf_event_open', 'performance counters are a large kernel surface and a side channel.'),
  },
  {
    id: 'syscall-keyctl',
    number: 23,
    category: 'boundary',
    sealed: 'REFUSED',
    evidence: 'probe',
    summary: 'Calls keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0) by raw syscall number, a query any user may make.',
    rationale: syscallRationale('keyctl', 'since the query itself needs no privilege, EPERM can only come from the filter.'),
  },
  {
    id: 'resource-fork-bomb',
    number: 24,
    category: 'resource',
    sealed: 'CONTAINED',
    evidence: 'probe',
    summary: 'Forks up to 4096 sleeping children until fork() is refused, then kills and reaps them all.',
    rationale: `The session's cgroup pids.max (cgroup_pids_max) refuses fork() with EAGAIN long before 200 children. ${NOT_AN_ESCAPE}`,
  },
  {
    id: 'resource-disk-filler-per-file',
    number: 25,
    category: 'resource',
    sealed: 'CONTAINED',
    evidence: 'probe',
    summary: 'Grows a single file in the workdir 1 MiB at a time, up to 200 MiB, with SIGXFSZ ignored, then deletes it.',
    rationale: `RLIMIT_FSIZE (max_file_size_bytes) stops the file at its ceiling: with SIGXFSZ ignored the next write fails with EFBIG. ${NOT_AN_ESCAPE}`,
  },
  {
    id: 'resource-disk-filler-aggregate',
    number: 26,
    category: 'resource',
    sealed: 'CONTAINED',
    evidence: 'second-spawn-refused',
    summary: 'Fills the workdir with 8 MiB files, each under the per-file ceiling, until the requested total is written, and leaves them there.',
    rationale: `No single write crosses a limit, so only the workdir size guard can notice; once the workdir passes workdir_max_bytes the next shell spawn must be refused with a message naming workdir_max_bytes. The probe's own verdict is not the evidence. ${NOT_AN_ESCAPE}`,
  },
  {
    id: 'resource-memory-hog',
    number: 27,
    category: 'resource',
    sealed: 'CONTAINED',
    evidence: 'shell-exit',
    summary: 'Allocates and touches 25 MiB blocks until 4 GiB is resident.',
    rationale: `The cgroup memory.max (cgroup_memory_bytes) is far below the probe's goal, so the kernel OOM-kills it and the shell tool reports exit code 137 (128 + SIGKILL); the probe prints nothing then. ${NOT_AN_ESCAPE}`,
  },
  {
    id: 'resource-fd-exhauster',
    number: 28,
    category: 'resource',
    sealed: 'CONTAINED',
    evidence: 'probe',
    summary: 'Opens one file over and over, up to 4096 descriptors, until open() fails.',
    rationale: `RLIMIT_NOFILE (max_open_files) is set below 512, so open fails with EMFILE at or before that ceiling. ${NOT_AN_ESCAPE}`,
  },
];

/** The probes' directory, absolute (test/escape/probes). */
export const PROBES_DIR: string = join(dirname(fileURLToPath(import.meta.url)), 'probes');

const RESULT_PREFIX = 'EC_RESULT ';

function isVerdict(value: unknown): value is Verdict {
  return typeof value === 'string' && (VERDICTS as readonly string[]).includes(value);
}

/** Parses the EC_RESULT line out of a shell tool's stdout; undefined when absent. */
export function parseProbeOutput(stdout: string): { id: string; verdict: Verdict; detail: string } | undefined {
  const lines = stdout.split(/\r?\n/);
  // The last well-formed line wins: a probe prints exactly one, at the end.
  for (let index = lines.length - 1; index >= 0; index -= 1) {
    const line = (lines[index] ?? '').trim();
    if (!line.startsWith(RESULT_PREFIX)) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line.slice(RESULT_PREFIX.length));
    } catch {
      continue;
    }
    if (typeof parsed !== 'object' || parsed === null) continue;
    const record = parsed as Record<string, unknown>;
    const { id, verdict, detail } = record;
    if (typeof id !== 'string' || !isVerdict(verdict) || typeof detail !== 'string') continue;
    return { id, verdict, detail };
  }
  return undefined;
}

/**
 * Whether `actual` satisfies `expected` on the sealed column: exact match, or REFUSED where
 * ALLOWED/SUCCESS was expected (stricter passes); INCONCLUSIVE never passes.
 */
export function satisfiesSealed(expected: Verdict, actual: Verdict): boolean {
  if (actual === 'INCONCLUSIVE') return false;
  if (actual === expected) return true;
  return actual === 'REFUSED' && (expected === 'ALLOWED' || expected === 'SUCCESS');
}
