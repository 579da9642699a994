#!/usr/bin/env python3
"""Case 26 (resource): fill the workdir with many files, none large enough to hit the per-file
ceiling, until a total of argv[1] MiB (default 80) is written. The files are left in place: the
test grades this case on whether the *next* shell spawn is refused for workdir_max_bytes, not on
this probe's verdict."""
import os
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "resource-disk-filler-aggregate"
DEFAULT_TOTAL_MIB = 80
FILE_MIB = 8


def main():
    total_mib = DEFAULT_TOTAL_MIB
    if len(sys.argv) > 1:
        try:
            total_mib = int(sys.argv[1])
        except ValueError:
            return "INCONCLUSIVE", "argument %r is not a whole number of MiB" % sys.argv[1]
        if total_mib <= 0:
            return "INCONCLUSIVE", "argument %r is not a positive number of MiB" % sys.argv[1]
    chunk = b"\xa5" * common.MIB
    written = 0
    remaining = total_mib
    index = 0
    while remaining > 0:
        name = "ec-fill-%d" % index
        this_file = min(FILE_MIB, remaining)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            return "INCONCLUSIVE", "stopped at the first write error: creating %s failed with %s after %d bytes" % (
                name,
                common.describe_oserror(exc),
                written,
            )
        try:
            for _ in range(this_file):
                view = memoryview(chunk)
                while view:
                    try:
                        n = os.write(fd, view)
                    except OSError as exc:
                        return "INCONCLUSIVE", "stopped at the first write error: %s on %s after %d bytes" % (
                            common.describe_oserror(exc),
                            name,
                            written,
                        )
                    written += n
                    view = view[n:]
        finally:
            os.close(fd)
        remaining -= this_file
        index += 1
    return "UNCONTAINED", "wrote %d bytes in %d file(s) ec-fill-0..ec-fill-%d (left in place for the workdir guard)" % (
        written,
        index,
        index - 1,
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
