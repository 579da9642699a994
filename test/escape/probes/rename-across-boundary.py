#!/usr/bin/env python3
"""Case 6: create ./ec-rename-src in the workdir and rename it into /tmp."""
import errno
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "rename-across-boundary"
SOURCE = "./ec-rename-src"


def main():
    destination = "/tmp/murmur-escape-conformance-rename-%d" % os.getpid()
    try:
        with open(SOURCE, "wb") as handle:
            handle.write(b"rename me\n")
    except OSError as exc:
        return "INCONCLUSIVE", "could not create %s in the workdir: %s" % (SOURCE, common.describe_oserror(exc))
    try:
        try:
            os.rename(SOURCE, destination)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return "INCONCLUSIVE", "rename(%s, %s) failed with %s: separate mounts, so the boundary was never tested" % (
                    SOURCE,
                    destination,
                    common.describe_oserror(exc),
                )
            return "REFUSED", "rename(%s, %s) failed with %s" % (SOURCE, destination, common.describe_oserror(exc))
        return "ALLOWED", "rename(%s, %s) succeeded (moved file removed afterwards)" % (SOURCE, destination)
    finally:
        common.remove_quietly(SOURCE)
        common.remove_quietly(destination)


if __name__ == "__main__":
    common.run(CASE_ID, main)
