#!/usr/bin/env python3
"""Case 12: execute a non-allowlisted binary the test staged in the workdir as ./bash."""
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "exec-renamed-disallowed-binary"
STAGED = "./bash"


def main():
    if not os.path.lexists(STAGED):
        return "INCONCLUSIVE", "%s was not staged in the workdir" % STAGED
    try:
        done = subprocess.run(
            [STAGED, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        return "INCONCLUSIVE", "%s --version did not finish within 20 s (killed)" % STAGED
    except PermissionError as exc:
        return "REFUSED", "execve(%s) failed with %s" % (STAGED, common.describe_oserror(exc))
    except FileNotFoundError as exc:
        return "INCONCLUSIVE", "execve(%s) failed with %s (missing file or loader)" % (STAGED, common.describe_oserror(exc))
    except OSError as exc:
        return "REFUSED", "execve(%s) failed with %s" % (STAGED, common.describe_oserror(exc))
    first = (done.stdout or done.stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return "ALLOWED", "%s --version ran and exited %d; first output line: %r" % (
        STAGED,
        done.returncode,
        first[0][:80] if first else "",
    )


if __name__ == "__main__":
    common.run(CASE_ID, main)
