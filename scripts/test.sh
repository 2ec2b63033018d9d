#!/usr/bin/env bash
# The test command: `bash scripts/test.sh [pytest arguments...]`.
#
# On a fresh Debian bookworm machine (as root, or with sudo) it installs what the tests need
# and runs pytest in a project virtualenv:
#   1. the Debian package `pebble` (pebble + pebble-challtestsrv 2.4) if /usr/bin/pebble is
#      absent, and `tinyproxy` (the real HTTP proxy of the egress-proxy tests) if it is absent;
#   1c. Pebble 2.10 (profiles, ARI, replaces checks, dns-account-01, dns-persist-01), the CA of
#      most tests: scripts/pebble-2.10.sh downloads Debian sid's `pebble` package with a
#      private apt state (the system's apt sources are untouched) and unpacks it into
#      ${ACMECERTS_CACHE:-~/.cache/acmecerts}/pebble-2.10.0; later runs find it there;
#   2. a virtualenv in .venv (python3 -m venv) if absent or broken;
#   3. `pip install -e '.[test,kubernetes,docs]'` into it (docs: mkdocs, for the
#      `mkdocs build --strict` test; about 25 s more) (skipped when pyproject.toml is unchanged
#      since the last successful install; set ACMECERTS_REINSTALL=1 to force it);
#   4. acme2certifier's own virtualenv (${ACMECERTS_CACHE:-~/.cache/acmecerts}/a2c-venv), built
#      once here so that its pip install does not count against a test's timeout;
#   4b. a kube-apiserver built once from Debian's source package and etcd, for the Kubernetes
#      store's tests (scripts/kube-apiserver.sh; cached under ~/.cache/acmecerts);
#   5. `.venv/bin/python -m pytest "$@"`, in random order (pytest-randomly: the header says
#      "Using --randomly-seed=N"; `--randomly-seed=N` repeats that order, `-p no:randomly`
#      runs in file order). With ACMECERTS_STRESS=1, `bench/stress.py` runs pytest while a
#      CPU and loopback load (busy processes, the issuance benchmark) runs beside it.
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
# 1a. tinyproxy, a real CONNECT proxy for the HTTPS_PROXY/NO_PROXY tests (tests/servers/tinyproxy.py
#     starts it in the foreground on loopback; the Debian package's own service is not used).
if ! command -v tinyproxy >/dev/null 2>&1; then
    apt_install tinyproxy
fi
# 1b. BIND 9 for the dns-01 tests: named (bind9, bind9-utils) and nsupdate, which Debian 12
#     ships in bind9-dnsutils, not bind9-utils.
if [ ! -x /usr/sbin/named ] || [ ! -x /usr/bin/nsupdate ]; then
    apt_install bind9 bind9-utils bind9-dnsutils
fi
# 1b'. PowerDNS for the LexiconSolver tests (tests/servers/powerdns.py; its own service unused).
if [ ! -x /usr/sbin/pdns_server ]; then apt_install pdns-server pdns-backend-sqlite3; fi

# 1c. Pebble 2.10 from Debian sid, unpacked into the cache (needs only glibc >= 2.34).
bash scripts/pebble-2.10.sh >/dev/null

# 1d. systemd-analyze, which verifies the systemd units in examples/ops/ (Debian's systemd).
if ! command -v systemd-analyze >/dev/null 2>&1; then
    apt_install systemd
fi
command -v promtool >/dev/null 2>&1 || apt_install prometheus # 1e. promtool: examples/ops/prometheus-alerts.yml

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
    log "pip install -e '.[test,kubernetes,docs]'"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,kubernetes,docs]'
    printf '%s\n' "$want" >"$stamp"
fi

# 4. acme2certifier, the second ACME server (with ARI), in its own venv (it pins its own acme).
.venv/bin/python -c 'from tests.servers.a2c import ensure_a2c_venv; ensure_a2c_venv()' ||
    log "could not prepare the acme2certifier venv; its fixture will try again"

# 4a. certbot, for the `acmecerts import certbot` tests, in its own venv (it pins acme/josepy).
.venv/bin/python -c 'from tests.servers.certbot import ensure_certbot_venv; ensure_certbot_venv()' ||
    log "could not prepare the certbot venv; its tests will try again"

# 4b. A real Kubernetes API server for the Kubernetes store's tests (tests/storage/).
#     Debian ships no kube-apiserver binary: scripts/kube-apiserver.sh builds one from Debian's
#     `kubernetes` source package (about 14 CPU-minutes cold; it also installs etcd) and
#     caches it under ${ACMECERTS_CACHE:-~/.cache/acmecerts}; later runs return at once.
#     A failed build does not stop the run: the tests that need it fail, naming the script.
if kube_apiserver="$(bash scripts/kube-apiserver.sh)"; then
    export ACMECERTS_KUBE_APISERVER="$kube_apiserver"
else
    log "scripts/kube-apiserver.sh failed: the Kubernetes storage tests will fail"
fi

# 5. The tests, with their coverage of acmecerts/ measured (ACMECERTS_COVERAGE=0: not).
#    `coverage run` measures pytest and, by [tool.coverage.run] patch = ["subprocess"], every
#    Python child it starts (the CLI runs); the parts go to .coverage.* here, are combined
#    into .coverage and reported, with htmlcov/ to read. After a run of the whole suite
#    (tests/conftest.py says so in $ACMECERTS_COVERAGE_SCOPE) the total must reach
#    [tool.coverage.report] fail_under, the floor; a part of the suite is not held to it.
status=0
if [ -n "${ACMECERTS_STRESS:-}" ]; then
    .venv/bin/python bench/stress.py -- "$@" || status=$?
elif [ "${ACMECERTS_COVERAGE:-1}" = 0 ]; then
    .venv/bin/python -m pytest "$@" || status=$?
else
    rm -f .coverage .coverage.* .coverage-scope
    export COVERAGE_FILE="$PWD/.coverage" ACMECERTS_COVERAGE_SCOPE="$PWD/.coverage-scope"
    .venv/bin/python -m coverage run -m pytest "$@" || status=$?
    if .venv/bin/python -m coverage combine -q; then
        .venv/bin/python -m coverage html -q --skip-covered || true
        if [ "$(cat .coverage-scope 2>/dev/null || true)" = whole ]; then
            if ! .venv/bin/python -m coverage report --skip-covered --sort=cover; then
                log "the coverage of acmecerts/ is below its floor (fail_under, pyproject.toml)"
                [ "$status" -ne 0 ] || status=3
            fi
        else
            .venv/bin/python -m coverage report --fail-under=0 | tail -n 1
            log "a part of the suite ran: its coverage is not held to the floor"
        fi
    fi
fi
if [ "$status" -eq 5 ]; then
    log "pytest collected no tests: failing"
fi
exit "$status"
