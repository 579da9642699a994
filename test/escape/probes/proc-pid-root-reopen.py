#!/usr/bin/env python3
"""Case 8: open etc/passwd through the /proc/<pid>/root alias of the process's root."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "proc-pid-root-reopen"


def main():
    control = common.open_outcome("/proc/self/status")
    path = "/proc/%d/root/etc/passwd" % os.getpid()
    context = "control open(/proc/self/status): %s" % control
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return "REFUSED", "open(%s) failed with %s; %s" % (path, common.describe_oserror(exc), context)
    try:
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    return "ALLOWED", "open(%s) succeeded and read %d bytes; %s" % (path, len(data), context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
