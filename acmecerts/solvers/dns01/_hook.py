"""The hook solver: your callables, or a command, set and clear the TXT record."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import anyio

from acmecerts._time import duration_seconds
from acmecerts.errors import AcmeCertsError, InvalidInput
from acmecerts.solvers.dns01._errors import DnsHookError
from acmecerts.solvers.dns01._propagation import PropagationCheck
from acmecerts.solvers.dns01._records import (
    _CHALLENGE_TYPE,
    _DEFAULT,
    _challenge_type,
    _DefaultPropagation,
    _dns_name,
    _record_name,
    _Registry,
    _supports,
)

if TYPE_CHECKING:
    from acmecerts.protocol.identifiers import Identifier
    from acmecerts.solvers._base import ChallengeTask

logger = logging.getLogger("acmecerts.solvers.dns01")

#: How much of a hook command's stderr an error message carries.
_STDERR_TAIL: Final = 2000

#: ``set_record(name, value)`` / ``clear_record(name, value)``.
RecordHook = Callable[[str, str], Awaitable[None]]


class DnsHookSolver:
    """A dns-01 solver that calls your code to set and clear the TXT record.

    ``set_record(name, value)`` and ``clear_record(name, value)`` are async callables;
    ``name`` is ``_acme-challenge.<name>`` without a trailing dot, ``value`` the TXT
    value. They MUST add and remove that one value, not replace the record set: a
    wildcard and its base name share one record name and are validated at the same time.
    ``set_record`` MAY return before the record is visible: the propagation check waits
    for that. ``clear_record`` MUST tolerate a value that is not there. CNAME delegation
    is up to the hooks (the propagation check follows CNAMEs when it looks for the zone).

    Exceptions from the hooks that are not :class:`~acmecerts.errors.AcmeCertsError`
    become :class:`DnsHookError`. :meth:`from_command` runs a program instead.

    :param set_record: publishes one TXT value.
    :param clear_record: removes one TXT value.
    :param propagation: the check run after ``set_record``; by default
        ``PropagationCheck()`` (the zone's authoritative servers, found through the
        system resolver); ``None`` skips it.
    :param challenge_type: ``"dns-01"`` (default) or ``"dns-account-01"``: then ``name``
        is ``_<account label>._acme-challenge.<name>``, a name no other account uses, so
        hooks of replicas with different accounts never remove each other's values.
    """

    #: The challenge type this solver answers (``dns-01`` unless given).
    challenge_type: str = _CHALLENGE_TYPE

    def __init__(
        self,
        set_record: RecordHook,
        clear_record: RecordHook,
        *,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
        challenge_type: str = _CHALLENGE_TYPE,
    ) -> None:
        self.challenge_type = _challenge_type(challenge_type)
        if not callable(set_record) or not callable(clear_record):
            raise InvalidInput("set_record and clear_record must be async callables")
        self._set = set_record
        self._clear = clear_record
        self._propagation: PropagationCheck | None = (
            PropagationCheck() if isinstance(propagation, _DefaultPropagation) else propagation
        )
        self._registry = _Registry()
        self._label = getattr(set_record, "__qualname__", type(set_record).__name__)

    @classmethod
    def from_command(
        cls,
        cmd: Sequence[str],
        *,
        timeout: float | _dt.timedelta = 60.0,
        env: Mapping[str, str] | None = None,
        propagation: PropagationCheck | _DefaultPropagation | None = _DEFAULT,
        challenge_type: str = _CHALLENGE_TYPE,
    ) -> DnsHookSolver:
        """A hook solver that runs ``cmd present|cleanup <name> <value>``.

        The program also gets ``ACMECERTS_DNS_ACTION`` (``present`` or ``cleanup``),
        ``ACMECERTS_DNS_NAME`` and ``ACMECERTS_DNS_VALUE`` in its environment (the
        current environment plus ``env``), no standard input, and ``timeout`` seconds;
        then it is killed. A non-zero exit status or a timeout raises
        :class:`DnsHookError` with the tail of its standard error.
        """
        if isinstance(cmd, str) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise InvalidInput("cmd must be a non-empty sequence of strings (argv)")
        runner = _CommandHook(
            tuple(cmd), duration_seconds(timeout, "timeout", positive=True), dict(env or {})
        )
        solver = cls(
            runner.present, runner.cleanup, propagation=propagation, challenge_type=challenge_type
        )
        solver._label = f"command {cmd[0]!r}"
        return solver

    @property
    def propagation(self) -> PropagationCheck | None:
        """The check run at the end of :meth:`present` (``None``: none)."""
        return self._propagation

    def __repr__(self) -> str:
        return f"DnsHookSolver({self._label}, records={len(self._registry)})"

    # -- Solver ---------------------------------------------------------------

    def supports(self, identifier: Identifier) -> bool:
        """DNS names, wildcards included; not IP addresses."""
        return _supports(identifier)

    async def present(self, task: ChallengeTask) -> None:
        """Call ``set_record``, then wait until the value is visible.

        Raises :class:`~acmecerts.errors.UnsupportedChallenge` for a task that is not a
        dns-01 task for a DNS name, :class:`DnsHookError` when the hook fails,
        :class:`DnsPropagationTimeout` or :class:`DnsError` from the propagation check.
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry = self._registry.acquire((record, value))
        entry.attempted = True
        await self._call(self._set, record, value, "set_record")
        if self._propagation is not None:
            await self._propagation._wait(
                _dns_name(record), value, lookup=None, zone=None, followed=False
            )

    async def cleanup(self, task: ChallengeTask) -> None:
        """Call ``clear_record`` once no other presented task holds the value.

        Raises :class:`DnsHookError` when the hook fails (the client logs it).
        """
        record = _record_name(task, self)
        value = task.dns_txt_value
        entry, remove = self._registry.release((record, value))
        if remove and (entry is None or entry.attempted):
            await self._call(self._clear, record, value, "clear_record")

    async def _call(self, hook: RecordHook, record: str, value: str, what: str) -> None:
        try:
            await hook(record, value)
        except AcmeCertsError:
            raise
        except Exception as exc:
            raise DnsHookError(
                f"{what}({record!r}, {value!r}) failed: {type(exc).__name__}: {exc}",
                name=record,
            ) from exc


class _CommandHook:
    """Runs ``argv present|cleanup NAME VALUE`` for :meth:`DnsHookSolver.from_command`."""

    def __init__(self, argv: tuple[str, ...], timeout: float, env: dict[str, str]) -> None:
        self.argv = argv
        self.timeout = timeout
        self.env = env

    async def present(self, name: str, value: str) -> None:
        await self._run("present", name, value)

    async def cleanup(self, name: str, value: str) -> None:
        await self._run("cleanup", name, value)

    async def _run(self, action: str, name: str, value: str) -> None:
        argv = [*self.argv, action, name, value]
        env = {
            **os.environ,
            **self.env,
            "ACMECERTS_DNS_ACTION": action,
            "ACMECERTS_DNS_NAME": name,
            "ACMECERTS_DNS_VALUE": value,
        }
        shown = " ".join([self.argv[0], action, name])
        try:
            with anyio.fail_after(self.timeout):
                result = await anyio.run_process(
                    argv, stdin=subprocess.DEVNULL, check=False, env=env
                )
        except TimeoutError:
            raise DnsHookError(
                f"{shown} did not finish within {self.timeout:g} s (killed)",
                name=name,
                timed_out=True,
            ) from None
        except OSError as exc:
            raise DnsHookError(f"cannot run {self.argv[0]!r}: {exc}", name=name) from exc
        if result.returncode != 0:
            stderr = (result.stderr or b"").decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
            raise DnsHookError(
                f"{shown} exited with status {result.returncode}"
                + (f": {stderr}" if stderr else ""),
                name=name,
                returncode=result.returncode,
                stderr=stderr,
            )
        logger.debug("dns-01: %s succeeded", shown)
