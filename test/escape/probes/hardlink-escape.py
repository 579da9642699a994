#!/usr/bin/env python3
"""Case 5: hard-link /etc/passwd into the workdir as ./ec-hardlink and read it."""
import errno
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "hardlink-escape"
LINK = "./ec-hardlink"
TARGET = "/etc/passwd"


def main():
    protected = common.read_sysctl("/proc/sys/fs/protected_hardlinks")
    context = "fs.protected_hardlinks=%s, euid=%d" % (protected, os.geteuid())
    if os.path.lexists(LINK):
        common.remove_quietly(LINK)
    try:
        os.link(TARGET, LINK)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return "INCONCLUSIVE", "link(%s, %s) failed with %s: different mounts, so the boundary was never tested (%s)" % (
                TARGET,
                LINK,
                common.describe_oserror(exc),
                context,
            )
        why = ""
        if exc.errno == errno.EPERM:
            why = " (EPERM may be the protected_hardlinks sysctl rather than the sandbox)"
        elif exc.errno == errno.EACCES:
            why = " (EACCES: the workdir grant refused the link)"
        return "REFUSED", "link(%s, %s) failed with %s%s; %s" % (TARGET, LINK, common.describe_oserror(exc), why, context)
    try:
        try:
            fd = os.open(LINK, os.O_RDONLY)
        except OSError as exc:
            return "REFUSED", "link(%s, %s) was created but opening it failed with %s; %s" % (
                TARGET,
                LINK,
                common.describe_oserror(exc),
                context,
            )
        try:
            data = os.read(fd, 64)
        finally:
            os.close(fd)
        return "ALLOWED", "link(%s, %s) was created and read %d bytes; %s" % (TARGET, LINK, len(data), context)
    finally:
        common.remove_quietly(LINK)


if __name__ == "__main__":
    common.run(CASE_ID, main)
