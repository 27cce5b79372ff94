#!/bin/sh
# deps.sh - install what mtad needs to build, test and benchmark on Debian 12
# (make deps; .ci/run).  The one list of the packages: the README and the
# other scripts point here (bench/deps adds what only `make bench` needs).
set -e
PKGS="build-essential pkg-config libssl-dev liblmdb-dev lmdb-utils libyaml-dev
libcriterion-dev libseccomp-dev python3 python3-pytest python3-dkim zlib1g-dev
python3-prometheus-client swaks procps iproute2 openssl libc-ares-dev nsd
unbound ldnsutils dnsutils haproxy clang libclang-rt-14-dev libcrypt-dev
libcurl4-openssl-dev libhiredis-dev redis-server"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && { echo "deps: all present"; exit 0; }
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
echo "deps: done"
