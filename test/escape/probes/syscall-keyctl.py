#!/usr/bin/env python3
"""Case 23: keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): harmless and unprivileged, so EPERM can only be the filter."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "syscall-keyctl"


def main():
    context = "euid=%d" % os.geteuid()
    return common.syscall_probe("keyctl", (0, -3, 0), returns_fd=False, context=context)


if __name__ == "__main__":
    common.run(CASE_ID, main)
