#!/usr/bin/env python3
"""Case 18: io_uring_setup(1, NULL). A permitted call would fail with EFAULT on the NULL params."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-io-uring-setup"


def main():
    context = "kernel.io_uring_disabled=%s" % common.read_sysctl("/proc/sys/kernel/io_uring_disabled")
    return common.syscall_probe("io_uring_setup", (1, 0), returns_fd=True, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
