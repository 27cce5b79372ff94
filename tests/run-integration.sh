#!/bin/sh
# run-integration.sh - the pytest suite against the binaries in $MTAD_BUILD.
# Debian's python3 (it has pytest from apt), not another one.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
cd "$(dirname "$0")/.." || exit 1
exec "$PY" -m pytest -q -p no:cacheprovider tests/integration "$@"
