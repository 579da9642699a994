#!/usr/bin/env python3
"""Case 2: create and write a new file in /tmp, outside the workdir's own path."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "write-outside-workdir"


def main():
    target = "/tmp/murmur-escape-conformance-%d" % os.getpid()
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return "REFUSED", "open(%s, O_WRONLY|O_CREAT|O_EXCL) failed with %s" % (target, common.describe_oserror(exc))
    try:
        try:
            written = os.write(fd, b"escaped\n")
        except OSError as exc:
            return "REFUSED", "created %s but write failed with %s" % (target, common.describe_oserror(exc))
        finally:
            os.close(fd)
    finally:
        common.remove_quietly(target)
    return "ALLOWED", "created %s and wrote %d bytes (removed afterwards)" % (target, written)


if __name__ == "__main__":
    common.run(CASE_ID, main)
