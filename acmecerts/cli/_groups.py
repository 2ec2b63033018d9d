"""How commands take shared options: by group, one keyword-only parameter for each.

A shared option is declared once in :mod:`acmecerts.cli._options`; its default and its
place among a command's options belong to a :class:`Group` here, and a command asks for a
whole group by one keyword-only parameter typed with the dataclass the group makes
(:mod:`acmecerts.cli._args`)::

    @shared()
    def revoke_command(target: ..., *, common: CommonArgs) -> None: ...

:func:`shared` puts the group's options in that parameter's place (so ``--help`` lists
them there) and hands the command the dataclass made of their values.

Only the standard library and light modules here, like :mod:`acmecerts.cli._options`:
``acmecerts COMMAND --help`` must not import the library (``tests/cli/test_cli_start.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from ._args import (
    AccountArgs,
    BatchArgs,
    ChallengeOptions,
    CommonArgs,
    HookArgs,
    Hooks,
)
from ._hook_options import DeployHook, HookTimeout, PostHook, PreHook
from ._monitor_options import LogFormat
from ._options import (
    AgreeTos,
    CaBundle,
    Challenge,
    Concurrency,
    Config,
    Directory,
    DnsHook,
    DnsNameserver,
    DnsPropagationTimeout,
    DnsServer,
    DnsTsigAlgorithm,
    DnsTsigKey,
    DnsTsigSecret,
    EabHmacKey,
    EabKid,
    Email,
    Http01Listen,
    Json,
    MaxWait,
    Proxy,
    RateLimits,
    Staging,
    StateDir,
    Timeout,
    TlsAlpn01Listen,
    Verbose,
    Webroot,
)
from ._provider_options import DnsProvider, DnsProviderOption

__all__ = ["ACCOUNT", "BATCH", "CHALLENGE", "COMMON", "HOOKS", "Group", "shared"]

_F = TypeVar("_F", bound=Callable[..., Any])


#: A member's default is its field's default in the group's dataclass.
_FIELD: Final = object()


@dataclasses.dataclass(frozen=True, slots=True)
class _Member:
    """One option of a group: its parameter, its type, the field it sets, its default."""

    name: str
    annotation: Any
    #: The field of the group's dataclass (``None``: the parameter's name).
    field: str | None = None
    #: The option's default (:data:`_FIELD`: the default of its field).
    default: Any = _FIELD
    #: A repeatable option: its list becomes a tuple (``None``: empty).
    repeatable: bool = False

    def value(self, given: Any) -> Any:
        return tuple(given or ()) if self.repeatable else given


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """Options declared once that several commands take together, as one dataclass."""

    #: The dataclass a command's parameter is typed with to take this group.
    kind: type
    members: tuple[_Member, ...]
    #: Makes the dataclass from the values by field (default: ``kind(**fields)``).
    make: Callable[[Mapping[str, Any]], Any] | None = None

    def fields(self) -> dict[str, str]:
        """The field each option's parameter sets, by parameter name."""
        return {m.name: m.field or m.name for m in self.members}

    def parameters(self, replaced: Mapping[str, Any]) -> list[inspect.Parameter]:
        """The options as keyword-only parameters (``replaced``: other types by name)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self.kind)}
        return [
            inspect.Parameter(
                m.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults[m.field or m.name] if m.default is _FIELD else m.default,
                annotation=replaced.get(m.name, m.annotation),
            )
            for m in self.members
        ]

    def take(self, values: dict[str, Any]) -> Any:
        """Remove the group's options from a command's ``values``; their dataclass."""
        fields = {m.field or m.name: m.value(values.pop(m.name)) for m in self.members}
        return self.kind(**fields) if self.make is None else self.make(fields)


COMMON: Final = Group(
    CommonArgs,
    (
        _Member("directory", Directory),
        _Member("staging", Staging),
        _Member("ca_bundle", CaBundle),
        _Member("proxy", Proxy),
        _Member("state_dir", StateDir),
        _Member("rate_limits", RateLimits),
        _Member("timeout", Timeout),
        _Member("json_output", Json, field="json"),
        _Member("verbose", Verbose),
        _Member("log_format", LogFormat),
        # read before the command runs (it names the file of defaults): not passed on
        _Member("config", Config, default=None),
    ),
    make=lambda fields: CommonArgs(**{k: v for k, v in fields.items() if k != "config"}),
)
ACCOUNT: Final = Group(
    AccountArgs,
    (
        _Member("email", Email, field="emails", default=None, repeatable=True),
        _Member("eab_kid", EabKid),
        _Member("eab_hmac_key", EabHmacKey),
        _Member("agree_tos", AgreeTos),
    ),
)
CHALLENGE: Final = Group(
    ChallengeOptions,
    (
        _Member("challenge", Challenge),
        _Member("http_01_listen", Http01Listen),
        _Member("webroot", Webroot),
        _Member("tls_alpn_01_listen", TlsAlpn01Listen),
        _Member("dns_rfc2136_server", DnsServer),
        _Member("dns_tsig_key", DnsTsigKey),
        _Member("dns_tsig_secret", DnsTsigSecret),
        _Member("dns_tsig_algorithm", DnsTsigAlgorithm),
        _Member("dns_hook", DnsHook),
        _Member("dns_provider", DnsProvider),
        _Member(
            "dns_provider_option",
            DnsProviderOption,
            field="dns_provider_options",
            default=None,
            repeatable=True,
        ),
        _Member(
            "dns_propagation_nameserver",
            DnsNameserver,
            field="dns_propagation_nameservers",
            default=None,
            repeatable=True,
        ),
        _Member("dns_propagation_timeout", DnsPropagationTimeout),
    ),
)
BATCH: Final = Group(BatchArgs, (_Member("concurrency", Concurrency), _Member("max_wait", MaxWait)))
HOOKS: Final = Group(
    HookArgs,
    (
        _Member("pre_hook", PreHook, field="pre", default=None),
        _Member("post_hook", PostHook, field="post", default=None),
        _Member("deploy_hook", DeployHook, field="deploy", default=None),
        _Member("hook_timeout", HookTimeout, field="timeout"),
    ),
    make=lambda f: HookArgs(Hooks(pre=f["pre"], post=f["post"], deploy=f["deploy"]), f["timeout"]),
)
_GROUPS: Final = {group.kind: group for group in (COMMON, ACCOUNT, CHALLENGE, BATCH, HOOKS)}


def shared(**replaced: Any) -> Callable[[_F], _F]:
    """Give a command the groups its keyword-only parameters are typed with.

    Each parameter typed with a group's dataclass (``common: CommonArgs``) stands for the
    group's options, in its place; the command gets the dataclass of their values.
    ``replaced`` gives an option another ``Annotated`` type (its own help) by name.
    """

    def decorate(command: _F) -> _F:
        signature = inspect.signature(command, eval_str=True)
        parameters: list[inspect.Parameter] = []
        groups: dict[str, Group] = {}
        for parameter in signature.parameters.values():
            group = _GROUPS.get(parameter.annotation)
            if group is None:
                parameters.append(parameter)
            else:
                groups[parameter.name] = group
                parameters += group.parameters(replaced)
        unknown = set(replaced) - {n for g in groups.values() for n in g.fields()}
        if unknown:  # a typo would silently keep the shared help
            raise TypeError(f"{command.__name__}: no shared option {sorted(unknown)}")

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            for name, group in groups.items():
                values[name] = group.take(values)
            return command(**values)

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run  # type: ignore[return-value]

    return decorate
