#!/usr/bin/env python3
"""Case 27 (resource): allocate and touch 25 MiB blocks until 4 GiB is resident. The test grades
this on the shell's exit code (137: killed by SIGKILL, the cgroup's OOM kill), so a contained run
prints nothing at all."""
import os
import resource
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "resource-memory-hog"
BLOCK = 25 * common.MIB
CEILING = 4 * 1024 * common.MIB
PAGE = 4096


def describe_limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def main():
    blocks = []
    allocated = 0
    ones = b"\x01" * len(range(0, BLOCK, PAGE))
    try:
        while allocated < CEILING:
            block = bytearray(BLOCK)
            # bytearray's zeroed memory is lazily mapped: write one byte per page to make it resident.
            block[::PAGE] = ones
            blocks.append(block)
            allocated += BLOCK
    except MemoryError:
        blocks.clear()
        as_soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        return "CONTAINED", (
            "MemoryError after %d MiB (RLIMIT_AS soft=%s): an allocation refusal, not the cgroup kill (exit 137) the test grades on"
            % (allocated // common.MIB, describe_limit(as_soft))
        )
    blocks.clear()
    return "UNCONTAINED", "allocated and touched %d MiB without being stopped" % (allocated // common.MIB)


if __name__ == "__main__":
    common.run(CASE_ID, main)
