#!/usr/bin/env python3
"""Case 15: resolve a unique name under .invalid; an NXDOMAIN answer means the label reached a
real resolver outside, a refusal means it was stopped at the sandbox's own stub."""
import os
import socket
import sys
import threading

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "dns-exfiltration"
EAI_NONAME = getattr(socket, "EAI_NONAME", -2)
EAI_NODATA = getattr(socket, "EAI_NODATA", -5)
WAIT_SECONDS = 9


def main():
    name = "ec-exfil-%d.murmur-escape-conformance.invalid" % os.getpid()
    outcome = {}

    def resolve():
        try:
            outcome["answer"] = socket.getaddrinfo(name, 53, proto=socket.IPPROTO_UDP)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc

    # getaddrinfo cannot be interrupted; a daemon thread bounds how long the probe waits.
    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(WAIT_SECONDS)
    if worker.is_alive():
        return "INCONCLUSIVE", "getaddrinfo(%s) gave no answer within %d s" % (name, WAIT_SECONDS)
    if "answer" in outcome:
        addresses = sorted({entry[4][0] for entry in outcome["answer"]})
        return "ALLOWED", "getaddrinfo(%s) resolved to %s: the query left and was answered" % (name, ", ".join(addresses))
    exc = outcome.get("error")
    if isinstance(exc, socket.gaierror):
        if exc.errno in (EAI_NONAME, EAI_NODATA):
            return "ALLOWED", "getaddrinfo(%s) failed with %s (%s): a resolver outside answered for the label" % (
                name,
                common.describe_oserror(exc),
                exc.strerror,
            )
        return "REFUSED", "getaddrinfo(%s) failed with %s (%s)" % (name, common.describe_oserror(exc), exc.strerror)
    if isinstance(exc, OSError):
        return "REFUSED", "getaddrinfo(%s) failed with %s" % (name, common.describe_oserror(exc))
    return "INCONCLUSIVE", "getaddrinfo(%s) raised %r" % (name, exc)


if __name__ == "__main__":
    common.run(CASE_ID, main)
