#!/usr/bin/env python3
"""Case 4: plant ./ec-symlink -> /etc/passwd in the workdir and open through it."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "symlink-escape"
LINK = "./ec-symlink"
TARGET = "/etc/passwd"


def main():
    created = False
    try:
        os.symlink(TARGET, LINK)
        created = True
    except FileExistsError:
        try:
            existing = os.readlink(LINK)
        except OSError as exc:
            return "INCONCLUSIVE", "%s exists and is not a readable symlink (%s)" % (LINK, common.describe_oserror(exc))
        if existing != TARGET:
            return "INCONCLUSIVE", "%s already exists pointing at %r, not %s" % (LINK, existing, TARGET)
    except OSError as exc:
        return "INCONCLUSIVE", "symlink(%s, %s) failed with %s: the probe could not plant the link" % (
            TARGET,
            LINK,
            common.describe_oserror(exc),
        )
    try:
        try:
            fd = os.open(LINK, os.O_RDONLY)
        except OSError as exc:
            return "REFUSED", "open(%s -> %s) failed with %s" % (LINK, TARGET, common.describe_oserror(exc))
        try:
            data = os.read(fd, 64)
        finally:
            os.close(fd)
        return "ALLOWED", "open(%s -> %s) succeeded and read %d bytes" % (LINK, TARGET, len(data))
    finally:
        if created:
            common.remove_quietly(LINK)


if __name__ == "__main__":
    common.run(CASE_ID, main)
