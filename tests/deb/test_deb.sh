#!/bin/sh
# test_deb.sh - build the .deb, install it with dpkg -i on this Debian 12
# machine, run mtad from it with the packaged /etc/mtad/relay.yaml (pointed
# at loopback ports), relay one message to a sink, stop mtad by its pid,
# check what it ships (the example config, the logrotate snippet, its
# conffiles, Maintainer and Homepage) and what its postinst runs on an
# install and an upgrade (with stubs, in a mount namespace), then purge the
# package and check it left nothing behind.
#
# Needs root (dpkg).  Refuses to run when an mtad package or /usr/sbin/mtad
# is already there: it must not replace what someone installed.
# Usage: sh tests/deb/test_deb.sh [BUILD_DIR]     (CI: .ci/run)
set -eu
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
if [ "$(id -u)" -ne 0 ]; then
    echo "test_deb: needs root (dpkg -i); run it as root (CI does)" >&2
    exit 1
fi
if dpkg-query -W -f='${Status}' mtad 2>/dev/null | grep -q installed ||
    [ -e /usr/sbin/mtad ]; then
    echo "test_deb: an mtad is already installed here; not touching it" >&2
    exit 1
fi
make -s deb BUILD="$BUILD"
DEB=$(ls "$BUILD"/mtad_*.deb)
exec /usr/bin/python3 tests/deb/test_deb.py "$DEB"
