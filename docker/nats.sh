#!/bin/bash
# The stack's nats-server: JetStream in /data, clients on 4222, monitoring (the health check) on
# 8222 of the container's own loopback only: its /connz lists every client and subscription (every
# session's subjects), and the bus's token guards none of it, so nothing on the stack's network may
# read it. With MURMUR_NATS_TOKEN set, every client must present it (nats://<token>@nats:4222, as
# the services are given it). Both are written to a config file in the container's tmpfs, readable
# by its user alone: the token is never put on a command line, which every user of the host can
# read in ps.
set -euo pipefail
token=${MURMUR_NATS_TOKEN:-}
unset MURMUR_NATS_TOKEN
umask 077
config=$(mktemp /tmp/nats-XXXXXX.conf)
printf 'http: "127.0.0.1:8222"\n' >"$config"
if [[ -n $token ]]; then
  if [[ ${#token} -lt 16 || ! $token =~ ^[A-Za-z0-9._~-]+$ ]]; then
    echo "error[E-CFG-003]: MURMUR_NATS_TOKEN must be at least 16 characters, each a letter, a digit, '.', '_', '~' or '-' (it is written in the services' nats:// URL); use e.g. \$(openssl rand -hex 32)" >&2
    exit 1
  fi
  printf 'authorization {\n  token: "%s"\n}\n' "$token" >>"$config"
fi
exec nats-server -js -sd /data -p 4222 -c "$config"
