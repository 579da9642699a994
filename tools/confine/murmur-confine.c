// murmur-confine: the last step into a capsule's sandbox, and the ceilings of its subprocesses.
//
// Node has no API for network namespaces, Landlock or seccomp, so the executor writes down what a
// sandbox must be (as plain directives, computed and tested in TypeScript) and this small program
// makes it so, in the one order that is safe, and then becomes the command:
//
//   murmur-confine enter <spec-fd> -- <command> [args...]
//       Run by bubblewrap as the sandbox's first process, with CAP_SYS_ADMIN, CAP_NET_ADMIN and
//       CAP_NET_BIND_SERVICE in the sandbox's user namespace and nothing else. In order:
//         1. `net`: a new network namespace with only loopback, up, where every IPv4 address is
//            local (so a connect to an address nobody listens on is refused, not routed);
//         2. `listen`: the sockets the capsule host serves inside it (its DNS and the allowlisted
//            destinations), bound now because binding port 53 or 443 needs a capability the host
//            will not have, and placed at the descriptors the spec names;
//         3. every capability dropped (bounding set, ambient, permitted, effective) and
//            no_new_privs set;
//         4. `landlock` and its `allow` rules: what may be read, written, listed and executed;
//         5. `seccomp`: the filter the spec's descriptor holds, installed last;
//         6. every descriptor above 2 closed but those `keep` names (the host's channels, the
//            sockets above, the cgroups its subprocesses join), so nothing the executor's own
//            launcher left open reaches the sandbox;
//       then execve. Any failure is printed on stderr and exits 125: nothing half-confined runs,
//       and a spec without `drop`, `landlock` or `seccomp` is such a failure.
//
//       A pooled sandbox (the executor's warm pool) also has `hold <command-fd> <reply-fd>`, before
//       `drop`: the process forks there. It goes on down the spec and becomes the host, which
//       waits for its session; a detached grandchild keeps the capabilities only until the executor
//       names that session, then mounts the session's workdir into the sandbox (`mkdir`, `bind`,
//       `readonly`, `unmount`, `done` on the command descriptor), answers `ok` and exits. No
//       session's code runs before it has gone: the executor sends the host its session after `ok`.
//
//   murmur-confine limits [NAME=value]... [join=<fd>]... [exec=<path>]... -- <command> [args...]
//       Joins the cgroup whose `cgroup.procs` each `join` descriptor is open on, closes every
//       descriptor above 2, sets hard (= soft, or NAME=soft:hard) rlimits, each clamped to the hard
//       limit already in force, with NPROC=+N meaning N more tasks than this user runs now; with
//       `exec` paths, adds a Landlock layer that lets only those (files, or directories and what is
//       beneath them) be executed; then execve. The capsule host runs every subprocess through
//       this, so a ceiling binds the tool and not the host, a tool inherits nothing but its three
//       standard streams, and a tool cannot run what only the host may (its node, this helper):
//       layers intersect, so the host's own domain keeps its rights and the tool's is narrower.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_CONFINE 125

// Landlock's ABI, written here so the helper builds against headers older than the kernel.
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define LANDLOCK_RULE_PATH_BENEATH 1
#define LL_EXECUTE (1ULL << 0)
#define LL_WRITE_FILE (1ULL << 1)
#define LL_READ_FILE (1ULL << 2)
#define LL_READ_DIR (1ULL << 3)
#define LL_REMOVE_DIR (1ULL << 4)
#define LL_REMOVE_FILE (1ULL << 5)
#define LL_MAKE_CHAR (1ULL << 6)
#define LL_MAKE_DIR (1ULL << 7)
#define LL_MAKE_REG (1ULL << 8)
#define LL_MAKE_SOCK (1ULL << 9)
#define LL_MAKE_FIFO (1ULL << 10)
#define LL_MAKE_BLOCK (1ULL << 11)
#define LL_MAKE_SYM (1ULL << 12)
/** Every right of ABI 1: a right no rule grants is denied everywhere. */
#define LL_ABI1_ALL ((1ULL << 13) - 1)
/** ABI 2: moving or linking a file into another directory. ABI 1 refuses every such move. */
#define LL_REFER (1ULL << 13)
/** ABI 3: truncating a file. ABI 1 does not control it at all. */
#define LL_TRUNCATE (1ULL << 14)
/** The rights that make sense on a file rather than a directory (the kernel refuses the rest). */
#define LL_FILE_RIGHTS (LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE)
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

struct landlock_ruleset_attr {
  uint64_t handled_access_fs;
};

struct landlock_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

static void fail(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fputs("murmur-confine: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
  exit(EXIT_CONFINE);
}

/*
 * Says why `command` did not run. execve's ENOENT for a file that is there means what it named
 * cannot be loaded — the interpreter of its #! line, or its ELF loader — which "No such file or
 * directory" alone would hide: the person reading it would look for the file they can see.
 */
static void fail_running(const char *command) {
  int error = errno;
  if (error == ENOENT && strchr(command, '/') != NULL && access(command, F_OK) == 0)
    fail("running %s: the file is there, but the interpreter its #! line names (or the loader it was linked for) is not", command);
  fail("running %s: %s", command, strerror(error));
}

static long parse_number(const char *text, const char *what) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') fail("%s '%s' is not a number", what, text);
  return value;
}

// ── network ─────────────────────────────────────────────────────────────────────────────────

static void loopback_up(void) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket for loopback: %s", strerror(errno));
  struct ifreq request;
  memset(&request, 0, sizeof request);
  strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(fd, SIOCGIFFLAGS, &request) < 0) fail("reading lo's flags: %s", strerror(errno));
  request.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(fd, SIOCSIFFLAGS, &request) < 0) fail("bringing lo up: %s", strerror(errno));
  close(fd);
}

/** `local 0.0.0.0/0 dev lo table local`: every IPv4 address is this namespace's own. */
static void every_address_local(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) fail("netlink socket: %s", strerror(errno));
  struct {
    struct nlmsghdr header;
    struct rtmsg route;
    char attributes[64];
  } message;
  memset(&message, 0, sizeof message);
  message.header.nlmsg_type = RTM_NEWROUTE;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  message.header.nlmsg_seq = 1;
  message.route.rtm_family = AF_INET;
  message.route.rtm_dst_len = 0;
  message.route.rtm_table = RT_TABLE_LOCAL;
  message.route.rtm_protocol = RTPROT_BOOT;
  message.route.rtm_scope = RT_SCOPE_HOST;
  message.route.rtm_type = RTN_LOCAL;
  unsigned int length = NLMSG_LENGTH(sizeof(struct rtmsg));
  struct rtattr *attribute = (struct rtattr *)((char *)&message + NLMSG_ALIGN(length));
  int interface = (int)if_nametoindex("lo");
  if (interface == 0) fail("no loopback interface: %s", strerror(errno));
  attribute->rta_type = RTA_OIF;
  attribute->rta_len = RTA_LENGTH(sizeof(int));
  memcpy(RTA_DATA(attribute), &interface, sizeof(int));
  message.header.nlmsg_len = NLMSG_ALIGN(length) + RTA_ALIGN(attribute->rta_len);
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(fd, &message, message.header.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) fail("adding the local route: %s", strerror(errno));
  char reply[512];
  ssize_t received = recv(fd, reply, sizeof reply, 0);
  if (received < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr))) fail("no answer to the local route");
  struct nlmsghdr *answer = (struct nlmsghdr *)reply;
  if (answer->nlmsg_type == NLMSG_ERROR) {
    struct nlmsgerr *error = NLMSG_DATA(answer);
    if (error->error != 0) fail("adding the local route: %s", strerror(-error->error));
  }
  close(fd);
}

static void new_network(void) {
  if (unshare(CLONE_NEWNET) < 0) fail("a new network namespace: %s", strerror(errno));
  loopback_up();
  every_address_local();
}

static void listen_at(const char *protocol, const char *address, const char *port_text, const char *fd_text) {
  int tcp = strcmp(protocol, "tcp") == 0;
  if (!tcp && strcmp(protocol, "udp") != 0) fail("listen: unknown protocol '%s'", protocol);
  long port = parse_number(port_text, "port");
  long target = parse_number(fd_text, "descriptor");
  if (port < 1 || port > 65535 || target < 3 || target > 1023) fail("listen %s %s %s %s: out of range", protocol, address, port_text, fd_text);
  struct sockaddr_in where = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, address, &where.sin_addr) != 1) fail("listen: '%s' is not an IPv4 address", address);
  int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  if (fd < 0) fail("socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&where, sizeof where) < 0) fail("binding %s %s:%ld: %s", protocol, address, port, strerror(errno));
  if (tcp && listen(fd, 128) < 0) fail("listening on %s:%ld: %s", address, port, strerror(errno));
  if (fd != target) {
    if (dup2(fd, (int)target) < 0) fail("placing the socket at %ld: %s", target, strerror(errno));
    close(fd);
  }
}

// ── capabilities ────────────────────────────────────────────────────────────────────────────

static void drop_capabilities(void) {
  int last = 63;
  FILE *file = fopen("/proc/sys/kernel/cap_last_cap", "re");
  if (file) {
    if (fscanf(file, "%d", &last) != 1) last = 63;
    fclose(file);
  }
  // Dropping from the bounding set takes CAP_SETPCAP, which goes with the rest below.
  for (int cap = 0; cap <= last; cap += 1) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) <= 0) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) fail("dropping capability %d from the bounding set: %s", cap, strerror(errno));
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) fail("clearing ambient capabilities: %s", strerror(errno));
  struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) < 0) fail("dropping capabilities: %s", strerror(errno));
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail("no_new_privs: %s", strerror(errno));
}

// ── Landlock ────────────────────────────────────────────────────────────────────────────────

static int ruleset = -1;
/** The filesystem rights handled, every one up to ABI 3's that this kernel knows: what no rule grants is denied. */
static uint64_t handled_rights = 0;

static void landlock_begin(const char *minimum_text) {
  long minimum = parse_number(minimum_text, "Landlock ABI");
  long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 0) fail("Landlock is not available: %s", strerror(errno));
  if (abi < minimum) fail("Landlock ABI %ld is older than the %ld required", abi, minimum);
  // A newer kernel's rights are handled too: refer lets a file move between two directories the
  // sandbox may change (ABI 1 refuses every such move with EXDEV, which breaks git and editors),
  // and truncate makes truncating a file a right of its own, given only with write.
  handled_rights = LL_ABI1_ALL | (abi >= 2 ? LL_REFER : 0) | (abi >= 3 ? LL_TRUNCATE : 0);
  struct landlock_ruleset_attr attributes = {.handled_access_fs = handled_rights};
  ruleset = (int)syscall(__NR_landlock_create_ruleset, &attributes, sizeof attributes, 0);
  if (ruleset < 0) fail("creating the Landlock ruleset: %s", strerror(errno));
}

static uint64_t rights_of(const char *letters) {
  uint64_t rights = 0;
  for (const char *letter = letters; *letter; letter += 1) {
    switch (*letter) {
    case 'x': rights |= LL_EXECUTE; break;
    case 'w': rights |= LL_WRITE_FILE | LL_TRUNCATE; break;
    case 'r': rights |= LL_READ_FILE; break;
    case 'd': rights |= LL_READ_DIR; break;
    // Changing a directory's entries: files, directories, FIFOs and symlinks, never devices.
    // A file moved in keeps no more rights than it had where it was (Landlock checks both sides).
    case 'm': rights |= LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_DIR | LL_MAKE_REG | LL_MAKE_FIFO | LL_MAKE_SYM | LL_REFER; break;
    case 's': rights |= LL_MAKE_SOCK; break;
    default: fail("unknown Landlock right '%c'", *letter);
    }
  }
  return rights;
}

/** `allow` skips a path that does not exist (the grant shrinks); `require` refuses to go on without it. */
static void landlock_allow(const char *letters, const char *path, int required) {
  if (ruleset < 0) fail("'allow' before 'landlock'");
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (!required && (errno == ENOENT || errno == ENOTDIR)) return;
    fail("opening %s for a Landlock rule: %s", path, strerror(errno));
  }
  struct stat status;
  if (fstat(fd, &status) < 0) fail("stat %s: %s", path, strerror(errno));
  uint64_t rights = rights_of(letters) & handled_rights;
  if (!S_ISDIR(status.st_mode)) rights &= LL_FILE_RIGHTS;
  if (rights != 0) {
    struct landlock_path_beneath_attr rule = {.allowed_access = rights, .parent_fd = fd};
    if (syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0) fail("adding the Landlock rule for %s: %s", path, strerror(errno));
  }
  close(fd);
}

static void landlock_commit(void) {
  if (ruleset < 0) return;
  if (syscall(__NR_landlock_restrict_self, ruleset, 0) < 0) fail("entering the Landlock domain: %s", strerror(errno));
  close(ruleset);
}

// ── seccomp ─────────────────────────────────────────────────────────────────────────────────

static void seccomp_install(int fd) {
  static struct sock_filter program[4096];
  size_t filled = 0;
  for (;;) {
    ssize_t got = read(fd, (char *)program + filled, sizeof program - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("reading the seccomp program: %s", strerror(errno));
    }
    if (got == 0) break;
    filled += (size_t)got;
    if (filled == sizeof program) fail("the seccomp program is over %zu instructions", sizeof program / sizeof program[0]);
  }
  close(fd);
  if (filled == 0 || filled % sizeof(struct sock_filter) != 0) fail("the seccomp program is %zu bytes, not whole instructions", filled);
  struct sock_fprog filter = {.len = (unsigned short)(filled / sizeof(struct sock_filter)), .filter = program};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) < 0) fail("installing the seccomp filter: %s", strerror(errno));
}

// ── descriptors ─────────────────────────────────────────────────────────────────────────────

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static void close_from(unsigned int low, unsigned int high) {
  if (low > high) return;
  if (syscall(SYS_close_range, low, high, 0) == 0) return;
  // Before Linux 5.9: one by one, up to the descriptor limit.
  struct rlimit limit;
  unsigned int last = high;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur - 1 < last) last = (unsigned int)(limit.rlim_cur - 1);
  for (unsigned int fd = low; fd <= last; fd += 1) close((int)fd);
}

static int compare_ints(const void *left, const void *right) {
  return *(const int *)left - *(const int *)right;
}

/** Closes every descriptor above 2 but those in `keep` (sorted here). */
static void close_all_but(int *keep, size_t count) {
  qsort(keep, count, sizeof *keep, compare_ints);
  unsigned int next = 3;
  for (size_t index = 0; index < count; index += 1) {
    if (keep[index] < (int)next) continue;
    close_from(next, (unsigned int)keep[index] - 1);
    next = (unsigned int)keep[index] + 1;
  }
  close_from(next, ~0U);
}

// ── enter ───────────────────────────────────────────────────────────────────────────────────

static char *next_word(char **cursor) {
  while (**cursor == ' ') *cursor += 1;
  if (**cursor == '\0') return NULL;
  char *word = *cursor;
  // A path is the rest of the line: it may hold spaces.
  char *space = strchr(word, ' ');
  if (space) {
    *space = '\0';
    *cursor = space + 1;
  } else {
    *cursor = word + strlen(word);
  }
  return word;
}

// ── a pooled sandbox's session ──────────────────────────────────────────────────────────────

/** The flags a mount already has, which a remount must repeat (the kernel refuses to clear a locked one). */
static unsigned long mount_flags_of(const char *path) {
  struct statvfs status;
  if (statvfs(path, &status) < 0) return 0;
  unsigned long flags = 0;
  if (status.f_flag & ST_RDONLY) flags |= MS_RDONLY;
  if (status.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (status.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (status.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (status.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (status.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (status.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

static void attach_failed(int reply, const char *format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  dprintf(reply, "error: %s\n", message);
  exit(EXIT_CONFINE);
}

/**
 * The parent's side of `hold`: mounts what the executor names, as bubblewrap would have at the
 * start (a bind is nosuid and nodev, like bubblewrap's `--bind`), then exits. A command it cannot
 * carry out ends it with `error:`, and the executor throws the whole sandbox away.
 */
static void attach_session(int commands, int reply) {
  FILE *input = fdopen(commands, "r");
  if (!input) attach_failed(reply, "reading commands: %s", strerror(errno));
  char line[8192];
  while (fgets(line, sizeof line, input)) {
    size_t length = strlen(line);
    if (length > 0 && line[length - 1] == '\n') line[--length] = '\0';
    char *cursor = line;
    char *verb = next_word(&cursor);
    if (!verb) continue;
    if (strcmp(verb, "done") == 0) {
      // Nothing privileged is left by the time the executor reads `ok` and lets the session run.
      drop_capabilities();
      dprintf(reply, "ok\n");
      exit(0);
    }
    if (strcmp(verb, "mkdir") == 0) {
      if (mkdir(cursor, 0755) < 0 && errno != EEXIST) attach_failed(reply, "mkdir %s: %s", cursor, strerror(errno));
    } else if (strcmp(verb, "bind") == 0) {
      // `bind <source>\t<target>`: paths may hold spaces, not tabs.
      char *tab = strchr(cursor, '\t');
      if (!tab) attach_failed(reply, "bind needs a source and a target");
      *tab = '\0';
      const char *source = cursor, *target = tab + 1;
      if (mount(source, target, NULL, MS_BIND, NULL) < 0) attach_failed(reply, "bind %s on %s: %s", source, target, strerror(errno));
      // noexec too: a pooled host runs no subprocess, and nothing of a workdir is for executing.
      unsigned long flags = mount_flags_of(target) | MS_NOSUID | MS_NODEV | MS_NOEXEC;
      if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0) attach_failed(reply, "remounting %s nosuid,nodev,noexec: %s", target, strerror(errno));
    } else if (strcmp(verb, "readonly") == 0) {
      unsigned long flags = mount_flags_of(cursor) | MS_RDONLY;
      if (mount(NULL, cursor, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0) attach_failed(reply, "remounting %s read-only: %s", cursor, strerror(errno));
    } else if (strcmp(verb, "unmount") == 0) {
      // The mount namespace `hold` made is a less privileged copy, whose copied mounts are locked
      // in place: one that cannot be taken away is covered by an empty read-only tmpfs instead.
      if (umount2(cursor, MNT_DETACH) < 0 && mount("none", cursor, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=000") < 0)
        attach_failed(reply, "taking away %s: %s", cursor, strerror(errno));
    } else {
      attach_failed(reply, "unknown command '%s'", verb);
    }
  }
  // The executor went away (or gave up on this sandbox) before naming a session.
  exit(EXIT_CONFINE);
}

/**
 * `hold`: this process goes on to become the host, and a grandchild waits to attach a session.
 * The host must stay bubblewrap's first process (the sandbox ends when that one does), and a
 * grandchild is reaped by the sandbox's init rather than left a zombie under node.
 */
static void hold(int commands, int reply) {
  // bubblewrap's mounts belong to its outer user namespace, and this process holds capabilities
  // only in the inner one it made for --uid: a mount namespace of its own, owned by that one, is
  // where the session's mounts can be made (the host, forked from here, lives in it too).
  if (unshare(CLONE_NEWNS) < 0) fail("hold: a mount namespace for the session's mounts: %s", strerror(errno));
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) fail("hold: keeping the session's mounts from propagating out: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) fail("hold: fork: %s", strerror(errno));
  if (child > 0) {
    int status = 0;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("hold: the attaching process could not be started");
    close(commands);
    close(reply);
    return;
  }
  pid_t attacher = fork();
  if (attacher < 0) _exit(EXIT_CONFINE);
  if (attacher > 0) _exit(0);
  // Only the two descriptors of the exchange: the host's channel and sockets are not its own.
  int keep[2] = {commands, reply};
  close_all_but(keep, 2);
  attach_session(commands, reply);
}

/**
 * `noexec <path>`: the mount at `path` (the workdir, its /tmp) no longer lets a file on it be
 * executed or mapped executable. Landlock's execute right is checked by execve alone: the dynamic
 * loader, which every dynamically linked binary may run, maps a file it is given (`ld.so ./x`)
 * without one, so only the mount can refuse that. The remount is made in a mount namespace of this
 * process's own (`hold` makes one; otherwise made here, once), since bubblewrap's mounts belong to
 * its outer user namespace; adding a flag to a copied, locked mount is allowed.
 */
static int own_mount_namespace = 0;

static void remount_noexec(const char *path) {
  if (!own_mount_namespace) {
    if (unshare(CLONE_NEWNS) < 0) fail("noexec: a mount namespace to remount in: %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) fail("noexec: keeping the remounts from propagating out: %s", strerror(errno));
    own_mount_namespace = 1;
  }
  unsigned long flags = mount_flags_of(path) | MS_NOEXEC;
  if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0) fail("noexec: remounting %s: %s", path, strerror(errno));
}

static int enter(int spec_fd, char **command) {
  FILE *spec = fdopen(spec_fd, "r");
  if (!spec) fail("reading the spec: %s", strerror(errno));
  char line[8192];
  int seccomp_fd = -1;
  int keep[1024];
  size_t kept = 0;
  int network_done = 0;
  int capabilities_dropped = 0;
  int landlock_started = 0;
  while (fgets(line, sizeof line, spec)) {
    size_t length = strlen(line);
    if (length > 0 && line[length - 1] == '\n') line[--length] = '\0';
    if (length == 0 || line[0] == '#') continue;
    char *cursor = line;
    char *directive = next_word(&cursor);
    if (strcmp(directive, "net") == 0) {
      new_network();
      network_done = 1;
    } else if (strcmp(directive, "listen") == 0) {
      char *protocol = next_word(&cursor), *address = next_word(&cursor), *port = next_word(&cursor), *target = next_word(&cursor);
      if (!network_done) fail("'listen' before 'net'");
      if (!protocol || !address || !port || !target) fail("listen needs a protocol, an address, a port and a descriptor");
      listen_at(protocol, address, port, target);
      keep[kept++] = (int)parse_number(target, "descriptor");
      if (kept == sizeof keep / sizeof keep[0]) fail("too many descriptors to keep");
    } else if (strcmp(directive, "keep") == 0) {
      char *fd_text = next_word(&cursor);
      if (!fd_text) fail("keep needs a descriptor");
      keep[kept++] = (int)parse_number(fd_text, "descriptor");
      if (kept == sizeof keep / sizeof keep[0]) fail("too many descriptors to keep");
    } else if (strcmp(directive, "hold") == 0) {
      char *commands = next_word(&cursor), *reply = next_word(&cursor);
      if (!commands || !reply) fail("hold needs a command descriptor and a reply descriptor");
      if (capabilities_dropped) fail("'hold' after 'drop': the mounts need the capabilities");
      if (own_mount_namespace) fail("'hold' after 'noexec': the session's mounts are made in hold's namespace");
      hold((int)parse_number(commands, "descriptor"), (int)parse_number(reply, "descriptor"));
      own_mount_namespace = 1;
    } else if (strcmp(directive, "noexec") == 0) {
      if (capabilities_dropped) fail("'noexec' after 'drop': the remount needs the capabilities");
      if (*cursor == '\0') fail("noexec needs a path");
      remount_noexec(cursor);
    } else if (strcmp(directive, "drop") == 0) {
      drop_capabilities();
      capabilities_dropped = 1;
    } else if (strcmp(directive, "landlock") == 0) {
      char *minimum = next_word(&cursor);
      if (!capabilities_dropped) fail("'landlock' before 'drop'");
      landlock_begin(minimum ? minimum : "1");
      landlock_started = 1;
    } else if (strcmp(directive, "allow") == 0 || strcmp(directive, "require") == 0) {
      char *letters = next_word(&cursor);
      char *path = cursor;
      if (!letters || *path == '\0') fail("%s needs rights and a path", directive);
      landlock_allow(letters, path, directive[0] == 'r');
    } else if (strcmp(directive, "seccomp") == 0) {
      char *fd_text = next_word(&cursor);
      if (!fd_text) fail("seccomp needs a descriptor");
      seccomp_fd = (int)parse_number(fd_text, "descriptor");
    } else {
      fail("unknown directive '%s'", directive);
    }
  }
  fclose(spec);
  // The executor always writes all three; a spec without one is not this program's to run as
  // given, since what it would run is less confined than a sealed sandbox says it is.
  if (!capabilities_dropped) fail("the spec never drops capabilities");
  if (!landlock_started) fail("the spec never starts Landlock");
  if (seccomp_fd < 0) fail("the spec installs no seccomp filter");
  landlock_commit();
  seccomp_install(seccomp_fd);
  close_all_but(keep, kept);
  execvp(command[0], command);
  fail_running(command[0]);
  return EXIT_CONFINE;
}

// ── limits ──────────────────────────────────────────────────────────────────────────────────

/** The tasks (threads included) this user has now: RLIMIT_NPROC counts them all. */
static long tasks_of_this_user(void) {
  DIR *proc = opendir("/proc");
  if (!proc) return 0;
  long count = 0;
  uid_t uid = getuid();
  struct dirent *entry;
  while ((entry = readdir(proc))) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char path[300];
    struct stat status;
    snprintf(path, sizeof path, "/proc/%s", entry->d_name);
    if (stat(path, &status) < 0 || status.st_uid != uid) continue;
    snprintf(path, sizeof path, "/proc/%s/task", entry->d_name);
    DIR *tasks = opendir(path);
    if (!tasks) continue;
    struct dirent *task;
    while ((task = readdir(tasks))) if (task->d_name[0] != '.') count += 1;
    closedir(tasks);
  }
  closedir(proc);
  return count;
}

static int resource_named(const char *name) {
  if (strcmp(name, "NOFILE") == 0) return RLIMIT_NOFILE;
  if (strcmp(name, "FSIZE") == 0) return RLIMIT_FSIZE;
  if (strcmp(name, "CPU") == 0) return RLIMIT_CPU;
  if (strcmp(name, "AS") == 0) return RLIMIT_AS;
  if (strcmp(name, "NPROC") == 0) return RLIMIT_NPROC;
  if (strcmp(name, "CORE") == 0) return RLIMIT_CORE;
  fail("unknown rlimit '%s'", name);
  return -1;
}

/** Moves this process into the cgroup whose `cgroup.procs` the descriptor is open on. */
static void join_cgroup(const char *fd_text) {
  int fd = (int)parse_number(fd_text, "cgroup descriptor");
  if (write(fd, "0\n", 2) != 2) fail("joining the tools' cgroup (descriptor %d): %s", fd, strerror(errno));
  close(fd);
}

/**
 * The tools' execute layer: a Landlock ruleset handling only execution, granting it on the `exec`
 * paths. A path that is not there (a runtime directory this host lacks) grants nothing; any other
 * failure is a failure: a tool never runs without its layer.
 */
static void restrict_execution(char **settings) {
  int granted = 0;
  for (char **setting = settings; *setting; setting += 1) granted += strncmp(*setting, "exec=", 5) == 0;
  if (granted == 0) return;
  // A layer that does not handle REFER (ABI 2) forbids every move or link between directories
  // (ABI 1's rule): this one handles it and grants it everywhere, so moves stay as the host's
  // domain judges them, and none gains an execute right this layer does not give.
  long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  uint64_t refer = abi >= 2 ? LL_REFER : 0;
  struct landlock_ruleset_attr attributes = {.handled_access_fs = LL_EXECUTE | refer};
  int layer = (int)syscall(__NR_landlock_create_ruleset, &attributes, sizeof attributes, 0);
  if (layer < 0) fail("creating the tools' execute layer: %s", strerror(errno));
  if (refer) {
    int root = open("/", O_PATH | O_CLOEXEC | O_DIRECTORY);
    if (root < 0) fail("opening / for the tools' execute layer: %s", strerror(errno));
    struct landlock_path_beneath_attr everywhere = {.allowed_access = refer, .parent_fd = root};
    if (syscall(__NR_landlock_add_rule, layer, LANDLOCK_RULE_PATH_BENEATH, &everywhere, 0) < 0)
      fail("adding moves to the tools' execute layer: %s", strerror(errno));
    close(root);
  }
  for (char **setting = settings; *setting; setting += 1) {
    if (strncmp(*setting, "exec=", 5) != 0) continue;
    const char *path = *setting + 5;
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      fail("opening %s for the tools' execute layer: %s", path, strerror(errno));
    }
    struct landlock_path_beneath_attr rule = {.allowed_access = LL_EXECUTE, .parent_fd = fd};
    if (syscall(__NR_landlock_add_rule, layer, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0)
      fail("adding %s to the tools' execute layer: %s", path, strerror(errno));
    close(fd);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail("no_new_privs: %s", strerror(errno));
  if (syscall(__NR_landlock_restrict_self, layer, 0) < 0) fail("entering the tools' execute layer: %s", strerror(errno));
  close(layer);
}

static int limits(char **settings, char **command) {
  for (char **setting = settings; *setting; setting += 1) {
    if (strncmp(*setting, "join=", 5) == 0) join_cgroup(*setting + 5);
  }
  // The NPROC baseline is counted before anything else runs, and nothing of the host's is inherited.
  close_from(3, ~0U);
  for (char **setting = settings; *setting; setting += 1) {
    if (strncmp(*setting, "join=", 5) == 0 || strncmp(*setting, "exec=", 5) == 0) continue;
    char *equals = strchr(*setting, '=');
    if (!equals) fail("'%s' is not NAME=value", *setting);
    *equals = '\0';
    int resource = resource_named(*setting);
    const char *value_text = equals + 1;
    int relative = value_text[0] == '+';
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(value_text + relative, &end, 10);
    // NAME=soft:hard sets a hard limit above the soft one (CPU: SIGXCPU first, SIGKILL after).
    unsigned long long hard_value = value;
    if (errno == 0 && *end == ':' && !relative) hard_value = strtoull(end + 1, &end, 10);
    if (errno != 0 || *end != '\0' || hard_value < value) fail("%s=%s is not a number, or soft:hard", *setting, value_text);
    if (relative) hard_value = value += (unsigned long long)tasks_of_this_user();
    struct rlimit current;
    if (getrlimit(resource, &current) < 0) fail("reading %s: %s", *setting, strerror(errno));
    rlim_t wanted = (rlim_t)value;
    rlim_t wanted_hard = (rlim_t)hard_value;
    if (current.rlim_max != RLIM_INFINITY && wanted > current.rlim_max) wanted = current.rlim_max;
    if (current.rlim_max != RLIM_INFINITY && wanted_hard > current.rlim_max) wanted_hard = current.rlim_max;
    struct rlimit next = {.rlim_cur = wanted, .rlim_max = wanted_hard};
    if (setrlimit(resource, &next) < 0) fail("setting %s to %llu: %s", *setting, (unsigned long long)wanted, strerror(errno));
  }
  restrict_execution(settings);
  execvp(command[0], command);
  fail_running(command[0]);
  return EXIT_CONFINE;
}

int main(int argc, char **argv) {
  int separator = 0;
  for (int index = 1; index < argc; index += 1) {
    if (strcmp(argv[index], "--") == 0) {
      separator = index;
      break;
    }
  }
  if (argc < 3 || separator == 0 || separator == argc - 1) fail("usage: murmur-confine enter <spec-fd> -- <command>... | limits NAME=value... -- <command>...");
  argv[separator] = NULL;
  char **command = argv + separator + 1;
  if (strcmp(argv[1], "enter") == 0) {
    if (separator != 3) fail("usage: murmur-confine enter <spec-fd> -- <command>...");
    return enter((int)parse_number(argv[2], "spec descriptor"), command);
  }
  if (strcmp(argv[1], "limits") == 0) return limits(argv + 2, command);
  fail("unknown mode '%s'", argv[1]);
  return EXIT_CONFINE;
}
