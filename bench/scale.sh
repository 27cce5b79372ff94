#!/bin/sh
# bench/scale.sh - three mtad nodes behind HAProxy against one node direct
# (bench/scale.py); run as root after `make`.  Needs haproxy (make deps).
set -e
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "bench: must run as root (mtad's privilege drop needs it)" >&2
    exit 1
fi
command -v haproxy >/dev/null || sh packaging/deps.sh
ulimit -n 65536 2>/dev/null || true
exec /usr/bin/python3 -B bench/scale.py "$@"
