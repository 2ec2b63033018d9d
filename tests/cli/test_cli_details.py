"""Small things a user meets: natural order, one ``--json`` shape, a 404 that names its URL,
the state and configuration of root.

The 404 comes from the session Pebble itself (a path it does not serve), in-process through
the library and through the CLI; the uid is injected (never faked process-wide).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_support import (
    assert_one_line_error,
    ca_args,
    clean_environment,
    http01_args,
    one_json,
    run_cli,
    run_main,
)
from hypothesis import given
from hypothesis import strategies as st

from acmecerts.cli._config import find_config_path
from acmecerts.cli._natural import natural_key
from acmecerts.cli._state import SYSTEM_STATE_DIR, default_state_dir
from acmecerts.client import AcmeClient
from acmecerts.errors import AcmeProblem, BadServerResponse, ProblemType
from tests.faults.proxy import FaultProxy, Match, Respond

if TYPE_CHECKING:
    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


# -- natural order ---------------------------------------------------------------------------


def test_natural_order_puts_host2_before_host10() -> None:
    names = ["host10.test", "Host2.test", "host1.test", "host01.test", "a.test", "b.test"]
    assert sorted(names, key=natural_key) == [
        "a.test",
        "b.test",
        "host01.test",
        "host1.test",
        "Host2.test",
        "host10.test",
    ]
    assert sorted(["v1.10", "v1.9", "v1.9a", "v2"], key=natural_key) == [
        "v1.9",
        "v1.9a",
        "v1.10",
        "v2",
    ]
    assert sorted(["10", "9", "x", ""], key=natural_key) == ["", "9", "10", "x"]


@given(st.lists(st.text(alphabet="ab019.-*", max_size=8), max_size=12))
def test_natural_order_is_total_and_deterministic(names: list[str]) -> None:
    ordered = sorted(names, key=natural_key)  # never a TypeError comparing str and int
    assert sorted(reversed(names), key=natural_key) == ordered
    keys = [natural_key(n) for n in ordered]
    assert keys == sorted(keys)
    assert len({natural_key(n) for n in names}) == len(set(names))  # distinct names, keys


# -- one --json shape for one certificate and for a batch ------------------------------------


def test_one_certificate_and_a_batch_print_the_same_shape(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    common = [*ca_args(pebble, state), *http01_args(pebble)]
    single = run_cli("issue", "--json", *common, "one.shape.test")
    (tmp_path / "names.txt").write_text("one.shape.test\ntwo.shape.test\n")
    batch = run_main(capsys, "issue", "--json", *common, "--from-file", str(tmp_path / "names.txt"))
    renew = run_main(capsys, "renew", "--json", *common)
    bad = run_main(capsys, "issue", "--json", *common, "*.shape.test")

    documents = [one_json(r) for r in (single, batch, renew, bad)]
    top = {"status", "exit_code", "error", "problem", "counts", "certificates"}
    for document in documents:
        assert top <= set(document)
    assert [(d["status"], d["exit_code"]) for d in documents] == [
        ("ok", 0),
        ("ok", 0),
        ("ok", 0),
        ("invalid-input", 2),
    ]
    entries = [e for d in documents for e in d["certificates"]]
    assert len(entries) == 5
    fields = {
        "name",
        "status",
        "names",
        "serial",
        "not_before",
        "not_after",
        "order_url",
        "certificate_url",
        "renewal_at",
        "files",
        "until",
        "error",
        "problem",
    }
    for entry in entries:
        assert fields <= set(entry), entry
    assert documents[1]["counts"] == {"current": 1, "issued": 1}
    assert documents[2]["counts"] == {"current": 2}
    assert documents[3]["certificates"] == []


@pytest.mark.parametrize(
    ("args", "shape"),
    [
        (["issue", "--json", "--no-such-option", "x.test"], {"counts": {}, "certificates": []}),
        (["--config", "renew", "renew", "--json", "--bogus"], {"counts": {}, "certificates": []}),
        (["delete", "--json"], {"certificates": []}),
        (["status", "--json", "--bogus"], {}),
    ],
)
def test_a_usage_error_prints_the_commands_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], shape: dict[str, object]
) -> None:
    if args[0] == "--config":
        args[1] = str(tmp_path / "config.toml")
        (tmp_path / "config.toml").write_text("")
    result = run_main(capsys, *args)
    assert_one_line_error(result, 2)
    document = one_json(result)
    assert (document["status"], document["exit_code"]) == ("invalid-input", 2)
    assert {k: v for k, v in document.items() if k in ("counts", "certificates")} == shape


# -- a 404 names the URL ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_404_names_the_method_and_the_url(pebble: PebbleServer) -> None:
    wrong = pebble.directory_url.replace("/dir", "/no-such-directory")
    async with AcmeClient(wrong, ca_bundle=pebble.ca_bundle) as client:
        with pytest.raises(BadServerResponse) as raised:
            await client.directory()
    assert raised.value.status_code == 404
    assert str(raised.value).startswith(f"GET {wrong} answered HTTP 404")


def test_a_wrong_directory_url_is_one_line_with_the_url(
    pebble: PebbleServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = pebble.directory_url.replace("/dir", "/no-such-directory")
    result = run_main(
        capsys,
        "issue",
        *ca_args(pebble, tmp_path / "state", directory=wrong),
        *http01_args(pebble),
        "wrong-url.test",
    )
    line = assert_one_line_error(result, 1)
    assert f"GET {wrong} answered HTTP 404 Not Found" in line


@pytest.mark.anyio
async def test_a_404_problem_document_names_the_request_too(
    pebble: PebbleServer, proxy: FaultProxy
) -> None:
    # a CA that answers a wrong path with a problem document (not Pebble's plain text)
    proxy.add_rule(
        Match("/dir", "GET"),
        Respond(404, ProblemType.MALFORMED.value, detail="404 page not found"),
        times=None,
    )
    async with AcmeClient(proxy.directory_url, ca_bundle=pebble.ca_bundle) as client:
        with pytest.raises(AcmeProblem) as raised:
            await client.directory()
    assert str(raised.value) == f"malformed: 404 page not found (GET {proxy.directory_url})"
    assert raised.value.status_code == 404


# -- root: /var/lib/acmecerts and /etc/acmecerts/config.toml ---------------------------------


def test_the_state_directory_of_root_and_of_anyone_else(tmp_path: Path) -> None:
    xdg = {"XDG_DATA_HOME": str(tmp_path / "data")}
    assert default_state_dir(xdg, euid=0) == SYSTEM_STATE_DIR == Path("/var/lib/acmecerts")
    assert default_state_dir({}, euid=0) == SYSTEM_STATE_DIR
    assert default_state_dir(xdg, euid=1000) == tmp_path / "data" / "acmecerts"
    assert default_state_dir({"XDG_DATA_HOME": "relative"}, euid=1000) == (
        Path.home() / ".local" / "share" / "acmecerts"
    )


def test_status_shows_the_default_state_directory_of_this_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    result = run_main(capsys, "status", "--json", "--directory", "https://ca.invalid/dir")
    # nothing was issued there: status says so, naming the state directory (exit 2)
    assert result.returncode == 2, result.stderr
    expected = "/var/lib/acmecerts" if os.geteuid() == 0 else str(tmp_path / "data/acmecerts")
    assert f"state directory {expected} does not exist" in one_json(result)["error"]
    assert "/var/lib/acmecerts as root" in " ".join(
        run_main(capsys, "status", "--help").stdout.split()
    )


def test_the_config_file_of_root_and_of_anyone_else(tmp_path: Path) -> None:
    system = tmp_path / "etc" / "config.toml"
    user = tmp_path / "xdg" / "acmecerts" / "config.toml"
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    # neither exists: no file, for anyone
    assert find_config_path([], env, euid=0, system_config=system) == (None, False)
    user.parent.mkdir(parents=True)
    user.write_text("")
    # only the user's: read by root too (the system one is missing)
    assert find_config_path([], env, euid=0, system_config=system) == (user, False)
    system.parent.mkdir(parents=True)
    system.write_text("")
    # root reads the system one first; anyone else never does
    assert find_config_path([], env, euid=0, system_config=system) == (system, False)
    assert find_config_path([], env, euid=1000, system_config=system) == (user, False)
    # --config and $ACMECERTS_CONFIG still win
    explicit = tmp_path / "mine.toml"
    assert find_config_path(["--config", str(explicit)], env, euid=0, system_config=system) == (
        explicit,
        True,
    )
    with_env = {**env, "ACMECERTS_CONFIG": str(explicit)}
    assert find_config_path([], with_env, euid=0, system_config=system) == (explicit, True)
