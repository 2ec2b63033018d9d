#!/usr/bin/env bash
# The acmecerts demo: on a fresh Debian machine (as root), install what is needed, start a
# local Pebble (Let's Encrypt's ACME test server) and issue a certificate from it with the
# acmecerts CLI, twice (the second run reuses the stored account).
#
# Installs: the Debian packages pebble (if /usr/bin/pebble is missing) and python3-venv
# (if Python cannot create a virtual environment), then a .venv in the repository with
# `pip install -e '.[cli]'`. Re-running it reuses both.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=()
if [[ ! -x /usr/bin/pebble || ! -x /usr/bin/pebble-challtestsrv ]]; then
    packages+=(pebble)
fi
if ! command -v python3 >/dev/null 2>&1; then
    packages+=(python3 python3-venv)
elif ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    packages+=(python3-venv)
fi
if ((${#packages[@]})); then
    if [[ ${EUID} -ne 0 ]]; then
        echo "demo.sh: run as root to install ${packages[*]} (apt-get), or install them first" >&2
        exit 1
    fi
    echo "Installing Debian packages: ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
fi

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "demo.sh: acmecerts needs Python 3.11 or newer, found $(python3 --version)" >&2
    exit 1
fi

# Pebble 2.10 (Let's Encrypt's profiles, ARI), unpacked from Debian's package into the cache;
# without it the demo runs Debian's Pebble 2.4.
bash scripts/pebble-2.10.sh >/dev/null || echo "demo.sh: Pebble 2.10 unavailable; using Debian's Pebble 2.4" >&2

if [[ ! -x .venv/bin/python ]]; then
    echo "Creating .venv"
    python3 -m venv .venv
fi
echo "Installing acmecerts into .venv (pip install -e '.[cli]')"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[cli]'

echo
exec .venv/bin/python -m acmecerts.testing.demo
