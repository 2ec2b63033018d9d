#!/usr/bin/env bash
# Build (once) and cache a real `kube-apiserver` for the Kubernetes storage tests.
#
#   bash scripts/kube-apiserver.sh      # prints the path of the binary
#
# Debian has no kube-apiserver binary, but its `kubernetes` source package (1.20.2) builds one
# with Debian's Go, offline. The binary is cached outside the repository, under
#   ${ACMECERTS_CACHE:-$HOME/.cache/acmecerts}/kube-apiserver-1.20.2/kube-apiserver
# and never committed. When it exists this script prints its path and exits at once.
#
# Cold build: about 14 CPU-minutes (4-8 minutes on 2 idle cores, longer on a busy machine)
# and 1.3 GB of memory; needs root (or sudo) for apt-get. Steps:
#   1. apt-get install etcd-server golang-go rsync jq dpkg-dev golang-github-modern-go-reflect2-dev
#   2. enable deb-src for bookworm main (a separate deb822 file), apt-get update
#   3. apt-get source --download-only kubernetes; dpkg-source -x
#   4. replace vendor/github.com/modern-go/reflect2 with Debian's copy (the vendored one is
#      too old for Debian's Go: the server crashes under load without this)
#   5. make WHAT=cmd/kube-apiserver with CGO_ENABLED=0 and GOPATH/GOCACHE/HOME in the cache
# Only the path goes to stdout; progress goes to stderr.
set -euo pipefail

version=1.20.2
cache="${ACMECERTS_CACHE:-${HOME:-/root}/.cache/acmecerts}"
dir="$cache/kube-apiserver-$version"
bin="$dir/kube-apiserver"

if [ -x "$bin" ]; then
    printf '%s\n' "$bin"
    exit 0
fi

log() { printf 'scripts/kube-apiserver.sh: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root (or sudo) to run: $*"
        exit 1
    fi
}

mkdir -p "$dir"
# One build at a time (two test runs starting together share the result).
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ]; then
    printf '%s\n' "$bin"
    exit 0
fi

start=$SECONDS
export DEBIAN_FRONTEND=noninteractive

# apt-get that waits (up to 10 minutes) for another apt/dpkg run to finish.
apt() {
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
        if as_root apt-get -o DPkg::Lock::Timeout=60 "$@"; then
            return 0
        fi
        log "apt-get $* failed (attempt $try); retrying in 10 s"
        sleep 10
    done
    as_root apt-get "$@"
}

# 1. Build tools, etcd for the tests, and Debian's reflect2.
log "installing build dependencies"
apt update -qq >/dev/null
apt install -y -qq --no-install-recommends \
    etcd-server golang-go rsync jq dpkg-dev golang-github-modern-go-reflect2-dev make \
    ca-certificates >/dev/null

# 2. Source packages for bookworm main (the image ships binary sources only).
srcfile=/etc/apt/sources.list.d/acmecerts-deb-src.sources
if ! grep -rqsE '^[[:space:]]*(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "adding $srcfile"
    as_root tee "$srcfile" >/dev/null <<'SOURCES'
# Added by acmecerts scripts/kube-apiserver.sh: source packages, to build kube-apiserver.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi
apt update -qq >/dev/null

# 3. The kubernetes source package, unpacked (debian/patches applied) into the cache.
build="$dir/build"
src="$build/src"
mkdir -p "$build"
if [ ! -f "$src/.unpacked" ]; then
    rm -rf "$src" "$build/dl"
    mkdir -p "$build/dl"
    log "downloading the kubernetes source package"
    # bookworm's version string is 1.20.5+really1.20.2-...: the 1.20.2 sources.
    (cd "$build/dl" && apt-get source -qq --download-only kubernetes >/dev/null)
    dsc="$(ls "$build/dl"/kubernetes_*.dsc | head -n1)"
    log "unpacking $(basename "$dsc")"
    dpkg-source -x "$dsc" "$src" >/dev/null
    touch "$src/.unpacked"
fi

# 4. Debian's reflect2 instead of the vendored one.
rm -rf "$src/vendor/github.com/modern-go/reflect2"
mkdir -p "$src/vendor/github.com/modern-go"
cp -a /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"

# 5. Build, offline, with every Go cache inside the build directory.
log "building kube-apiserver (about 14 CPU-minutes)"
export HOME="$build/home" GOPATH="$build/gopath" GOCACHE="$build/gocache"
export GOFLAGS=-mod=vendor GOPROXY=off GO111MODULE=on GOTOOLCHAIN=local CGO_ENABLED=0
export KUBE_GIT_VERSION="v$version" KUBE_GIT_TREE_STATE=clean
mkdir -p "$HOME" "$GOPATH" "$GOCACHE"
make -C "$src" WHAT=cmd/kube-apiserver >"$build/make.log" 2>&1 || {
    log "make failed; the last lines of $build/make.log:"
    tail -n 40 "$build/make.log" >&2
    exit 1
}
out="$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -n1)"
if [ -z "$out" ]; then
    log "build finished but no kube-apiserver under $src/_output"
    exit 1
fi
"$out" --version >&2
cp "$out" "$bin.tmp"
mv "$bin.tmp" "$bin"
log "built $bin in $((SECONDS - start)) s"

# The sources and Go caches (several GB) are no longer needed.
chmod -R u+w "$build" 2>/dev/null || true
rm -rf "$build"
printf '%s\n' "$bin"
