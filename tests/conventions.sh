#!/bin/sh
# conventions.sh ROOT - comments in the C sources of the tree at ROOT
# (tests/ and bench/ included) say why, not which ticket: no "issue N".
# History lives in the commit log and CHANGES, measured figures in
# bench/RESULTS.md; a number in a comment goes stale with the next change.
# Exit 0 when none is found, 1 (listing each FILE:LINE) when one is.
set -u
root=${1:-.}
cd "$root" || exit 2
hits=$(find . -path ./build -prune -o -path ./build-asan -prune -o \
    -path ./build-fuzz -prune -o -path ./.git -prune -o \
    \( -name '*.c' -o -name '*.h' \) -type f -print | LC_ALL=C sort |
    xargs grep -n -i -E '\bissues? #?[0-9]+' /dev/null | sed 's|^\./||')
if [ -n "$hits" ]; then
    printf '%s\n' "$hits"
    echo "conventions: FAILED (an issue number in a C source)"
    exit 1
fi
echo "conventions: no issue numbers in the C sources"
