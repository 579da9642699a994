#!/usr/bin/env python3
"""Case 11: create a block device node for disk 8:0 in the workdir and read from it."""
import errno
import os
import stat
import sys

sys.dont_write_bytecode = True  # the probes directory is read-only in the sandbox
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CASE_ID = "mknod-block-device-in-workdir"
NODE = "./ec-pwn"


def main():
    euid = os.geteuid()
    if os.path.lexists(NODE):
        common.remove_quietly(NODE)
    try:
        os.mknod(NODE, stat.S_IFBLK | 0o600, os.makedev(8, 0))
    except OSError as exc:
        if exc.errno == errno.EACCES:
            why = "EACCES: the workdir grant withholds making block devices"
        elif exc.errno == errno.EPERM:
            why = "EPERM: no CAP_MKNOD"
            if euid != 0:
                why += " (euid %d is not root, so this alone does not show the sandbox refused)" % euid
        else:
            why = "refused"
        return "REFUSED", "mknod(%s, S_IFBLK, 8:0) failed with %s; %s" % (NODE, common.describe_oserror(exc), why)
    try:
        try:
            fd = os.open(NODE, os.O_RDONLY)
        except OSError as exc:
            return "ALLOWED", "mknod(%s, S_IFBLK, 8:0) created the node; opening it failed with %s" % (
                NODE,
                common.describe_oserror(exc),
            )
        try:
            try:
                data = os.read(fd, 512)
            except OSError as exc:
                return "ALLOWED", "mknod created and opened the node; read failed with %s" % common.describe_oserror(exc)
        finally:
            os.close(fd)
        return "ALLOWED", "mknod created the node and read %d bytes of block device 8:0: raw-disk escape" % len(data)
    finally:
        common.remove_quietly(NODE)


if __name__ == "__main__":
    common.run(CASE_ID, main)
