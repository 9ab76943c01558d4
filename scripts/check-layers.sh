#!/bin/sh
# Checks the layer rules of cmake/layers.txt (docs/build.md "Layers").
#
#   scripts/check-layers.sh [ROOT]              the includes of ROOT/src and ROOT/include/lpo (ROOT: the
#                                               checkout this script lives in)
#   scripts/check-layers.sh --links LIB...      the symbols of the module libraries, given lowest layer first
#
# Includes: every #include "..." of a file of src/<module>/ or of a public header include/lpo/<name>.h
# (owned by the module cmake/layers.txt names for it) must be
#   - "lpo/<name>.h" of a module at or below the includer's layer (every public header has an owner), or
#   - "<module>/..." of the includer's own module (another module's internal header is refused), or
#   - a header next to the includer ("x.h"), or an allowed exception ("allow <file> <header>" lines; one
#     that matches no include any more fails too, so exceptions do not outlive their reason).
# Links: no module library may use a symbol that a library of a higher layer defines (a call up the layers;
# the link order catches it too, but only when no other path pulled the higher object in first).
# Prints one line per violation and exits 1 when there is any; 0 and nothing else when the tree is clean.
set -eu

if [ "${1:-}" = "--links" ]; then
    shift
    [ $# -ge 1 ] || { echo "check-layers: --links needs the module libraries, lowest layer first" >&2; exit 2; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    rank=0
    for lib in "$@"; do
        rank=$((rank + 1))
        [ -f "$lib" ] || { echo "check-layers: no library $lib" >&2; exit 2; }
        name=$(basename "$lib" .a)
        # defined (global) and undefined symbols, one per line: rank, library, object, symbol
        nm -A -g --defined-only "$lib" 2>/dev/null |
            awk -v r=$rank -v l="$name" 'NF >= 3 && $(NF-1) != "U" && $(NF-1) != "w" && $(NF-1) != "v" {
                n = split($1, p, ":"); print r, l, p[n-1], $NF }' >>"$tmp/def"
        nm -A -u "$lib" 2>/dev/null |
            awk -v r=$rank -v l="$name" '{ n = split($1, p, ":"); print r, l, p[n-1], $NF }' >>"$tmp/use"
    done
    touch "$tmp/def" "$tmp/use"
    awk 'FNR == NR { if (!($4 in lo) || $1 < lo[$4]) { lo[$4] = $1; lib[$4] = $2; obj[$4] = $3 } next }
         ($4 in lo) && lo[$4] > $1 {
             printf "check-layers: %s (%s) calls %s of %s (%s), a higher layer\n", $2, $3, $4, lib[$4], obj[$4]
             bad = 1 }
         END { exit bad }' "$tmp/def" "$tmp/use" || exit 1
    exit 0
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
table="$root/cmake/layers.txt"
[ -f "$table" ] || { echo "check-layers: no $table" >&2; exit 2; }

# every file to check, as "<module or lpo/name.h> <path relative to root>"
files=$(cd "$root" && {
    find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort
    find include/lpo -type f -name '*.h' | sort
})

(cd "$root" && for f in $files; do
    # one line per include: file, line number, included path
    awk -v f="$f" '/^[ \t]*#[ \t]*include[ \t]*"/ {
        s = $0; sub(/^[^"]*"/, "", s); sub(/".*$/, "", s); print f, FNR, s }' "$f"
done) | awk -v table="$table" -v root="$root" '
    BEGIN {
        while ((getline line < table) > 0) {
            if (line ~ /^[ \t]*(#|$)/) continue
            n = split(line, w, /[ \t]+/)
            if (w[1] == "allow") { allow[w[2] " " w[3]] = 1; continue }
            rank[w[1]] = ++nmod
            for (i = 2; i <= n; i++) {
                if (w[i] in owner) err("cmake/layers.txt: include/lpo/" w[i] ".h has two owners")
                owner[w[i]] = w[1]
            }
        }
        # every public header has an owner, every owned header exists
        cmd = "cd \"" root "\" && ls include/lpo"
        while ((cmd | getline h) > 0) {
            if (h !~ /\.h$/) continue
            name = h; sub(/\.h$/, "", name); seen[name] = 1
            if (!(name in owner))
                err("include/lpo/" h ": no owning module in cmake/layers.txt (add " name " to its line)")
        }
        close(cmd)
        for (name in owner)
            if (!(name in seen)) err("cmake/layers.txt: include/lpo/" name ".h does not exist")
        # every folder of src/ is a module
        cmd = "cd \"" root "\" && ls src"
        while ((cmd | getline d) > 0) {
            if (system("test -d \"" root "/src/" d "\"") == 0 && !(d in rank))
                err("src/" d "/: not a module of cmake/layers.txt (give it its place in the layer order)")
        }
        close(cmd)
    }
    function err(msg) { print "check-layers: " msg; bad = 1 }
    {
        file = $1; line = $2; inc = $3
        if (file ~ /^include\/lpo\//) {
            name = file; sub(/^include\/lpo\//, "", name); sub(/\.h$/, "", name)
            mod = owner[name]
            if (mod == "") next # reported above
        } else {
            mod = file; sub(/^src\//, "", mod); sub(/\/.*$/, "", mod)
            if (!(mod in rank)) next # reported above
        }
        where = file ":" line ": "
        rel = file; sub(/^src\//, "", rel)
        if ((rel " " inc) in allow) { used[rel " " inc] = 1; next }
        if (inc ~ /^lpo\//) {
            name = inc; sub(/^lpo\//, "", name); sub(/\.h$/, "", name)
            if (!(name in owner)) {
                if (inc ~ /\.h$/ && name !~ /\//) next # reported above when it exists
                err(where "includes " inc ", not a public header of cmake/layers.txt"); next
            }
            o = owner[name]
            if (rank[o] > rank[mod])
                err(where mod " includes " inc " of " o ", a higher layer (cmake/layers.txt)")
            next
        }
        if (inc !~ /\//) next # a header next to the includer (or generated)
        top = inc; sub(/\/.*$/, "", top)
        if (file ~ /^include\//)
            err(where "public header includes the internal header " inc)
        else if (top != mod && (top in rank))
            err(where mod " includes " inc ", an internal header of " top \
                " (share it through a public header of " top ")")
        else if (top != mod)
            err(where "includes " inc ", outside every module")
    }
    END {
        for (a in allow)
            if (!(a in used)) err("cmake/layers.txt: \"allow " a "\" matches no include any more: remove the line")
        exit bad
    }'
