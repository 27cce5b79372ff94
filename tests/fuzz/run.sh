#!/bin/sh
# run.sh BUILD SECONDS TARGET... - run each libFuzzer target for SECONDS
# from its committed seeds (tests/fuzz/corpus/<target>/, read only); new
# inputs go to BUILD/corpus/<target>/, a crash to BUILD/crash-<target>-*.
# FUZZ_JOBS targets run at once (default: the number of CPUs), so CI's
# 20 s per target costs 20 s per pair on two cores, not per target.
# Prints one line per target: runs, exec/s, coverage (libFuzzer's cov:
# and ft:); exits non-zero if any target found a crash.
set -u
build=$1 secs=$2
shift 2
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# one_target T - run T and write its summary line to BUILD/fuzz_T.result
one_target() {
    t=$1
    work=$build/corpus/$t seeds=tests/fuzz/corpus/$t
    mkdir -p "$work" "$seeds"
    log=$build/fuzz_$t.log
    "$build/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -artifact_prefix="$build/crash-$t-" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$done_line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    if [ $rc -ne 0 ]; then
        { echo "fuzz_$t: FAILED (rc=$rc), see $log:"
          grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5; } \
            >"$build/fuzz_$t.result"
        return 1
    fi
    printf 'fuzz_%-9s %9s runs %7s exec/s  cov: %-5s ft: %s\n' \
        "$t" "${runs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" \
        >"$build/fuzz_$t.result"
}

fail=0
set -- "$@"
while [ $# -gt 0 ]; do
    pids="" batch=""
    i=0
    while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
        one_target "$1" &
        pids="$pids $!" batch="$batch $1"
        shift
        i=$((i + 1))
    done
    for p in $pids; do
        wait "$p" || fail=1
    done
    for t in $batch; do
        cat "$build/fuzz_$t.result"
    done
done
exit $fail
