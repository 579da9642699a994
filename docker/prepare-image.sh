#!/bin/sh
# The runtime image's user and writable directories, shared by docker/runtime.Dockerfile (the
# local build of `npm run images`) and the root Dockerfile, so both images have the same layout.
#
# uid/gid 1000 `murmur` needs a passwd entry: Node's os.userInfo() throws without one. Named
# volumes mounted on these directories copy their ownership when they are first created.
set -eu
groupadd --gid 1000 murmur
useradd --uid 1000 --gid 1000 --home-dir /var/lib/murmur --no-create-home --shell /usr/sbin/nologin murmur
mkdir -p /var/lib/murmur/registry /data /opt/murmur
chown 1000:1000 /var/lib/murmur /var/lib/murmur/registry /data
