#!/bin/sh
# layering.sh ROOT - check that every source file under ROOT includes only
# headers its module may use (docs/ARCHITECTURE.md, "Dependency rules"):
#   - a module's files include its own headers and the headers of the
#     modules below it; never a module above it;
#   - from another module, only the headers that are X's contract (the
#     public table below; every header of common/ is one); *_int.h never;
#   - tests/ and bench/ may include anything.
# Exit 0 when every include is allowed, 1 (listing each offence as
# FILE:LINE: message) when not.
set -u
root=${1:-.}
cd "$root" || exit 2

find . -path ./build -prune -o -path ./build-asan -prune -o \
    -path ./build-fuzz -prune -o -path ./.git -prune -o \
    -path ./tests -prune -o -path ./bench -prune -o \
    \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort |
while IFS= read -r f; do
    case $f in */*) ;; *) continue ;; esac         # top-level file
    grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" ||
        echo "$f:0:#include \"\""                 # a file with no include
done | awk '
BEGIN {
    # the modules each module may include, itself included
    ok["common"]   = "common"
    ok["smtp"]     = "smtp common"
    ok["dns"]      = "dns common"
    ok["sts"]      = "sts common"
    ok["proxy"]    = "proxy common"
    ok["dkim"]     = "dkim common"
    ok["router"]   = "router smtp common"
    ok["spool"]    = "spool smtp common"
    ok["config"]   = "config dkim router smtp proxy dns common"
    ok["tlspol"]   = "tlspol spool router smtp dns sts common"
    ok["delivery"] = "delivery tlspol config dkim spool router smtp proxy dns sts common"
    ok["smtpd"]    = "smtpd delivery tlspol config dkim spool router smtp proxy dns sts common"
    ok["worker"]   = "worker smtpd delivery tlspol config dkim spool router smtp proxy dns sts common"
    ok["master"]   = "master worker smtpd delivery tlspol config dkim spool router smtp proxy dns sts common"
    ok["mtactl"]   = "mtactl delivery tlspol config dkim spool router smtp proxy dns sts common"
    ok["sendmail"] = "sendmail config dkim router smtp proxy dns common"
    # the headers each module offers the others ("*": all of them)
    pub["common"] = "*"
    pub["router"] = "router/router.h router/route.h"
    pub["delivery"] = "delivery/delivery.h"
    # named files that may use more of a module: mtactl tls check runs the
    # delivery code for outbound TLS itself (the MX resolution, the client)
    tlsparts = "delivery/mta.h delivery/resolve.h"
    seam["mtactl/tls_check.c"] = tlsparts
    seam["mtactl/tls_probe.c"] = tlsparts
    bad = 0
}
function has(list, w) { return index(" " list " ", " " w " ") > 0 }
{
    f = $0; sub(/:.*/, "", f)
    rest = substr($0, length(f) + 2)
    n = rest; sub(/:.*/, "", n)
    hdr = rest; sub(/^[^"]*"/, "", hdr); sub(/".*/, "", hdr)
    mod = f; sub(/\/.*/, "", mod)
    if (!(mod in ok)) {
        if (!(mod in told)) {
            print f ": module \x27" mod "\x27 has no layering rule (add it to tests/layering.sh)"
            told[mod] = 1; bad = 1
        }
        next
    }
    if (hdr == "" || index(hdr, "/") == 0) next  # same-folder include
    to = hdr; sub(/\/.*/, "", to)
    if (!has(ok[mod], to)) {
        print f ":" n ": " mod " may not include " hdr; bad = 1; next
    }
    if (to == mod) next
    p = (to in pub) ? pub[to] : to "/" to ".h"
    if (f in seam && has(seam[f], hdr)) next
    if (hdr ~ /_int\.h$/ || (p != "*" && !has(p, hdr))) {
        print f ":" n ": " hdr " is internal to " to "/ (its contract: " p ")"
        bad = 1
    }
}
END {
    if (bad) { print "layering: FAILED"; exit 1 }
    print "layering: every include follows the module rules"
}'
