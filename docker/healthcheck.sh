#!/bin/bash
# Container health check: `healthcheck.sh <port> <path>` exits 0 when `GET <path>` on
# 127.0.0.1:<port> answers HTTP 200 within 2 seconds, 1 otherwise. Plain bash (its /dev/tcp), not
# node: a check runs every few seconds in every container, and starting node for each one costs a
# loaded two-core machine a tenth of its CPU.
set -u
port=${1:?usage: healthcheck.sh <port> <path>}
path=${2:-/health}
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&3
IFS= read -r -t 2 status <&3 || { echo "no answer from 127.0.0.1:$port$path" >&2; exit 1; }
[[ $status =~ ^HTTP/1\.[01]\ 200 ]] || { echo "127.0.0.1:$port$path: ${status%$'\r'}" >&2; exit 1; }
