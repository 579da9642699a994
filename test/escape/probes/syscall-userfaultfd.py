#!/usr/bin/env python3
"""Case 19: userfaultfd(0); a descriptor it returns is closed at once."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-userfaultfd"


def main():
    context = "vm.unprivileged_userfaultfd=%s (0 means the host policy alone also answers EPERM to non-root), euid=%d" % (common.read_sysctl("/proc/sys/vm/unprivileged_userfaultfd"), os.geteuid())
    return common.syscall_probe("userfaultfd", (0,), returns_fd=True, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
