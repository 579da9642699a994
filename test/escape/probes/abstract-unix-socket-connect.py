#!/usr/bin/env python3
"""Case 16: create a Unix socket and connect to an abstract-namespace name."""
import os
import socket
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "abstract-unix-socket-connect"
NAME = "\0murmur-escape-conformance-abstract"


def main():
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        return "REFUSED", "socket(AF_UNIX, SOCK_STREAM) failed with %s: refused at socket() time" % common.describe_oserror(exc)
    try:
        sock.settimeout(5)
        try:
            sock.connect(NAME)
        except OSError as exc:
            return "REFUSED", "socket(AF_UNIX) was allowed; connect(@%s) failed with %s (refused only at connect time)" % (
                NAME[1:],
                common.describe_oserror(exc),
            )
        return "ALLOWED", "connect(@%s) succeeded" % NAME[1:]
    finally:
        sock.close()


if __name__ == "__main__":
    common.run(CASE_ID, main)
