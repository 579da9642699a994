"""Network checks from inside the sandbox, one per argument, printed as one JSON object.

  tcp:<host>:<port>     connect(); "connected" or the errno name
  udp:<host>:<port>     sendto() one datagram; "sent" or the errno name
  dns:<name>            getaddrinfo(name) for IPv4; the addresses, or the EAI_* name
"""
import errno
import json
import socket
import sys

EAI = {getattr(socket, name): name for name in dir(socket) if name.startswith("EAI_") and isinstance(getattr(socket, name), int)}


def check(spec):
    kind, _, rest = spec.partition(":")
    if kind == "dns":
        try:
            return sorted({info[4][0] for info in socket.getaddrinfo(rest, 443, socket.AF_INET, socket.SOCK_STREAM)})
        except socket.gaierror as error:
            return EAI.get(error.errno, str(error.errno))
    host, _, port = rest.rpartition(":")
    try:
        if kind == "tcp":
            with socket.create_connection((host, int(port)), timeout=5):
                return "connected"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"murmur sealed-sandbox datagram", (host, int(port)))
            return "sent"
    except socket.timeout:
        return "timeout"
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))


print(json.dumps({spec: check(spec) for spec in sys.argv[1:]}))
