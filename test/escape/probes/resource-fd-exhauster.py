#!/usr/bin/env python3
"""Case 28 (resource): open this probe's own file up to 4096 times and see where EMFILE stops it."""
import os
import resource
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "resource-fd-exhauster"
ATTEMPTS = 4096
CONTAINED_BELOW = 512


def describe_limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def main():
    ceiling, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = os.path.abspath(__file__)
    opened = []
    refusal = None
    try:
        for _ in range(ATTEMPTS):
            try:
                opened.append(os.open(target, os.O_RDONLY))
            except OSError as exc:
                refusal = exc
                break
    finally:
        for fd in opened:
            try:
                os.close(fd)
            except OSError:
                pass
    count = len(opened)
    limits = "RLIMIT_NOFILE soft=%s" % describe_limit(ceiling)
    if refusal is None:
        return "UNCONTAINED", "all %d opens succeeded (%s)" % (count, limits)
    refused = "open() refused with %s after %d descriptors (%s)" % (common.describe_oserror(refusal), count, limits)
    finite = ceiling != resource.RLIM_INFINITY
    if finite and count <= ceiling and ceiling < CONTAINED_BELOW:
        return "CONTAINED", refused
    return "UNCONTAINED", "%s: the ceiling is not below %d" % (refused, CONTAINED_BELOW)


if __name__ == "__main__":
    common.run(CASE_ID, main)
