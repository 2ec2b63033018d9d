"""Every duration option goes through one parser (:func:`acmecerts.duration_seconds`).

NaN, infinity, negative numbers, booleans and text are refused with
:class:`~acmecerts.InvalidInput` naming the option: by the library's keyword arguments
(``AcmeClient(attempt_timeout=...)``, the manager's ``lock_lease`` and ``retention``, the
poll intervals) and by the command line's duration options, through its real entry point
(exit code 2, one ``acmecerts: error:`` line, nothing sent, no state written).
"""

from __future__ import annotations

import datetime as dt
import fractions
import math
import os
from pathlib import Path

import pytest

from acmecerts import (
    AcmeClient,
    Http01Webroot,
    InvalidInput,
    PollPolicy,
    duration_seconds,
    parse_retry_after,
)
from acmecerts.cli import main
from acmecerts.manager import CertificateManager

DIRECTORY = "https://ca.invalid/dir"

#: What no duration option takes, whatever its bounds.
NOT_DURATIONS: list[object] = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -0.5,
    dt.timedelta(seconds=-1),
    True,
    False,
    "30",
    None,
    b"30",
]


@pytest.mark.parametrize("value", NOT_DURATIONS)
def test_the_parser_refuses_what_is_no_duration(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"^the_option must be a finite number of seconds"):
        duration_seconds(value, "the_option")  # type: ignore[arg-type]


def test_the_parser_takes_numbers_and_timedeltas() -> None:
    assert duration_seconds(dt.timedelta(minutes=2), "x") == 120.0
    assert duration_seconds(fractions.Fraction(3, 2), "x", positive=True) == 1.5
    assert duration_seconds(0, "x") == 0.0
    assert type(duration_seconds(7, "x")) is float
    with pytest.raises(InvalidInput, match="x must be a finite number of seconds > 0, got 0"):
        duration_seconds(0, "x", positive=True)


def test_infinity_only_where_it_means_no_limit() -> None:
    assert duration_seconds(math.inf, "max_delay", unbounded=True) == math.inf
    for value in (math.nan, -math.inf, True, "inf"):
        with pytest.raises(InvalidInput, match="max_delay must be a number of seconds"):
            duration_seconds(value, "max_delay", unbounded=True)  # type: ignore[arg-type]
    # parse_retry_after's max_delay=inf is "no limit"; NaN is still refused
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    far = parse_retry_after("86400000", now=now, max_delay=math.inf)
    assert far == now + dt.timedelta(seconds=86400000)
    with pytest.raises(InvalidInput, match="max_delay"):
        parse_retry_after("5", now=now, max_delay=math.nan)


# -- the library's options -------------------------------------------------------------------


@pytest.mark.parametrize("value", [*NOT_DURATIONS, 0, dt.timedelta(0)])
def test_client_attempt_timeout(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"^attempt_timeout must be a finite number"):
        AcmeClient(DIRECTORY, attempt_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*NOT_DURATIONS, 0])
def test_client_request_timeout_is_named_as_given(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"^request_timeout must be a finite number"):
        AcmeClient(DIRECTORY, request_timeout=value)  # type: ignore[arg-type]


def test_client_attempt_timeout_is_seconds() -> None:
    assert AcmeClient(DIRECTORY, attempt_timeout=dt.timedelta(minutes=5)).attempt_timeout == 300.0
    assert AcmeClient(DIRECTORY, attempt_timeout=90).attempt_timeout == 90.0


@pytest.mark.anyio
@pytest.mark.parametrize("value", [math.nan, math.inf, -1, True, "60"])
async def test_issue_attempt_timeout(tmp_path: Path, value: object) -> None:
    client = AcmeClient(DIRECTORY)
    solver = Http01Webroot(tmp_path)
    async with client:
        with pytest.raises(InvalidInput, match=r"^attempt_timeout must be a finite number"):
            await client.issue(["a.example.test"], solvers=[solver], attempt_timeout=value)  # type: ignore[arg-type]
        assert client.transport.request_count == 0


@pytest.mark.parametrize("option", ["lock_lease", "retention"])
@pytest.mark.parametrize("value", NOT_DURATIONS)
def test_manager_durations(tmp_path: Path, option: str, value: object) -> None:
    if option == "retention" and value is None:
        return  # retention=None: keep forever
    client = AcmeClient(DIRECTORY)
    with pytest.raises(InvalidInput, match=rf"^{option} must be a finite number"):
        CertificateManager(client, solvers=[Http01Webroot(tmp_path)], **{option: value})


def test_manager_durations_taken(tmp_path: Path) -> None:
    client = AcmeClient(DIRECTORY)
    manager = CertificateManager(
        client,
        solvers=[Http01Webroot(tmp_path)],
        lock_lease=dt.timedelta(minutes=1),
        retention=0,
    )
    assert manager.retention == 0.0
    assert (
        CertificateManager(client, solvers=[Http01Webroot(tmp_path)], retention=None).retention
        is None
    )


@pytest.mark.parametrize("value", [*NOT_DURATIONS, 0])
def test_kubernetes_request_timeout(tmp_path: Path, value: object) -> None:
    from acmecerts.storage.kubernetes import KubernetesStorage

    # refused before any configuration is looked for (this kubeconfig does not exist)
    with pytest.raises(InvalidInput, match=r"^timeout must be a finite number of seconds > 0"):
        KubernetesStorage("ns", kubeconfig=tmp_path / "none", timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["initial", "max_interval", "floor", "max_retry_after"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1, True, "1"])
def test_poll_intervals(field: str, value: object) -> None:
    with pytest.raises(InvalidInput, match=rf"^PollPolicy.{field} must be a finite number"):
        PollPolicy(**{field: value})  # type: ignore[arg-type]


def test_poll_intervals_taken() -> None:
    policy = PollPolicy(initial=1, max_interval=2, floor=0, max_retry_after=0)
    assert (policy.initial, policy.max_interval, policy.floor) == (1.0, 2.0, 0.0)
    with pytest.raises(InvalidInput, match=r"PollPolicy\.initial must be .* > 0"):
        PollPolicy(initial=0)
    with pytest.raises(InvalidInput, match=r"PollPolicy\.multiplier"):
        PollPolicy(multiplier=math.nan)


# -- growth factors: one check beside the duration parser ------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.5, 0, -2, True, "2", None])
def test_every_growth_factor_is_checked_by_one_rule(value: object) -> None:
    from acmecerts._time import Backoff, growth_factor
    from acmecerts.retry import AttemptSchedule
    from acmecerts.solvers.dns01._propagation import PropagationCheck

    message = r"must be a finite number >= 1, got "
    with pytest.raises(InvalidInput, match=r"^factor " + message):
        growth_factor(value, "factor")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^PollPolicy\.multiplier " + message):
        PollPolicy(multiplier=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^multiplier " + message):
        Backoff(floor=1, cap=2, multiplier=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^multiplier " + message):
        AttemptSchedule.exponential(multiplier=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^backoff " + message):
        PropagationCheck(backoff=value)  # type: ignore[arg-type]


def test_growth_factors_taken_as_floats() -> None:
    from acmecerts._time import Backoff, growth_factor

    assert growth_factor(1, "factor") == 1.0
    assert growth_factor(fractions.Fraction(3, 2), "factor") == 1.5
    assert PollPolicy(multiplier=2).multiplier == 2.0
    assert Backoff(floor=1, cap=2, multiplier=3).multiplier == 3.0
    assert Backoff(floor=1, cap=2).max_retry_after == math.inf
    with pytest.raises(InvalidInput, match=r"^max_retry_after must be a number of seconds"):
        Backoff(floor=1, cap=2, max_retry_after=math.nan)


# -- the command line's options (its real entry point) ---------------------------------------

ISSUE = ["issue", "--directory", "https://127.0.0.1:9/dir", "--http-01-listen", "127.0.0.1:9"]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The state directory of the run (which a refused option must not create)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    for variable in [v for v in os.environ if v.startswith("ACMECERTS_")]:
        monkeypatch.delenv(variable)
    return tmp_path / "state"


CLI_CASES = [
    (ISSUE, "--timeout", "nan"),
    (ISSUE, "--timeout", "inf"),
    (ISSUE, "--timeout", "-1"),
    (ISSUE, "--timeout", "0"),
    (ISSUE, "--max-wait", "nan"),
    (ISSUE, "--max-wait", "inf"),
    (ISSUE, "--max-wait", "-1"),
    (ISSUE, "--hook-timeout", "nan"),
    (ISSUE, "--hook-timeout", "-inf"),
    (ISSUE, "--hook-timeout", "0"),
    (
        [*ISSUE, "--challenge", "dns-01", "--dns-hook", "true"],
        "--dns-propagation-timeout",
        "nan",
    ),
    (
        [*ISSUE, "--challenge", "dns-01", "--dns-hook", "true"],
        "--dns-propagation-timeout",
        "-1",
    ),
    (["renew", "--directory", "https://127.0.0.1:9/dir"], "--random-delay", "nan"),
    (["renew", "--directory", "https://127.0.0.1:9/dir"], "--random-delay", "inf"),
    (["renew", "--directory", "https://127.0.0.1:9/dir"], "--random-delay", "-1"),
]


@pytest.mark.parametrize(("command", "option", "value"), CLI_CASES)
def test_cli_duration_options(
    state: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    option: str,
    value: str,
) -> None:
    capsys.readouterr()
    code = main([*command, "--state-dir", str(state), f"{option}={value}", "a.example.test"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"acmecerts: error: {option} must be a finite number of seconds")
    assert not state.exists()


@pytest.mark.parametrize("value", ["soon", "true", ""])
def test_cli_duration_options_that_are_no_numbers(
    state: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    capsys.readouterr()
    code = main([*ISSUE, "--state-dir", str(state), f"--timeout={value}", "a.example.test"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "--timeout" in captured.err
    assert not state.exists()


@pytest.mark.parametrize(
    ("value", "message"), [("9" * 400, "finite"), ("9" * 12 + "d", "too long")]
)
def test_cli_check_grace(
    state: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    capsys.readouterr()
    code = main(["status", "--state-dir", str(state), "--check", f"--check-grace={value}"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "--check-grace" in captured.err
    assert message in captured.err
    assert "Traceback" not in captured.err
