#!/bin/sh
# size.sh ROOT [MAX] - no C file of the tree at ROOT outside tests/ (and the
# build directories) is over MAX lines (default 1000): past that a file
# holds more than one idea, and the next change makes it worse.  Split it
# along its parts (as smtpd/session_*.c are) instead of raising MAX.
# Exit 0 when every file fits, 1 (listing each FILE: N lines) when not.
set -u
root=${1:-.}
max=${2:-1000}
cd "$root" || exit 2
find . -path ./build -prune -o -path ./build-asan -prune -o \
    -path ./build-fuzz -prune -o -path ./.git -prune -o \
    -path ./tests -prune -o -name '*.c' -type f -print | sed 's|^\./||' |
    LC_ALL=C sort | while IFS= read -r f; do
        printf '%s %s\n' "$(wc -l < "$f")" "$f"
    done | awk -v max="$max" '
    $1 > max { print $2 ": " $1 " lines (at most " max ")"; bad = 1 }
    END {
        if (bad) { print "size: FAILED"; exit 1 }
        print "size: every C file has at most " max " lines"
    }'
