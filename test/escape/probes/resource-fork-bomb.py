#!/usr/bin/env python3
"""Case 24 (resource): fork up to 4096 sleeping children and see how early fork() is refused.
Every child is killed and reaped before the probe reports."""
import os
import resource
import signal
import sys
import time

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "resource-fork-bomb"
MAX_CHILDREN = 4096
CONTAINED_BELOW = 200
CHILD_SLEEP_SECONDS = 30
PR_SET_PDEATHSIG = 1


def child(lib):
    """Runs in the forked child: never returns, never prints."""
    try:
        if lib is not None:
            try:
                # Die with the probe if it is killed before it can reap us (best effort).
                lib.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            except BaseException:  # noqa: BLE001
                pass
        time.sleep(CHILD_SLEEP_SECONDS)
    finally:
        os._exit(0)


def describe_limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def main():
    try:
        lib = common.libc()  # loaded once here, not in every child
    except BaseException:  # noqa: BLE001
        lib = None
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    refusal = None
    try:
        for _ in range(MAX_CHILDREN):
            try:
                pid = os.fork()
            except OSError as exc:
                refusal = exc
                break
            if pid == 0:
                child(lib)
            children.append(pid)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    count = len(children)
    nproc_soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    limits = "RLIMIT_NPROC soft=%s" % describe_limit(nproc_soft)
    if refusal is None:
        return "UNCONTAINED", "all %d forks succeeded (%s); every child killed and reaped" % (count, limits)
    refused = "fork() refused with %s after %d children" % (common.describe_oserror(refusal), count)
    if count >= CONTAINED_BELOW:
        return "UNCONTAINED", "%s: not before %d (%s); every child killed and reaped" % (refused, CONTAINED_BELOW, limits)
    if nproc_soft == resource.RLIM_INFINITY:
        attribution = "not RLIMIT_NPROC (unlimited), so likely the cgroup's pids.max"
    elif nproc_soft > count + 64:
        attribution = "attributable to the cgroup's pids.max (RLIMIT_NPROC is far above the stop)"
    else:
        attribution = "NOT attributable to the cgroup's pids.max: RLIMIT_NPROC is within 64 of the stop"
    return "CONTAINED", "%s (%s): %s; every child killed and reaped" % (refused, limits, attribution)


if __name__ == "__main__":
    common.run(CASE_ID, main)
