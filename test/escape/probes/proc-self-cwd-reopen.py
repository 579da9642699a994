#!/usr/bin/env python3
"""Case 7: walk out of the workdir through the /proc/self/cwd magic link to etc/passwd."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "proc-self-cwd-reopen"


def main():
    control = common.open_outcome("/proc/self/status")
    cwd_reopen = common.open_outcome("/proc/self/cwd", os.O_RDONLY | os.O_DIRECTORY)
    # One ".." per path component of the cwd, plus one, always reaches "/" whatever the depth.
    ups = os.getcwd().count("/") + 1
    path = "/proc/self/cwd/" + "../" * ups + "etc/passwd"
    context = "control open(/proc/self/status): %s; reopen /proc/self/cwd O_DIRECTORY: %s; %d '..' steps" % (
        control,
        cwd_reopen,
        ups,
    )
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return "REFUSED", "open(/proc/self/cwd/../.../etc/passwd) failed with %s; %s" % (common.describe_oserror(exc), context)
    try:
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    return "ALLOWED", "open(/proc/self/cwd/../.../etc/passwd) succeeded and read %d bytes; %s" % (len(data), context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
