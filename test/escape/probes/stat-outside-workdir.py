#!/usr/bin/env python3
"""Case 3: stat /etc/shadow (metadata only, no open)."""
import os
import stat
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "stat-outside-workdir"


def main():
    try:
        st = os.stat("/etc/shadow")
    except OSError as exc:
        return "REFUSED", "stat(/etc/shadow) failed with %s" % common.describe_oserror(exc)
    return "SUCCESS", "stat(/etc/shadow) succeeded: mode=%s uid=%d gid=%d size=%d ino=%d" % (
        stat.filemode(st.st_mode),
        st.st_uid,
        st.st_gid,
        st.st_size,
        st.st_ino,
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
