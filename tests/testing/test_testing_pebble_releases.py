"""Pebble 2.10 and 2.4 side by side: which binaries run, what each CA offers, and the
``python -m acmecerts.testing pebble`` command that runs one for a user until Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from acmecerts.testing import LETS_ENCRYPT_PROFILES, PebbleNotFound, PebbleServer, find_pebble
from acmecerts.testing._binaries import _release_of

if TYPE_CHECKING:
    from collections.abc import Callable

    PebbleFactory = Callable[..., PebbleServer]


def _directory(server: PebbleServer) -> dict[str, object]:
    ctx = ssl.create_default_context(cafile=str(server.ca_bundle))
    with httpx.Client(verify=ctx, trust_env=False, timeout=10) as http:
        answer = http.get(server.directory_url)
    answer.raise_for_status()
    directory: dict[str, object] = answer.json()
    return directory


def test_the_session_pebble_is_2_10_with_lets_encrypts_profiles_and_ari(
    pebble: PebbleServer,
) -> None:
    assert pebble.release == "2.10"
    directory = _directory(pebble)
    meta = directory["meta"]
    assert isinstance(meta, dict)
    assert set(meta["profiles"]) == {"classic", "tlsserver", "shortlived"}
    assert "renewalInfo" in directory
    config = json.loads(pebble.config_path.read_text())["pebble"]
    assert {name: p["validityPeriod"] for name, p in config["profiles"].items()} == {
        "classic": 90 * 86400,
        "tlsserver": 45 * 86400,
        "shortlived": 160 * 3600,
    }


def test_the_compatibility_pebble_is_2_4_without_profiles_or_ari(
    pebble_2_4: PebbleServer,
) -> None:
    assert pebble_2_4.release == "2.4"
    assert pebble_2_4.profiles == {}
    directory = _directory(pebble_2_4)
    meta = directory.get("meta")
    assert isinstance(meta, dict)
    assert "profiles" not in meta
    assert "renewalInfo" not in directory


def test_profiles_and_retry_after_are_written_to_a_2_10_config(
    pebble_factory: PebbleFactory,
) -> None:
    only = {"shortlived": LETS_ENCRYPT_PROFILES["shortlived"]}
    server = pebble_factory(profiles=only, retry_after_authz=1, retry_after_order=2)
    meta = _directory(server)["meta"]
    assert isinstance(meta, dict)
    assert list(meta["profiles"]) == ["shortlived"]
    config = json.loads(server.config_path.read_text())["pebble"]
    assert config["retryAfter"] == {"authz": 1, "order": 2}


def test_release_is_told_by_the_challtestsrv_flags() -> None:
    assert _release_of(find_pebble("2.4").challtestsrv) == "2.4"
    assert _release_of(find_pebble("2.10").challtestsrv) == "2.10"


def test_a_pebble_dir_without_the_binaries_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACMECERTS_PEBBLE_DIR", str(tmp_path))
    with pytest.raises(PebbleNotFound, match="ACMECERTS_PEBBLE_DIR"):
        find_pebble()


def test_a_missing_2_10_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACMECERTS_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PebbleNotFound, match=r"pebble-2\.10\.sh"):
        find_pebble("2.10")
    server = PebbleServer(tmp_path / "w")
    with pytest.raises(RuntimeError, match="Pebble not found"):
        server.start()


@pytest.mark.timeout(60)
def test_python_m_acmecerts_testing_pebble_prints_exports_and_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "pebble.env"
    command = [sys.executable, "-m", "acmecerts.testing", "pebble", "--env-file", str(env_file)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 40
        while not env_file.exists() or not env_file.read_text().endswith("\n"):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no export lines after 40 s"
            time.sleep(0.05)
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in env_file.read_text().splitlines()
        )
        assert set(exports) >= {"ACMECERTS_DIRECTORY", "ACMECERTS_CA_BUNDLE"}
        ctx = ssl.create_default_context(cafile=exports["ACMECERTS_CA_BUNDLE"])
        with httpx.Client(verify=ctx, trust_env=False, timeout=10) as http:
            directory = http.get(exports["ACMECERTS_DIRECTORY"]).json()
        assert set(directory["meta"]["profiles"]) == {"classic", "tlsserver", "shortlived"}
        workdir = Path(exports["ACMECERTS_CA_BUNDLE"]).parent
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err
    assert "export ACMECERTS_DIRECTORY=" in out
    assert "stopping Pebble" in err
    assert not workdir.exists(), "the temporary directory outlived Ctrl-C"
