#!/usr/bin/env python3
"""Case 10: look for descriptors 7 and 20, which the runtime's launcher held open without
close-on-exec, and read from them if they survived into the capsule."""
import fcntl
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "inherited-fd-after-exec"
PLANTED = (7, 20)
LISTED = 32


def describe_fd(fd):
    try:
        st = os.fstat(fd)
    except OSError as exc:
        return "fstat %s" % common.describe_oserror(exc)
    return "ino=%d size=%d" % (st.st_ino, st.st_size)


def main():
    limit = os.sysconf("SC_OPEN_MAX")
    top = 4096 if limit is None or limit <= 0 else min(limit, 4096)
    found = []
    # fcntl(F_GETFD) on each number, never /proc/self/fd: the probe must not depend on /proc.
    for fd in range(3, top):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        found.append(fd)
    listing = ", ".join(str(fd) for fd in found[:LISTED])
    if len(found) > LISTED:
        listing += ", ... (%d in all)" % len(found)
    context = "open fds in 3..%d: [%s]" % (top - 1, listing)

    present = [fd for fd in PLANTED if fd in found]
    if not present:
        return "REFUSED", "neither fd 7 nor fd 20 is open; %s" % context
    readable = []
    unreadable = []
    for fd in present:
        try:
            data = os.pread(fd, 64, 0)
        except OSError as exc:
            unreadable.append("fd %d (%s) pread failed with %s" % (fd, describe_fd(fd), common.describe_oserror(exc)))
            continue
        readable.append("fd %d (%s) read %d bytes starting %r" % (fd, describe_fd(fd), len(data), data[:24]))
    if readable:
        return "ALLOWED", "inherited descriptor readable: %s; %s" % ("; ".join(readable + unreadable), context)
    return "INCONCLUSIVE", "planted descriptor number(s) open but not readable as a file: %s; %s" % (
        "; ".join(unreadable),
        context,
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
