#!/usr/bin/env python3
"""preflight: python3 starts inside the capsule; reports its euid and cwd."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "preflight"


def main():
    return "SUCCESS", "python %s on %s, euid=%d, cwd=%s" % (
        sys.version.split()[0],
        common.arch() or os.uname().machine,
        os.geteuid(),
        os.getcwd(),
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
