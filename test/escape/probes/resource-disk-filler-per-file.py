#!/usr/bin/env python3
"""Case 25 (resource): grow one file, ./ec-big, 1 MiB at a time (up to 200 MiB) until a write is
refused; the file is deleted afterwards."""
import os
import resource
import signal
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "resource-disk-filler-per-file"
TARGET = "./ec-big"
CHUNKS = 200


def describe_limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def main():
    # Past RLIMIT_FSIZE the kernel sends SIGXFSZ; ignored, the write fails with EFBIG instead.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    fsize_soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limits = "RLIMIT_FSIZE soft=%s" % describe_limit(fsize_soft)
    chunk = b"\x5a" * common.MIB
    written = 0
    try:
        try:
            fd = os.open(TARGET, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            return "INCONCLUSIVE", "could not create %s: %s" % (TARGET, common.describe_oserror(exc))
        try:
            for _ in range(CHUNKS):
                view = memoryview(chunk)
                while view:
                    try:
                        n = os.write(fd, view)
                    except OSError as exc:
                        return "CONTAINED", "write refused with %s after %d bytes (%s)" % (
                            common.describe_oserror(exc),
                            written,
                            limits,
                        )
                    written += n
                    view = view[n:]
        finally:
            os.close(fd)
        return "UNCONTAINED", "wrote all %d bytes to %s without a refusal (%s)" % (written, TARGET, limits)
    finally:
        common.remove_quietly(TARGET)


if __name__ == "__main__":
    common.run(CASE_ID, main)
