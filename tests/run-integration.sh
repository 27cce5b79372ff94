#!/bin/sh
# run-integration.sh - the pytest suite against the binaries in $MTAD_BUILD.
# Debian's python3 (it has pytest from apt), not another one.
#
# Most of the suite waits on sockets and timers, not on the CPU, so the test
# files are split into shards run side by side, two per core (at most 4;
# MTAD_TEST_SHARDS overrides, 1 = one pytest as before): on 2 cores 4
# shards took 111 s, 2 shards 180.  The tests bind
# fixed loopback addresses (the test zone's MX hosts on 127.0.0.x:25, DNS
# servers, sinks), so each shard runs in its own network namespace with its
# own loopback: two shards can never meet on an address.  Without network
# namespaces (no unshare(2) permission, no ip(8)) the suite runs as one.
# Arguments other than test files (e.g. -k, -x) go to every shard; with
# test files or node ids given, it runs them as one pytest.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
cd "$(dirname "$0")/.." || exit 1

one() { exec "$PY" -m pytest -q -p no:cacheprovider "$@"; }

for a in "$@"; do
    case "$a" in tests/*) one "$@" ;; esac
done
skip=""
for f in ${MTAD_TEST_SKIP:-}; do skip="$skip --ignore=tests/integration/$f"; done
n=${MTAD_TEST_SHARDS:-$(( 2 * $(nproc 2>/dev/null || echo 1) ))}
[ "$n" -gt 4 ] && n=4
if [ "$n" -le 1 ] || ! command -v ip >/dev/null 2>&1 ||
   ! unshare -n ip link set lo up 2>/dev/null; then
    # shellcheck disable=SC2086  # one argument per skipped file
    one tests/integration $skip "$@"
fi

# Files longest first, each to the shard with the least time so far: the
# time a file took (tests/integration/durations.txt), or for a file not
# listed there its size at 1,700 bytes a second.  MTAD_TEST_SKIP names
# files to leave out (make asan: the bench tools' own tests).
out=$(mktemp -d /tmp/mtad-shards.XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
for f in tests/integration/test_*.py; do
    case " ${MTAD_TEST_SKIP:-} " in *" $(basename "$f") "*) continue ;; esac
    w=$(awk -v f="$(basename "$f")" '$2 == f { print $1 }' \
        tests/integration/durations.txt 2>/dev/null)
    [ -n "$w" ] || w=$(( $(wc -c < "$f") / 1700 + 1 ))
    echo "$w $f"
done | LC_ALL=C sort -rn | awk -v n="$n" -v out="$out" '
    { best = 0
      for (i = 1; i < n; i++) if (load[i] < load[best]) best = i
      load[best] += $1
      printf "%s\n", $2 >> (out "/files." best) }'

i=0
while [ "$i" -lt "$n" ]; do
    if [ -s "$out/files.$i" ]; then
        # shellcheck disable=SC2046  # one argument per file name
        unshare -n sh -c 'ip link set lo up && exec "$@"' sh \
            "$PY" -m pytest -q -p no:cacheprovider \
            --basetemp="$out/tmp.$i" $(cat "$out/files.$i") "$@" \
            >"$out/log.$i" 2>&1 &
        echo $! >"$out/pid.$i"
    fi
    i=$((i + 1))
done

rc=0
i=0
while [ "$i" -lt "$n" ]; do
    if [ -s "$out/files.$i" ]; then
        wait "$(cat "$out/pid.$i")"
        st=$?
        echo "== shard $((i + 1))/$n (own network namespace): exit $st"
        cat "$out/log.$i"
        [ "$st" -ne 0 ] && rc=1
    fi
    i=$((i + 1))
done
exit $rc
