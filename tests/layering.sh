#!/bin/sh
# layering.sh ROOT - check that every source file under ROOT includes only
# headers its module may use (docs/ARCHITECTURE.md, "Dependency rules"):
#   - a module's files include its own headers and the public headers of
#     the modules below it; never a module above it;
#   - from another module, only the headers that are X's contract (public()
#     below; every header of common/ is one); *_int.h never;
#   - tests/ and bench/ may include anything.
# Exit 0 when every include is allowed, 1 (listing each offence as
# FILE:LINE: message) when not.
set -u
root=${1:-.}
cd "$root" || exit 2

allowed() {     # the modules module $1 may include, itself included
    case $1 in
    common)   echo "common" ;;
    smtp)     echo "smtp common" ;;
    router)   echo "router smtp common" ;;
    spool)    echo "spool smtp common" ;;
    dns)      echo "dns common" ;;
    dkim)     echo "dkim common" ;;
    proxy)    echo "proxy common" ;;
    config)   echo "config dkim router smtp proxy dns common" ;;
    delivery) echo "delivery config dkim spool router smtp proxy dns common" ;;
    smtpd)    echo "smtpd delivery config dkim spool router smtp proxy dns common" ;;
    worker)   echo "worker smtpd delivery config dkim spool router smtp proxy dns common" ;;
    master)   echo "master worker smtpd delivery config dkim spool router smtp proxy dns common" ;;
    mtactl)   echo "mtactl config dkim spool router smtp proxy dns common" ;;
    sendmail) echo "sendmail config common" ;;
    *)        echo "" ;;
    esac
}

public() {      # the headers module $1 offers to the others
    case $1 in
    common) echo "*" ;;
    router) echo "router/router.h router/route.h" ;;
    *)      echo "$1/$1.h" ;;
    esac
}

for f in $(find . -path ./build -prune -o -path ./build-asan -prune -o \
        -path ./build-fuzz -prune -o -path ./.git -prune -o \
        \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort); do
    mod=${f%%/*}
    case $mod in tests|bench) continue ;; esac
    [ "$mod" = "$f" ] && continue                 # top-level file
    ok=$(allowed "$mod")
    if [ -z "$ok" ]; then
        echo "$f: module '$mod' has no layering rule (add it to tests/layering.sh)"
        continue
    fi
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    while IFS= read -r line; do
        n=${line%%:*}
        hdr=$(printf '%s' "$line" | sed 's/^[^"]*"\([^"]*\)".*/\1/')
        to=${hdr%%/*}
        [ "$to" = "$hdr" ] && continue            # same-folder include
        case " $ok " in
        *" $to "*) ;;
        *) echo "$f:$n: $mod may not include $hdr"; continue ;;
        esac
        [ "$to" = "$mod" ] && continue
        pub=$(public "$to")
        case $hdr in *_int.h) pub="" ;; esac
        case " $pub " in
        *" $hdr "*|" * ") ;;
        *) echo "$f:$n: $hdr is internal to $to/ (its contract: $pub)" ;;
        esac
    done
done > "${TMPDIR:-/tmp}/layering.$$"
if [ -s "${TMPDIR:-/tmp}/layering.$$" ]; then
    cat "${TMPDIR:-/tmp}/layering.$$"
    rm -f "${TMPDIR:-/tmp}/layering.$$"
    echo "layering: FAILED"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/layering.$$"
echo "layering: every include follows the module rules"
