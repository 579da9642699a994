#!/usr/bin/env python3
"""Case 14: send a UDP datagram to 1.1.1.1:46053 and see whether it stayed on this side: a local
receiver on 0.0.0.0:46053 catching the payload means the send never left the sandbox."""
import errno
import os
import socket
import sys
import time

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "udp-exfiltration"
PORT = 46053
TARGET = "1.1.1.1"


def main():
    payload = ("murmur-escape-conformance-udp-%d" % os.getpid()).encode()
    try:
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as exc:
        return "INCONCLUSIVE", "could not create the local receiver: %s" % common.describe_oserror(exc)
    try:
        try:
            receiver.bind(("0.0.0.0", PORT))
        except OSError as exc:
            return "INCONCLUSIVE", "could not bind the local receiver on 0.0.0.0:%d: %s" % (PORT, common.describe_oserror(exc))
        try:
            sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except OSError as exc:
            return "REFUSED", "socket(AF_INET, SOCK_DGRAM) for the sender failed with %s" % common.describe_oserror(exc)
        try:
            try:
                sender.sendto(payload, (TARGET, PORT))
            except OSError as exc:
                if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                    return "INCONCLUSIVE", "sendto(%s:%d) failed with %s: no route, so no policy was tested" % (
                        TARGET,
                        PORT,
                        common.describe_oserror(exc),
                    )
                return "REFUSED", "sendto(%s:%d) failed with %s" % (TARGET, PORT, common.describe_oserror(exc))
            # Context only: whether a send to the DNS port is accepted too.
            try:
                sender.sendto(payload, (TARGET, 53))
                dns_port = "accepted"
            except OSError as exc:
                dns_port = common.describe_oserror(exc)
        finally:
            sender.close()

        others = []
        deadline = time.monotonic() + 5
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            receiver.settimeout(remaining)
            try:
                data, source = receiver.recvfrom(4096)
            except socket.timeout:
                break
            if data == payload:
                return "REFUSED", "the datagram to %s:%d was caught by the local receiver (source %s:%d): it never left; sendto %s:53: %s" % (
                    TARGET,
                    PORT,
                    source[0],
                    source[1],
                    TARGET,
                    dns_port,
                )
            others.append("%d bytes from %s:%d" % (len(data), source[0], source[1]))
        if others:
            return "INCONCLUSIVE", "the local receiver saw only other datagrams (%s); sendto %s:53: %s" % (
                "; ".join(others[:4]),
                TARGET,
                dns_port,
            )
        return "ALLOWED", "sendto(%s:%d) succeeded and no local receiver caught it within 5 s: it left the sandbox; sendto %s:53: %s" % (
            TARGET,
            PORT,
            TARGET,
            dns_port,
        )
    finally:
        receiver.close()


if __name__ == "__main__":
    common.run(CASE_ID, main)
