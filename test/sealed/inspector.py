"""Sends the capsule host SIGUSR1 and says whether Node"s inspector then listens, and whether the host lives.

Node answers SIGUSR1 by opening its inspector on 127.0.0.1:9229, a debugger that evaluates any
code in the host; a tool shares the sandbox"s processes and user with the host, so it can send it.
"""
import os
import signal
import socket
import time


def host_pid():
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        # node itself, not bubblewrap or the helper, whose command lines name the host's entry too.
        if os.path.basename(argv[0]) == b"node" and any(arg.endswith(b"host.cjs") for arg in argv):
            return int(entry)
    return None


def inspector_listens():
    try:
        socket.create_connection(("127.0.0.1", 9229), timeout=1).close()
        return True
    except OSError:
        return False


host = host_pid()
if host is None:
    print("no capsule host among the sandbox processes")
else:
    os.kill(host, signal.SIGUSR1)
    # Node opens the inspector within milliseconds of the signal: a second is ample.
    opened = False
    for _ in range(20):
        time.sleep(0.05)
        if inspector_listens():
            opened = True
            break
    try:
        os.kill(host, 0)
        alive = "host alive"
    except OSError:
        alive = "host gone"
    state = "open" if opened else "closed"
    print(f"signalled: inspector {state}, {alive}")
