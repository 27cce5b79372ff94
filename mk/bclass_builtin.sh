#!/bin/sh
# mk/bclass_builtin.sh - write bclass/bclass_builtin.c from
# packaging/bounce-classes.conf: the built-in bounce classes are that file,
# as a C string (test_bclass fails when the two differ).  Run from the top
# of the tree after an edit of the file:  sh mk/bclass_builtin.sh
set -eu
in=packaging/bounce-classes.conf
out=bclass/bclass_builtin.c
{
    cat <<'HEAD'
/*
 * bclass_builtin.c - the built-in bounce classes: the text of
 * packaging/bounce-classes.conf, written by mk/bclass_builtin.sh (do not
 * edit; test_bclass checks the two are the same).
 */
#include "bclass/bclass.h"

static const char bclass_builtin[] =
HEAD
    # each line escaped for C (sed), then cut into string literals of at
    # most 64 bytes, never between a backslash and what it escapes (awk)
    sed 's/\\/\\\\/g; s/"/\\"/g' "$in" | awk '{
        s = $0
        while (length(s) > 64) {
            cut = 64
            n = 0
            while (n < cut && substr(s, cut - n, 1) == "\\") n++
            if (n % 2 == 1) cut--
            printf "    \"%s\"\n", substr(s, 1, cut)
            s = substr(s, cut + 1)
        }
        printf "    \"%s\\n\"\n", s
    }'
    cat <<'TAIL'
    ;


const char *
bclass_builtin_text(void)
{
    return bclass_builtin;
}
TAIL
} > "$out.tmp"
mv "$out.tmp" "$out"
