#!/bin/sh
# bench/run.sh - `make bench`: mtad against Postfix on loopback, one table.
#
# Installs the peer and its tools if missing (bench/deps: Debian's postfix,
# its own service kept down), raises the open-file limit for the 10,000
# idle connections, then runs bench/harness.py, which starts and stops
# every process it uses by pid and writes bench/RESULTS.md.
# BENCH_QUICK=1 runs one short repetition of each scenario.
set -e
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "bench: must run as root (Postfix's master and mtad's privilege drop need it)" >&2
    exit 1
fi
sh bench/deps
# 10,000 idle connections plus the load: both ends live on this machine.
ulimit -Hn 65536 2>/dev/null || true
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec /usr/bin/python3 -B bench/harness.py "$@"
