#!/bin/sh
# runconf.sh CONFIG SPOOL [PORT] - print CONFIG with spool.dir set to SPOOL
# and, with PORT, server.listen set to ["127.0.0.1:PORT"]: the file `make
# run` starts mtad on (var/run.yaml), so that a port or a spool of its own
# needs no edit of the tracked relay.yaml.  The rest of CONFIG is copied
# as it is.
#
# It rewrites the block style relay.yaml is written in: sections at the
# left margin ("spool:"), their keys indented under them; a key's value
# on its line or on the lines indented (or "- " items) below it.  A key or
# section that is missing is added.  A section written on one line
# ("spool: {dir: x}") is an error naming its line: write it as a block.
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: sh mk/runconf.sh CONFIG SPOOL [PORT]" >&2
    exit 2
fi
config=$1 spool=$2 port=${3:-}
case $spool in
/*) ;;
*) echo "runconf: SPOOL must be an absolute path: $spool" >&2; exit 2 ;;
esac
case $spool in
*[!A-Za-z0-9._/-]*) echo "runconf: SPOOL: use letters, digits and ._-/ only: $spool" >&2; exit 2 ;;
esac
case $port in
*[!0-9]*) echo "runconf: PORT is not a number: $port" >&2; exit 2 ;;
esac
if [ -n "$port" ] && { [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; }; then
    echo "runconf: PORT must be 1 to 65535: $port" >&2
    exit 2
fi
[ -r "$config" ] || { echo "runconf: cannot read $config" >&2; exit 2; }

awk -v spool="$spool" -v port="$port" '
BEGIN {
    want["spool", "dir"] = "\"" spool "\""
    if (port != "") want["server", "listen"] = "[\"127.0.0.1:" port "\"]"
}
function indent(s) { sub(/[^ ].*/, "", s); return s }
# leave: the keys of the section just ended that it did not have
function leave(   k, p) {
    for (k in want) {
        split(k, p, SUBSEP)
        if (p[1] == sec && !((sec, p[2]) in done)) {
            print (ind == "" ? "  " : ind) p[2] ": " want[k]
            done[sec, p[2]] = 1
        }
    }
}
/^[^ #][^:]*:/ {                        # a section
    leave()
    sec = $0; sub(/:.*/, "", sec)
    rest = $0; sub(/^[^:]*:[ ]*/, "", rest)
    if (rest !~ /^(#.*)?$/) {
        for (k in want) {
            split(k, p, SUBSEP)
            if (p[1] == sec) {
                printf "%s:%d: %s: written on one line; make run needs it as a block\n",
                    FILENAME, FNR, sec > "/dev/stderr"
                failed = 1; exit 2
            }
        }
    }
    seen[sec, ""] = 1; ind = ""; skip = ""
    print; next
}
skip != "" {                            # the value of a key replaced
    if ($0 ~ /^ *$/) { print; next }
    if ($0 ~ /^ *#/) next
    i = indent($0)
    if (length(i) > length(skip) || (i == skip && substr($0, length(i) + 1, 2) == "- "))
        next
    skip = ""
}
/^ +[^ #-][^:]*:/ && sec != "" {         # a key of the section
    i = indent($0)
    if (ind == "") ind = i
    key = substr($0, length(i) + 1); sub(/:.*/, "", key)
    if (i == ind && ((sec, key) in want)) {
        print i key ": " want[sec, key]
        done[sec, key] = 1; skip = i
        next
    }
}
{ print }
END {
    if (failed) exit 2
    leave()
    for (k in want) {
        split(k, p, SUBSEP)
        if (!((p[1], "") in seen)) {
            print p[1] ":"
            print "  " p[2] ": " want[k]
        }
    }
}' "$config"
