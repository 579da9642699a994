#!/usr/bin/env python3
"""Case 13: open a TCP connection to 1.1.1.1:443, a host no grant names."""
import errno
import os
import socket
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "connect-unlisted-tcp-host"
TARGET = ("1.1.1.1", 443)


def main():
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        return "REFUSED", "socket(AF_INET, SOCK_STREAM) failed with %s" % common.describe_oserror(exc)
    try:
        sock.settimeout(8)
        try:
            sock.connect(TARGET)
        except socket.timeout:
            return "INCONCLUSIVE", "connect(1.1.1.1:443) timed out after 8 s: nothing answered either way"
        except OSError as exc:
            if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return "INCONCLUSIVE", "connect(1.1.1.1:443) failed with %s: no route, so no policy was tested" % (
                    common.describe_oserror(exc),
                )
            return "REFUSED", "connect(1.1.1.1:443) failed with %s" % common.describe_oserror(exc)
        local = sock.getsockname()
        return "ALLOWED", "connect(1.1.1.1:443) succeeded from %s:%d" % (local[0], local[1])
    finally:
        sock.close()


if __name__ == "__main__":
    common.run(CASE_ID, main)
