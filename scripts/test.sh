#!/usr/bin/env bash
# The test command: `bash scripts/test.sh [pytest arguments...]`.
#
# On a fresh Debian bookworm machine (as root, or with sudo) it installs what the tests need
# and runs pytest in a project virtualenv:
#   1. the Debian package `pebble` (pebble + pebble-challtestsrv) if /usr/bin/pebble is absent;
#   2. a virtualenv in .venv (python3 -m venv) if absent or broken;
#   3. `pip install -e '.[test]'` into it (skipped when pyproject.toml is unchanged since the
#      last successful install; set ACMECERTS_REINSTALL=1 to force it);
#   4. `.venv/bin/python -m pytest "$@"`.
# The exit status is pytest's: collecting no tests (status 5) is a failure, not a success.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'scripts/test.sh: %s\n' "$*" >&2; }

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

apt_install() {
    log "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "${_APT_UPDATED:-}" ]; then
        as_root apt-get update -qq >/dev/null
        _APT_UPDATED=1
    fi
    as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. Pebble, the real ACME server the tests run against.
if [ ! -x /usr/bin/pebble ] || [ ! -x /usr/bin/pebble-challtestsrv ]; then
    apt_install pebble
fi

# 2. The virtualenv. Debian's python3 needs python3-venv for `python3 -m venv` to work.
if ! command -v python3 >/dev/null 2>&1; then
    apt_install python3 python3-venv
fi
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install python3-venv
    fi
    rm -rf .venv
    log "creating .venv"
    python3 -m venv .venv
fi

# 3. The package and its test dependencies.
stamp=.venv/.acmecerts-test-install
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -n "${ACMECERTS_REINSTALL:-}" ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    log "pip install -e '.[test]'"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
    printf '%s\n' "$want" >"$stamp"
fi

# 4. The tests.
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    log "pytest collected no tests: failing"
fi
exit "$status"
