#!/usr/bin/env python3
"""Case 9: reopen a read-only /dev/urandom descriptor through /proc/self/fd/<n> for writing."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "proc-self-fd-reopen"


def main():
    try:
        fd = os.open("/dev/urandom", os.O_RDONLY)
    except OSError as exc:
        return "INCONCLUSIVE", "could not open /dev/urandom read-only to start with: %s" % common.describe_oserror(exc)
    try:
        alias = "/proc/self/fd/%d" % fd
        same_mode = common.open_outcome(alias, os.O_RDONLY)
        try:
            upgraded = os.open(alias, os.O_RDWR)
        except OSError as exc:
            return "REFUSED", "open(%s, O_RDWR) failed with %s; same-mode O_RDONLY reopen: %s" % (
                alias,
                common.describe_oserror(exc),
                same_mode,
            )
        os.close(upgraded)
        return "ALLOWED", "open(%s, O_RDWR) succeeded: the read-only grant was upgraded to read-write; same-mode reopen: %s" % (
            alias,
            same_mode,
        )
    finally:
        os.close(fd)


if __name__ == "__main__":
    common.run(CASE_ID, main)
