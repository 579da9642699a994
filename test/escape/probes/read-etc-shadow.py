#!/usr/bin/env python3
"""Case 1: open /etc/shadow for reading; /etc/passwd is the control."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "read-etc-shadow"


def main():
    control = common.open_outcome("/etc/passwd")
    try:
        fd = os.open("/etc/shadow", os.O_RDONLY)
    except OSError as exc:
        note = (
            "the control was readable, so this refusal may be plain file permissions"
            if control == "ok"
            else "the control was not readable either"
        )
        return "REFUSED", "open(/etc/shadow) failed with %s; control open(/etc/passwd): %s (%s)" % (
            common.describe_oserror(exc),
            control,
            note,
        )
    try:
        data = os.read(fd, 32)
    finally:
        os.close(fd)
    return "ALLOWED", "open(/etc/shadow) succeeded and read %d bytes; control open(/etc/passwd): %s" % (
        len(data),
        control,
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
