"""A real certbot for the migration tests: :func:`ensure_certbot_venv` and :func:`run_certbot`.

certbot pins its own ``acme`` and ``josepy``, so it lives in its **own virtualenv**, made once
with ``python3 -m venv V && V/bin/pip install certbot==CERTBOT_VERSION`` (about 30-60 s) at
``$ACMECERTS_CACHE/certbot-venv`` (default ``~/.cache/acmecerts/certbot-venv``) and reused
afterwards; ``scripts/test.sh`` builds it before pytest so the install does not count against a
test's timeout. :func:`run_certbot` runs ``certbot certonly`` against an ACME server (Pebble)
with every directory certbot writes (config, work, logs) under one directory of the test.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CERTBOT_VERSION", "default_certbot_venv", "ensure_certbot_venv", "run_certbot"]

#: The certbot release the tests install and are tested with.
CERTBOT_VERSION = "5.8.0"

_INSTALL_TIMEOUT = 900.0
_MARKER = ".acmecerts-certbot-version"


def default_certbot_venv() -> Path:
    """``${ACMECERTS_CACHE:-~/.cache/acmecerts}/certbot-venv``."""
    cache = os.environ.get("ACMECERTS_CACHE") or os.path.join("~", ".cache", "acmecerts")
    return Path(cache).expanduser() / "certbot-venv"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def ensure_certbot_venv(venv: Path | None = None, *, version: str = CERTBOT_VERSION) -> Path:
    """Create the virtualenv with ``certbot==version`` unless it is already there.

    Returns the venv's ``certbot`` program. The venv is complete once it holds a marker
    file naming the version; anything else at that path is removed and rebuilt. A lock file
    next to it keeps concurrent test sessions from building it twice.

    Raises:
        RuntimeError: ``venv`` creation or ``pip install`` failed (with pip's output).
    """
    venv = Path(venv) if venv is not None else default_certbot_venv()
    program = venv / "bin" / "certbot"
    marker = venv / _MARKER
    if _read(marker) == version and program.exists():
        return program
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if _read(marker) == version and program.exists():
            return program  # built by someone else while we waited
        if venv.exists():
            shutil.rmtree(venv)
        base = sys.executable or shutil.which("python3") or "python3"
        steps = [
            [base, "-m", "venv", str(venv)],
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"certbot=={version}",
            ],
        ]
        for argv in steps:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=_INSTALL_TIMEOUT,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(f"{' '.join(argv)} failed: {exc}") from exc
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(
                    f"{' '.join(argv)} exited with {done.returncode}\n"
                    f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
                )
        marker.write_text(version + "\n", encoding="ascii")
    return program


def run_certbot(
    program: Path,
    base: Path,
    args: Sequence[str],
    *,
    server: str,
    ca_bundle: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 90.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``certbot ARGS`` with its config, work and logs directories under ``base``.

    ``server`` is the ACME directory URL; ``ca_bundle`` is trusted for it
    (``REQUESTS_CA_BUNDLE``). Raises :class:`AssertionError` with certbot's output when it
    exits non-zero.
    """
    argv = [
        str(program),
        *args,
        "--server",
        server,
        "--config-dir",
        str(base / "config"),
        "--work-dir",
        str(base / "work"),
        "--logs-dir",
        str(base / "logs"),
        "--agree-tos",
        "--register-unsafely-without-email",
        "--non-interactive",
        "--no-random-sleep-on-renew",
    ]
    environment = {**os.environ, **(env or {}), "REQUESTS_CA_BUNDLE": str(ca_bundle)}
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited with {done.returncode}\n{done.stdout[-4000:]}"
            f"{done.stderr[-4000:]}"
        )
    return done
