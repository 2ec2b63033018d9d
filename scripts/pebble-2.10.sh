#!/usr/bin/env bash
# Pebble 2.10 for the tests and `python -m acmecerts.testing pebble`, without touching the
# system's apt configuration: download Debian sid's `pebble` binary package (2.10.0: pebble
# and pebble-challtestsrv, which need only glibc >= 2.34 and so run on bookworm) with a
# private sources list and apt state, and unpack it with `dpkg-deb -x` into
#   ${ACMECERTS_CACHE:-~/.cache/acmecerts}/pebble-2.10.0
# Prints the directory holding the two binaries. A second run finds them there and returns.
set -euo pipefail

version=2.10.0
cache="${ACMECERTS_CACHE:-$HOME/.cache/acmecerts}"
target="$cache/pebble-$version"
bin="$target/usr/bin"

if [[ -x "$bin/pebble" && -x "$bin/pebble-challtestsrv" ]]; then
    printf '%s\n' "$bin"
    exit 0
fi

log() { printf 'scripts/pebble-2.10.sh: %s\n' "$*" >&2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/acmecerts-pebble-apt.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
printf 'deb http://deb.debian.org/debian sid main\n' >"$work/sources.list"
apt_private=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache::archives=$work/archives"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
)
log "downloading Debian sid's pebble package (private apt state in $work)"
apt-get "${apt_private[@]}" update -qq >/dev/null
(cd "$work" && apt-get "${apt_private[@]}" download "pebble=$version*" >/dev/null 2>&1) || {
    log "pebble $version is not in sid any more; taking sid's current pebble"
    (cd "$work" && apt-get "${apt_private[@]}" download pebble >/dev/null)
}
deb="$(ls "$work"/pebble_*.deb)"
mkdir -p "$cache"
rm -rf "$target.partial"
dpkg-deb -x "$deb" "$target.partial"
rm -rf "$target"
mv "$target.partial" "$target"
"$bin/pebble" -version >/dev/null 2>&1 || {
    log "the unpacked $bin/pebble does not run"
    exit 1
}
log "Pebble 2.10 unpacked into $target"
printf '%s\n' "$bin"
