#!/usr/bin/env python3
"""Case 21: open_by_handle_at(AT_FDCWD, NULL, 0). A permitted call would fail with EFAULT."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-open-by-handle-at"


def main():
    context = "euid=%d (for non-root, EPERM may be the missing CAP_DAC_READ_SEARCH alone)" % os.geteuid()
    return common.syscall_probe("open_by_handle_at", (-100, 0, 0), returns_fd=True, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
