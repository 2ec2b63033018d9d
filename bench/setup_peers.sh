#!/usr/bin/env bash
# Install the peer ACME clients the benchmark compares acmecerts with, each in its own
# virtual environment under ${ACMECERTS_CACHE:-~/.cache/acmecerts}/bench-peers/.
# None of them is a dependency of acmecerts; bench/run.py calls this when a peer is missing.
#
#   bash bench/setup_peers.sh            # idempotent: skips what is already installed
#   FORCE=1 bash bench/setup_peers.sh    # recreate the venvs
#   bash bench/setup_peers.sh --tools    # also py-spy and matplotlib (bench-tools/ venv): profiles, chart
#
# Peers:
#   certbot-acme/  certbot's `acme` library (ClientV2, synchronous, used from a thread pool)
#   aioacme/       aioacme from PyPI (asyncio)
#   lego           Debian's `lego` package (Go binary, /usr/bin/lego), via apt-get
set -euo pipefail

PY=${PYTHON:-python3}
ROOT="${ACMECERTS_CACHE:-$HOME/.cache/acmecerts}/bench-peers"
ACME_VERSION=${ACME_VERSION:-5.9.0}
AIOACME_VERSION=${AIOACME_VERSION:-0.6.0}
mkdir -p "$ROOT"

make_venv() {  # name, pip requirement..., then the import that proves it works
    local name=$1 check=$2
    shift 2
    local venv="$ROOT/$name"
    if [[ -z "${FORCE:-}" && -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
        echo "bench-peers: $name already installed in $venv"
        return
    fi
    rm -rf "$venv"
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    "$venv/bin/python" -c "$check"
    echo "bench-peers: installed $name in $venv ($("$venv/bin/python" -m pip freeze | tr '\n' ' '))"
}

make_venv certbot-acme "import acme.client, josepy" "acme==$ACME_VERSION"
make_venv aioacme "import aioacme" "aioacme==$AIOACME_VERSION"

if ! command -v lego >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q lego >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q lego >/dev/null; }
    else
        echo "bench-peers: lego missing; install Debian's package: apt-get install -y lego" >&2
        exit 1
    fi
fi
echo "bench-peers: lego $(lego --version 2>&1 | head -1)"

if [[ "${1:-}" == "--tools" ]]; then
    TOOLS="$(dirname "$ROOT")/bench-tools"
    if [[ -n "${FORCE:-}" || ! -x "$TOOLS/bin/py-spy" ]] || ! "$TOOLS/bin/python" -c "import matplotlib" 2>/dev/null; then
        rm -rf "$TOOLS"
        "$PY" -m venv "$TOOLS"
        "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check py-spy matplotlib
    fi
    echo "bench-peers: $("$TOOLS/bin/py-spy" --version) in $TOOLS/bin (run.py --py-spy DIR)"
    echo "bench-peers: matplotlib in $TOOLS ($TOOLS/bin/python bench/chart.py RESULTS.json)"
fi
echo "bench-peers: ready in $ROOT"
