#!/usr/bin/env python3
"""Case 17: create a Unix socket and connect to the Docker daemon's socket path."""
import os
import socket
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "pathname-unix-socket-connect"
PATHS = ("/var/run/docker.sock", "/run/docker.sock")


def main():
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        return "REFUSED", "socket(AF_UNIX, SOCK_STREAM) failed with %s: refused at socket() time" % common.describe_oserror(exc)
    probe.close()
    failures = []
    for path in PATHS:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5)
            try:
                sock.connect(path)
            except OSError as exc:
                failures.append("%s: %s" % (path, common.describe_oserror(exc)))
                continue
            return "ALLOWED", "connect(%s) succeeded: full sandbox escape" % path
        finally:
            sock.close()
    return "REFUSED", "socket(AF_UNIX) was allowed; every connect failed (refused only at connect time): %s" % "; ".join(failures)


if __name__ == "__main__":
    common.run(CASE_ID, main)
