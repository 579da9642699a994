#!/bin/sh
# Entry point of the executor container (docker-compose.yml). It starts as root with
# CAP_SYS_ADMIN, which it needs for exactly two things, and then runs the command as uid/gid 1000
# with no capabilities at all (empty bounding set, no_new_privs): nothing the executor or a
# sandbox runs can ever use SYS_ADMIN.
#
#   1. Session cgroups. Docker mounts this container's own cgroup read-only at
#      /sys/fs/cgroup/<controller>. A read-write bind remount of the memory, pids and cpu
#      hierarchies lets us create /sys/fs/cgroup/{memory,pids,cpu}/$MURMUR_CGROUP_PARENT, owned by
#      1000:1000, where the executor creates each session's groups (nested under the container's
#      own limits): memory and pids for the whole session, and the tools' memory, pids and CPU
#      quota (capabilities.resources.cgroup_*).
#      cgroup v1 only; elsewhere we warn and the executor runs without cgroups, which means it
#      refuses capsules that can start subprocesses (E-RUN-012).
#   2. A fresh /proc in each sandbox. bubblewrap mounts a new procfs for the sandbox's pid
#      namespace, which the kernel refuses while Docker's masks (the bind and tmpfs mounts over
#      /proc/kcore, /proc/sys, /sys/firmware, ...) are mounted on the container's /proc. Docker's
#      `--security-opt systempaths=unconfined` would leave them out, but docker-compose v1 cannot
#      pass that option, so we unmount them here. The executor itself runs unprivileged, so what
#      they hid stays unreadable or unwritable to it by ordinary permissions.
#
# Run as any other user (e.g. `docker run --user 1000 ...`), it only runs the command.
set -eu

say() { printf 'executor-entrypoint: %s\n' "$*" >&2; }

# The executor refuses a MURMUR_CGROUP_PARENT where it cannot make groups (E-CFG-003): where this
# script did not set the parent up, the compose file's default is taken back, and the executor runs
# without cgroups as the warnings below say.
without_cgroups() {
  unset MURMUR_CGROUP_PARENT
}

if [ "$(id -u)" != 0 ]; then
  say "not root (uid $(id -u)): no cgroup delegation, /proc masks stay; running the command as is"
  # A parent set up beforehand (by whoever runs the container as this user) is kept.
  if [ -n "${MURMUR_CGROUP_PARENT:-}" ] && ! [ -w "/sys/fs/cgroup/memory/$MURMUR_CGROUP_PARENT" ]; then
    without_cgroups
  fi
  exec "$@"
fi

uid=1000
gid=1000
parent=${MURMUR_CGROUP_PARENT:-}

if [ -n "$parent" ]; then
  if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
    say "WARNING: this host uses cgroup v2; session cgroups are only set up on cgroup v1 here. The executor runs without cgroups and refuses capsules that can start subprocesses."
    without_cgroups
  else
    ok=yes
    for controller in memory pids cpu; do
      # cpu is usually mounted jointly with cpuacct, with /sys/fs/cgroup/cpu a symlink to it.
      dir=$(readlink -f "/sys/fs/cgroup/$controller")
      if ! mount -o remount,bind,rw "$dir" 2>/dev/null && ! [ -w "$dir" ]; then
        say "WARNING: cannot make $dir writable (does the container have CAP_SYS_ADMIN?)"
        ok=no
        break
      fi
      if ! mkdir -p "$dir/$parent" || ! chown -R "$uid:$gid" "$dir/$parent"; then
        say "WARNING: cannot create $dir/$parent for uid $uid"
        ok=no
        break
      fi
    done
    if [ "$ok" = yes ]; then
      say "session cgroups under /sys/fs/cgroup/{memory,pids,cpu}/$parent (owned by $uid:$gid)"
    else
      say "WARNING: the executor runs without cgroups and refuses capsules that can start subprocesses."
      without_cgroups
    fi
  fi
fi

# Docker's masked and read-only paths: every mount below /proc, and /sys/firmware. Deepest first.
masks=$(grep -E '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ (/proc/[^ ]+|/sys/firmware) ' /proc/self/mountinfo | cut -d' ' -f5 | sort -r)
failed=
for mountpoint in $masks; do
  umount "$mountpoint" 2>/dev/null || failed="$failed $mountpoint"
done
if [ -n "$failed" ]; then
  say "WARNING: could not unmount Docker's /proc masks:$failed. bubblewrap cannot mount a /proc for sandboxes, so launches will fail."
fi

exec setpriv --reuid "$uid" --regid "$gid" --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
