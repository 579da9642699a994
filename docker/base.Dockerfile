# murmur/base:bookworm on a machine where debian:bookworm-slim can be pulled (scripts/images.mjs;
# without a registry it makes the same image with debootstrap instead).
FROM debian:bookworm-slim
ARG PACKAGES="bubblewrap ca-certificates nats-server"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && test -x /usr/bin/setpriv
