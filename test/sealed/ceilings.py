"""Crosses one resource ceiling, named by argv[1], and prints what happened as JSON (or is killed
by the kernel before it can, which is the point for cpu).

  cpu           spins until killed (RLIMIT_CPU: SIGXCPU)
  memory <mb>   allocates <mb> MiB at once (RLIMIT_AS: MemoryError)
  nproc <n>     forks up to <n> children that wait; reports how many it could
  cpu-share <s> spins for <s> seconds of wall time; reports the CPU time it was given
"""
import json
import os
import resource
import signal
import sys
import time

what = sys.argv[1]
if what == "cpu":
    while True:
        pass
elif what == "memory":
    try:
        block = bytearray(int(sys.argv[2]) << 20)
        print(json.dumps({"allocated": len(block)}))
    except MemoryError:
        print(json.dumps({"error": "MemoryError", "as_limit": resource.getrlimit(resource.RLIMIT_AS)[0]}))
elif what == "nproc":
    children, refusal = [], None
    for _ in range(int(sys.argv[2])):
        try:
            pid = os.fork()
        except OSError as error:
            refusal = error.strerror
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    print(json.dumps({"forked": len(children), "refusal": refusal, "nproc_limit": resource.getrlimit(resource.RLIMIT_NPROC)[0]}))
elif what == "cpu-share":
    wall = float(sys.argv[2])
    started = time.monotonic()
    while time.monotonic() - started < wall:
        pass
    print(json.dumps({"wall": time.monotonic() - started, "cpu": time.process_time()}))
