#!/usr/bin/env python3
"""Case 20: bpf(BPF_MAP_CREATE, NULL, 0). A permitted call would fail with EFAULT or EINVAL."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-bpf"


def main():
    context = "euid=%d (for non-root, EPERM may be the missing CAP_BPF alone); kernel.unprivileged_bpf_disabled=%s" % (os.geteuid(), common.read_sysctl("/proc/sys/kernel/unprivileged_bpf_disabled"))
    return common.syscall_probe("bpf", (0, 0, 0), returns_fd=True, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
