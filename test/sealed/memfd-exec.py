"""Tries to run a program the capsule brought with it without a file on any mount: the bytes of
argv[1] written into an anonymous memory file (memfd_create), then executed through
/proc/self/fd/N and through execveat(fd, "", AT_EMPTY_PATH) (os.execve with a descriptor). Prints
one JSON object: how far each way got ("ran", or the errno name of the step that was refused).
"""
import errno
import json
import os
import subprocess
import sys


def memfd_with(source):
    try:
        fd = os.memfd_create("brought", 0)
    except OSError as e:
        return None, "memfd_create:" + errno.errorcode.get(e.errno, str(e.errno))
    with open(source, "rb") as f:
        os.write(fd, f.read())
    return fd, None


def by_proc_path(source):
    fd, refused = memfd_with(source)
    if refused:
        return refused
    try:
        r = subprocess.run([f"/proc/self/fd/{fd}", "-c", "print('ran')"], pass_fds=[fd], capture_output=True, text=True)
    except OSError as e:
        return "execve:" + errno.errorcode.get(e.errno, str(e.errno))
    return r.stdout.strip() or f"exit {r.returncode}"


def by_descriptor(source):
    fd, refused = memfd_with(source)
    if refused:
        return refused
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        os.dup2(writer, 1)
        try:
            os.execve(fd, ["brought", "-c", "print('ran')"], {})
        except OSError as e:
            os.write(1, ("execveat:" + errno.errorcode.get(e.errno, str(e.errno))).encode())
        os._exit(0)
    os.close(writer)
    out = b""
    while chunk := os.read(reader, 4096):
        out += chunk
    os.waitpid(pid, 0)
    return out.decode().strip() or "no output"


print(json.dumps({"proc-path": by_proc_path(sys.argv[1]), "descriptor": by_descriptor(sys.argv[1])}))
