#!/bin/sh
# run-unit.sh - run every Criterion test binary given; fail if any fails.
fail=0
for t in "$@"; do
    echo "== $t"
    "$t" --jobs 2 || fail=1
done
[ $fail = 0 ] && echo "unit tests: all binaries passed" || echo "unit tests: FAILED"
exit $fail
