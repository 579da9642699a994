"""Shared helpers for the escape-conformance probes.

Every probe is a standalone script run as ``python3 <probe>.py`` from the capsule's workdir. It
imports this module after putting its own directory first on ``sys.path``, builds a verdict in
``main()`` and hands it to :func:`run`, which prints the single ``EC_RESULT`` line the test reads.

Nothing here raises out of :func:`run`: an exception in a probe becomes ``INCONCLUSIVE``.
"""

import errno
import json
import os
import platform
import socket
import sys

VERDICTS = ("REFUSED", "ALLOWED", "SUCCESS", "CONTAINED", "UNCONTAINED", "INCONCLUSIVE")

RESULT_PREFIX = "EC_RESULT "

# Raw system call numbers, by architecture: (x86_64, aarch64).
SYSCALL_NUMBERS = {
    "io_uring_setup": (425, 425),
    "userfaultfd": (323, 282),
    "bpf": (321, 280),
    "open_by_handle_at": (304, 265),
    "perf_event_open": (298, 241),
    "keyctl": (250, 219),
}

_ARCH_COLUMN = {"x86_64": 0, "amd64": 0, "aarch64": 1, "arm64": 1}

MIB = 1024 * 1024


# --- rendering -------------------------------------------------------------------------------


def errname(number):
    """``EACCES(13)`` for 13; ``E?(n)`` for a number errno does not name."""
    if number is None:
        return "errno=None"
    return "%s(%d)" % (errno.errorcode.get(number, "E?"), number)


_EAI_NAMES = {}
for _name in dir(socket):
    if _name.startswith("EAI_"):
        _value = getattr(socket, _name)
        if isinstance(_value, int):
            _EAI_NAMES.setdefault(_value, _name)


def eainame(number):
    """``EAI_AGAIN(-3)`` for a getaddrinfo error code."""
    return "%s(%d)" % (_EAI_NAMES.get(number, "EAI_?"), number)


def describe_oserror(exc):
    """An OSError as its symbolic errno (plus the exception class when there is no errno)."""
    if isinstance(exc, socket.gaierror) and exc.errno is not None:
        return eainame(exc.errno)
    if getattr(exc, "errno", None) is not None:
        return errname(exc.errno)
    return "%s(%s)" % (type(exc).__name__, exc)


def one_line(text):
    """Collapses whitespace runs (newlines included) so a detail stays on one line."""
    return " ".join(str(text).split())


def read_sysctl(path):
    """A /proc/sys value as text, or ``unknown`` when it cannot be read (no /proc/sys, refused)."""
    try:
        with open(path, "r") as handle:
            return handle.read().strip() or "empty"
    except OSError:
        return "unknown"


def try_open(path, flags=os.O_RDONLY, mode=0o600):
    """Opens and closes ``path``; returns ``None`` on success, else the OSError."""
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        return exc
    os.close(fd)
    return None


def open_outcome(path, flags=os.O_RDONLY):
    """``ok`` or the symbolic errno of opening ``path``."""
    exc = try_open(path, flags)
    return "ok" if exc is None else describe_oserror(exc)


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# --- raw system calls ------------------------------------------------------------------------


def arch():
    """``x86_64`` or ``aarch64`` (normalised from platform.machine()), else ``None``."""
    machine = platform.machine().lower()
    column = _ARCH_COLUMN.get(machine)
    if column is None:
        return None
    return ("x86_64", "aarch64")[column]


def syscall_number(name):
    """The number of ``name`` on this architecture, or ``None`` (unknown arch or name)."""
    machine = platform.machine().lower()
    column = _ARCH_COLUMN.get(machine)
    numbers = SYSCALL_NUMBERS.get(name)
    if column is None or numbers is None:
        return None
    return numbers[column]


_LIBC = None


def libc():
    """The C library, loaded once, with errno capture on."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        _LIBC = lib
    return _LIBC


def raw_syscall(number, *args):
    """``syscall(number, *args)`` with every argument passed as a C long; returns (ret, errno)."""
    import ctypes

    lib = libc()
    ctypes.set_errno(0)
    ret = lib.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    err = ctypes.get_errno()
    return ret, (err if ret == -1 else 0)


def syscall_probe(name, args, returns_fd, context=""):
    """The shared verdict of the dangerous-syscall cases.

    ret -1 with EPERM is REFUSED (the filter's default answer), ENOSYS is INCONCLUSIVE (the kernel
    may simply lack the call), and anything else — a descriptor, a value, or any other errno such
    as EFAULT/EINVAL that proves the kernel looked at the arguments — is ALLOWED.
    """
    number = syscall_number(name)
    machine = platform.machine()
    suffix = ("; " + context) if context else ""
    if number is None:
        return "INCONCLUSIVE", "no %s number for architecture %s%s" % (name, machine, suffix)
    rendered_args = ", ".join(str(a) for a in args)
    ret, err = raw_syscall(number, *args)
    call = "%s(%s) [nr %d on %s]" % (name, rendered_args, number, machine)
    if ret == -1:
        if err == errno.EPERM:
            return "REFUSED", "%s failed with %s%s" % (call, errname(err), suffix)
        if err == errno.ENOSYS:
            return "INCONCLUSIVE", "%s failed with %s: the kernel may not implement it%s" % (call, errname(err), suffix)
        return "ALLOWED", "%s reached the kernel, which answered %s%s" % (call, errname(err), suffix)
    if returns_fd and ret >= 0:
        try:
            os.close(ret)
        except OSError:
            pass
        return "ALLOWED", "%s returned descriptor %d (closed)%s" % (call, ret, suffix)
    return "ALLOWED", "%s returned %d%s" % (call, ret, suffix)


# --- the result line ---------------------------------------------------------------------------


def emit(case_id, verdict, detail):
    """Prints the EC_RESULT line (and flushes)."""
    if verdict not in VERDICTS:
        detail = "probe produced unknown verdict %r: %s" % (verdict, detail)
        verdict = "INCONCLUSIVE"
    line = RESULT_PREFIX + json.dumps({"id": case_id, "verdict": verdict, "detail": one_line(detail)})
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except Exception:
        try:
            os.write(1, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def run(case_id, main):
    """Runs ``main()`` (which returns ``(verdict, detail)``) and emits its result, never raising."""
    try:
        outcome = main()
        if not isinstance(outcome, tuple) or len(outcome) != 2:
            verdict, detail = "INCONCLUSIVE", "probe returned %r instead of (verdict, detail)" % (outcome,)
        else:
            verdict, detail = outcome
    except BaseException as exc:  # noqa: BLE001 - a probe must never raise
        verdict, detail = "INCONCLUSIVE", "probe raised: %r" % (exc,)
    emit(case_id, verdict, detail)
