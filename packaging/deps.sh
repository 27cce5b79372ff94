#!/bin/sh
# deps.sh - install what mtad needs to build, test and benchmark on Debian 12
# (make deps; .ci/run).  The one list of the packages: the README and the
# other scripts point here (bench/deps adds what only `make bench` needs).
#
# No service of a package installed here is started by its install: the
# tests run their own nsd, unbound, haproxy, dovecot, rspamd, opendkim and
# redis-server
# (dovecot-core's would bind 110/143 and its auth socket; the milters take
# their ports), so apt runs under a temporary
# /usr/sbin/policy-rc.d that answers 101 ("not allowed"), as bench/deps
# does for postfix; one already there is kept and put back.
set -e
PKGS="build-essential pkg-config libssl-dev liblmdb-dev lmdb-utils libyaml-dev
libcriterion-dev libseccomp-dev python3 python3-pytest python3-dkim zlib1g-dev
python3-prometheus-client swaks procps iproute2 openssl libc-ares-dev nsd
unbound ldnsutils dnsutils haproxy clang libclang-rt-14-dev libcrypt-dev
libcurl4-openssl-dev rspamd opendkim dovecot-core libhiredis-dev
redis-server curl python3-yaml"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && { echo "deps: all present"; exit 0; }
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
prc=/usr/sbin/policy-rc.d
prc_saved=""
if [ -e "$prc" ]; then
    prc_saved="$prc.deps-saved.$$"
    $SUDO mv "$prc" "$prc_saved"
fi
restore() {
    $SUDO rm -f "$prc"
    [ -n "$prc_saved" ] && $SUDO mv "$prc_saved" "$prc"
    return 0
}
trap restore EXIT INT TERM
printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$prc" >/dev/null
$SUDO chmod 0755 "$prc"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing \
    >/dev/null
restore
trap - EXIT INT TERM
case " $missing " in
*" dovecot-core "*)
    # a systemd that ignored policy-rc.d: stop the system dovecot again
    if command -v systemctl >/dev/null 2>&1 &&
        systemctl is-active --quiet dovecot 2>/dev/null; then
        echo "deps: the install started a system dovecot; stopping and disabling it"
        $SUDO systemctl disable --now dovecot.service dovecot.socket \
            >/dev/null 2>&1 || true
    fi ;;
esac
echo "deps: done (no service started)"
