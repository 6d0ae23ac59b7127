#!/usr/bin/env bash
# Builds the programs of one module under tools/ (its go.mod's `tool` lines) into BIN, by way of
# a cache of linked programs beside Go's own caches: Go caches compiled packages but links a
# program again on every `go install`, about 45 s of CPU for the eight modules on each fresh
# clone. The cache is keyed by everything the link reads (go.mod, go.sum, Go's version, the
# platform, the tags and ldflags), so a change to any of them builds again.
#   tools/build-programs.sh MODULE BIN CACHE TAGS LDFLAGS
set -euo pipefail
export GOTOOLCHAIN=local
module=$1 bin=$2 cache=$3 tags=$4 ldflags=$5 go=${GO:-go}
dir=tools/$module
key=$({ cat "$dir/go.mod" "$dir/go.sum"; "$go" version; "$go" env GOOS GOARCH CGO_ENABLED
        printf '%s\n' "$tags" "$ldflags"; } | sha256sum | cut -c1-32)
kept=$cache/$module-$key
mkdir -p "$bin" "$cache"
if [ ! -f "$kept/.complete" ]; then
    scratch=$(mktemp -d "$cache/.$module.XXXXXX") && chmod 755 "$scratch"
    trap 'rm -rf "$scratch"' EXIT
    (cd "$dir" && GOFLAGS=-mod=readonly GOBIN="$scratch" \
        "$go" install -trimpath -tags "$tags" -ldflags "$ldflags" tool)
    touch "$scratch/.complete"
    # Another run building the same key at once may have kept it first: either copy serves.
    mv -T "$scratch" "$kept" 2>/dev/null || true
fi
for program in "$kept"/*; do
    ln -f "$program" "$bin/" 2>/dev/null || cp -f "$program" "$bin/"
done
