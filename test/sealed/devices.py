"""Opens each device for reading and for writing, and prints what each open answered, as JSON:
{path: {"read": "ok"|errno, "write": "ok"|errno}}."""
import errno
import json
import os
import sys


def attempt(path, flags):
    try:
        fd = os.open(path, flags)
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    os.close(fd)
    return "ok"


paths = sys.argv[1:]
print(json.dumps({path: {"read": attempt(path, os.O_RDONLY), "write": attempt(path, os.O_WRONLY)} for path in paths}))
