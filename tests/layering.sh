#!/bin/sh
# layering.sh ROOT [BUILD] - check the modules of the tree at ROOT against
# the module graph of ROOT/mk/modules.mk (docs/ARCHITECTURE.md, "Dependency
# rules"):
#   - the graph: every module a deps_ line names has a line of its own, a
#     line lists what the modules it lists use (the closure), no module
#     uses itself, and MODS puts each library before the ones it uses;
#   - includes, "..." and <...> alike: a module's files include its own
#     headers and those of the modules it may use, never one above it;
#     from another module only its contract (pub_<m>, else <m>/<m>.h);
#     *_int.h never (a file named by a seam_<file> line may include the
#     headers listed there too); tests/ and bench/ may include anything;
#   - with BUILD, calls: every symbol a module's objects leave undefined
#     (BUILD/lib/lib<m>.a for a library, BUILD/obj-<m>/*.o for a program,
#     BUILD/<m>/main.o) is defined by the module itself, by a library it
#     may use, or by no library of the tree (the C library, OpenSSL, ...);
#     no symbol is defined by two libraries.
# Exit 0 when all holds, 1 (listing each offence, FILE:LINE: for an
# include) when not, 2 on a usage error.
set -u
root=${1:-.}
build=${2:-}
cd "$root" || exit 2
[ -r mk/modules.mk ] || { echo "layering: $root/mk/modules.mk: missing" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# The graph as "deps M A B...", "pub M H...", "mods A B..." lines.
sed -n 's/^deps_\([a-z0-9_]*\)[[:space:]]*:*=\(.*\)$/deps \1 \2/p
        s/^pub_\([a-z0-9_]*\)[[:space:]]*:*=\(.*\)$/pub \1 \2/p
        s/^seam_\([^[:space:]:=]*\)[[:space:]]*:*=\(.*\)$/seam \1 \2/p
        s/^MODS[[:space:]]*:*=\(.*\)$/mods \1/p' mk/modules.mk > "$tmp/graph"
# READ_GRAPH: the awk code that loads the graph file (the first input).
READ_GRAPH='
function has(list, w) { return index(" " list " ", " " w " ") > 0 }
FNR == NR {
    if ($1 == "mods") { for (i = 2; i <= NF; i++) at[$i] = i }
    else if ($1 == "deps") { d = ""; for (i = 3; i <= NF; i++) d = d " " $i; deps[$2] = d }
    else if ($1 == "pub") { p = ""; for (i = 3; i <= NF; i++) p = p " " $i; pub[$2] = p }
    else if ($1 == "seam") { p = ""; for (i = 3; i <= NF; i++) p = p " " $i; seam[$2] = p }
    next
}'
bad=0

awk "$READ_GRAPH"'
function say(what) { print "mk/modules.mk: " what; bad = 1 }
END {
    for (m in deps) {
        n = split(deps[m], u, " ")
        for (i = 1; i <= n; i++) {
            y = u[i]
            if (!(y in deps)) { say("deps_" m " names " y ", which has no deps_ line"); continue }
            if (y == m) say("deps_" m " lists " m " itself")
            k = split(deps[y], v, " ")
            for (j = 1; j <= k; j++)
                if (v[j] == m) say(m " and " y " use each other")
                else if (!has(deps[m], v[j]))
                    say("deps_" m " lists " y " but not " v[j] ", which " y " uses")
            if (!(m in at)) continue
            if (!(y in at)) say("the library " m " uses the program " y)
            else if (at[y] < at[m]) say("MODS puts " y " before " m ", which uses it")
        }
    }
    for (m in at) if (!(m in deps)) say(m " is in MODS but has no deps_ line")
    for (m in pub) if (!(m in deps)) say("pub_" m " is for a module with no deps_ line")
    exit bad
}' "$tmp/graph" /dev/null || bad=1

# The folders of ROOT: an <x/...> include with such a folder (or module) x
# is the project's own, found through -I., not a system header.
dirs=$(find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' | sed 's|^\./||' | tr '\n' ' ')
find . -path ./build -prune -o -path ./build-asan -prune -o \
    -path ./build-fuzz -prune -o -path ./.git -prune -o \
    -path ./tests -prune -o -path ./bench -prune -o \
    \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort |
while IFS= read -r f; do
    case $f in */*) ;; *) continue ;; esac         # top-level file
    grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$f" ||
        echo "$f:0:#include \"\""                 # a file with no include
done > "$tmp/includes"
awk -v dirs=" $dirs " "$READ_GRAPH"'
{
    f = $0; sub(/:.*/, "", f)
    rest = substr($0, length(f) + 2)
    n = rest; sub(/:.*/, "", n)
    hdr = rest; sub(/^[^"<]*["<]/, "", hdr); sub(/[">].*/, "", hdr)
    mod = f; sub(/\/.*/, "", mod)
    if (!(mod in deps)) {
        if (!(mod in told)) {
            print f ": module \x27" mod "\x27 has no layering rule (add it to mk/modules.mk)"
            told[mod] = 1; bad = 1
        }
        next
    }
    if (hdr == "" || index(hdr, "/") == 0) next  # same-folder (or system) header
    to = hdr; sub(/\/.*/, "", to)
    if (rest ~ /include[[:space:]]*</ && !(to in deps) && !has(dirs, to))
        next                                     # <openssl/ssl.h>
    if (to != mod && !has(deps[mod], to)) {
        print f ":" n ": " mod " may not include " hdr; bad = 1; next
    }
    if (to == mod) next
    p = (to in pub) ? pub[to] : " " to "/" to ".h"
    if (has(seam[f], hdr)) next                 # the seam of one named file
    if (hdr ~ /_int\.h$/ || (p != " *" && !has(p, hdr))) {
        print f ":" n ": " hdr " is internal to " to "/ (its contract:" p ")"
        bad = 1
    }
}
END {
    if (bad) exit 1
    print "layering: every include follows the module rules"
}' "$tmp/graph" "$tmp/includes" || bad=1

if [ -z "$build" ]; then
    echo "layering: calls not checked (no BUILD directory given)"
else
    # "MODULE LIBRARY? OBJECT SYMBOL TYPE" for every global symbol.
    : > "$tmp/symbols"
    for m in $(awk '$1 == "deps" { print $2 }' "$tmp/graph"); do
        set --
        lib=no
        case " $(sed -n 's/^mods //p' "$tmp/graph") " in
        *" $m "*) lib=yes; set -- "$build/lib/lib$m.a" ;;
        esac
        for o in "$build/obj-$m"/*.o "$build/$m/main.o"; do
            [ -f "$o" ] && set -- "$@" "$o"
        done
        if [ $# = 0 ] || { [ $lib = yes ] && [ ! -f "$1" ]; }; then
            echo "layering: $build has no objects of $m (build them first: make layering)"
            bad=1; continue
        fi
        nm -A -P -g "$@" > "$tmp/nm" || { bad=1; continue; }
        sed "s/: */ /; s/^/$m $lib /" "$tmp/nm" >> "$tmp/symbols"
    done
    awk -v build="$build/" "$READ_GRAPH"'
    $5 !~ /^[Uwv]$/ {                   # defined here
        self[$1, $4] = 1
        if ($2 == "yes") {
            if (($4 in owner) && owner[$4] != $1) {
                print "layering: " $4 " is defined by both " owner[$4] " and " $1
                bad = 1
            }
            owner[$4] = $1
        }
        next
    }
    { use[++nuse] = $1 " " $3 " " $4 }
    END {
        for (i = 1; i <= nuse; i++) {
            split(use[i], u, " ")
            m = u[1]; s = u[3]
            if ((m, s) in self || !(s in owner) || has(deps[m], owner[s]))
                continue
            key = u[2] ": " m " may not use " owner[s]
            if (!(key in calls)) order[++n] = key
            calls[key] = calls[key] " " s
        }
        for (k = 1; k <= n; k++) {
            line = order[k]
            if (index(line, build) == 1) line = substr(line, length(build) + 1)
            print line " (it calls" calls[order[k]] ")"
        }
        if (n || bad) exit 1
        print "layering: every call follows the module rules"
    }' "$tmp/graph" "$tmp/symbols" || bad=1
fi

if [ $bad != 0 ]; then
    echo "layering: FAILED"
    exit 1
fi
exit 0
