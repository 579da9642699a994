#!/usr/bin/env python3
"""Case 22: perf_event_open(NULL, 0, -1, -1, 0). A permitted call would fail with EFAULT."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-perf-event-open"


def main():
    context = "kernel.perf_event_paranoid=%s, euid=%d" % (common.read_sysctl("/proc/sys/kernel/perf_event_paranoid"), os.geteuid())
    return common.syscall_probe("perf_event_open", (0, 0, -1, -1, 0), returns_fd=True, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
