"""The CLI through an egress proxy: ``HTTPS_PROXY``/``NO_PROXY`` by default, ``--proxy``.

A real proxy (Debian's ``tinyproxy``, from ``proxy_factory``) stands between the CLI and the
session Pebble; its log shows each ``CONNECT`` it was asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from cli_support import (
    ca_args,
    clean_environment,
    cli_env,
    free_port,
    http01_args,
    one_json,
    run_cli,
    run_main,
)

if TYPE_CHECKING:
    from conftest import ProxyFactory

    from acmecerts.testing import PebbleServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(tmp_path, monkeypatch)


def issue_args(pebble: PebbleServer, tmp_path: Path, name: str) -> list[str]:
    return [
        "issue",
        *ca_args(pebble, tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        *http01_args(pebble),
        name,
    ]


def pebble_authority(pebble: PebbleServer) -> str:
    url = httpx.URL(pebble.directory_url)
    return f"{url.host}:{url.port}"


def test_issue_goes_through_https_proxy_from_the_environment(
    pebble: PebbleServer, proxy_factory: ProxyFactory, tmp_path: Path
) -> None:
    proxy = proxy_factory()
    env = cli_env(tmp_path, HTTPS_PROXY=proxy.url)

    result = run_cli(*issue_args(pebble, tmp_path, "cli-proxy.example.test"), env=env)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "fullchain.pem").exists()
    connects = proxy.connects()
    assert connects, proxy.log_text()
    assert set(connects) == {pebble_authority(pebble)}  # to Pebble only, nothing else


def test_no_proxy_for_the_ca_connects_directly(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = proxy_factory()
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")

    result = run_main(capsys, *issue_args(pebble, tmp_path, "cli-no-proxy.example.test"))

    assert result.returncode == 0, result.stderr
    assert proxy.requests() == []


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_proxy_option_wins_over_https_proxy(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    chosen = proxy_factory()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}")  # nobody there
    args = issue_args(pebble, tmp_path, f"cli-proxy-{how}.example.test")
    if how == "flag":
        args.insert(1, f"--proxy={chosen.url}")
    else:
        monkeypatch.setenv("ACMECERTS_PROXY", chosen.url)

    result = run_main(capsys, *args)

    assert result.returncode == 0, result.stderr
    assert set(chosen.connects()) == {pebble_authority(pebble)}


def test_proxy_option_honours_no_proxy_and_none_connects_directly(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = proxy_factory()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    args = issue_args(pebble, tmp_path, "cli-proxy-except.example.test")
    first = run_main(capsys, "issue", "--proxy", proxy.url, *args[1:])
    assert first.returncode == 0, first.stderr
    assert proxy.requests() == []  # as curl --proxy does: NO_PROXY still applies

    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    second = run_main(capsys, "issue", "--proxy", "none", "--force", *args[1:])
    assert second.returncode == 0, second.stderr
    assert proxy.requests() == []


def test_a_refusing_proxy_exits_1_naming_it_without_the_credentials(
    pebble: PebbleServer,
    proxy_factory: ProxyFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = proxy_factory(basic_auth=("acme", "pa55word"))
    monkeypatch.setenv("HTTPS_PROXY", proxy.url_with("acme", "wrong-s3cret"))
    requests_before = len(pebble.requests_seen())

    result = run_main(capsys, *issue_args(pebble, tmp_path, "cli-refused.example.test"), "--json")

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    document = one_json(result)
    assert document["status"] == "failed"
    assert f"proxy {proxy.url} refused CONNECT {pebble_authority(pebble)}" in document["error"]
    assert len(pebble.requests_seen()) == requests_before  # nothing reached the CA


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        ("flag", "socks5://user:s3cret@127.0.0.1:1080", "--proxy: only http:// proxies"),
        ("flag", "http://user:s3cret@:3128", "--proxy: 'http://***@:3128' names no proxy host"),
        ("HTTPS_PROXY", "socks5h://user:s3cret@127.0.0.1:1080", "HTTPS_PROXY: only http://"),
    ],
)
def test_a_bad_proxy_exits_2_before_anything_is_sent(
    pebble: PebbleServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    value: str,
    words: str,
) -> None:
    requests_before = len(pebble.requests_seen())
    args = issue_args(pebble, tmp_path, "cli-bad-proxy.example.test")
    if where == "flag":
        args += ["--proxy", value]
    else:
        monkeypatch.setenv(where, value)

    result = run_main(capsys, *args)

    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert words in lines[0]
    assert "s3cret" not in result.stderr
    assert len(pebble.requests_seen()) == requests_before
    assert not (tmp_path / "state").exists()


def test_help_documents_proxy(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["issue"], ["renew"], ["revoke"], ["status"], ["account", "show"]):
        result = run_main(capsys, *command, "--help")
        assert result.returncode == 0
        assert "--proxy" in result.stdout, command
