"""A real BIND 9 DNS server for tests: :class:`BindServer`.

:class:`BindServer` runs ``named`` (Debian package ``bind9``) in the foreground on a free
``127.0.0.1`` port, authoritative for a few test zones that accept RFC 2136 dynamic updates
signed with a generated TSIG key. Point Pebble at it (``PebbleServer(...,
dns_server=bind.address)``) and the CA validates dns-01 through the same server a
:class:`~acmecerts.solvers.Rfc2136Solver` updates::

    with BindServer(tmp_path) as bind:
        solver = Rfc2136Solver(
            "127.0.0.1",
            port=bind.port,
            tsig_key_name=bind.tsig_key_name,
            tsig_secret=bind.tsig_secret,
        )

The zones (serial 1, TTL 60, negative TTL 1 s, all names on 127.0.0.1):

``example.test``
    SOA and NS ``ns.example.test.``; ``A 127.0.0.1`` at the apex, ``ns``, ``cname`` and the
    wildcard ``*``; and ``_acme-challenge.cname CNAME
    _acme-challenge.target.delegated.test.`` for CNAME delegation of dns-01.
``delegated.test``
    SOA and NS ``ns.example.test.``; apex ``A 127.0.0.1``.
``readonly.test``
    Like ``delegated.test``, but without ``allow-update``: updates are ``REFUSED``.

``extra_zones`` adds more zones of the same shape; ``extra_records`` appends record lines
(zone-file syntax, relative to the zone) to any zone.

What the harness sets up, and why:

* Everything ``named`` writes (pid file, session key, managed keys, zone journals) stays in
  *workdir*: ``directory`` points there, so nothing needs ``/var/cache/bind`` or ``/run``.
  ``named`` runs as the current user (``-u`` is not given), which is root in CI.
* BIND answers authoritatively and does not chase a CNAME into another zone for a
  non-recursive query (``_acme-challenge.cname.example.test TXT`` returns only the CNAME).
  A CA queries through a recursive resolver that does chase it, and Go's resolver in
  Pebble does not chase CNAMEs itself. So by default (``recursion=True``) ``named`` also
  answers recursive queries from ``127.0.0.1``; it serves an empty root zone ``.`` of its
  own, so recursion never leaves the machine: every name outside the test zones is
  NXDOMAIN at once. ``recursion=False`` gives a purely authoritative server.
* No DNSSEC validation, no NOTIFY, no control channel, IPv4 loopback only.
* Free ports are picked by binding port 0 and released before ``named`` binds them; when
  another process takes the port meanwhile, ``named`` exits ("unable to listen on any
  configured interfaces") and :meth:`BindServer.start` retries on a fresh port.
"""

from __future__ import annotations

import base64
import secrets
import shutil
from typing import TYPE_CHECKING

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.TXT

from acmecerts.testing._process import ManagedServer, _free_ports

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

__all__ = ["BindServer"]

#: The zones every :class:`BindServer` serves.
DEFAULT_ZONES = ("example.test", "delegated.test", "readonly.test")

_DEFAULT_RECORDS: dict[str, tuple[str, ...]] = {
    "example.test": (
        "@ A 127.0.0.1",
        "ns A 127.0.0.1",
        "cname A 127.0.0.1",
        "* A 127.0.0.1",
        "_acme-challenge.cname CNAME _acme-challenge.target.delegated.test.",
    ),
    "delegated.test": ("@ A 127.0.0.1",),
    "readonly.test": ("@ A 127.0.0.1",),
}
#: Served zones that take no dynamic updates.
_READONLY_ZONES = frozenset({"readonly.test"})


class BindServer(ManagedServer):
    """Run BIND 9 ``named`` on a free ``127.0.0.1`` port with TSIG-updatable test zones.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The config, zone
    files, key file, journals and log are written under *workdir* (created if needed).

    Args:
        workdir: Directory for everything ``named`` reads and writes.
        tsig_key_name: Name of the TSIG key allowed to update every zone.
        tsig_algorithm: Its algorithm (a BIND name such as ``hmac-sha256``).
        extra_zones: More zones to serve, shaped like ``delegated.test`` (updatable).
        extra_records: Zone name -> extra record lines in zone-file syntax.
        recursion: Also answer recursive queries from ``127.0.0.1`` (following CNAMEs from
            one served zone into another, as a CA's resolver does), from a local empty root
            zone, so nothing is ever asked outside this server.
        named_binary: The ``named`` executable (name on ``PATH`` or path).
    """

    name = "named"
    start_timeout = 20.0
    port_in_use = ("address in use", "unable to listen on any configured interfaces")

    def __init__(
        self,
        workdir: Path,
        *,
        tsig_key_name: str = "acmecerts-test-key",
        tsig_algorithm: str = "hmac-sha256",
        extra_zones: Iterable[str] = (),
        extra_records: Mapping[str, Iterable[str]] | None = None,
        recursion: bool = True,
        named_binary: str = "named",
    ) -> None:
        super().__init__(workdir)
        #: Name of the TSIG key ``allow-update`` accepts.
        self.tsig_key_name = tsig_key_name
        #: The key's algorithm, e.g. ``"hmac-sha256"``.
        self.tsig_algorithm = tsig_algorithm
        #: The key's secret, base64 (generated anew by each instance).
        self.tsig_secret = base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        #: Every zone served, default zones first.
        self.zones: tuple[str, ...] = tuple(
            dict.fromkeys([*DEFAULT_ZONES, *(z.rstrip(".").lower() for z in extra_zones)])
        )
        self._records: dict[str, list[str]] = {
            z: list(_DEFAULT_RECORDS.get(z, ())) for z in self.zones
        }
        for zone, lines in (extra_records or {}).items():
            key = zone.rstrip(".").lower()
            if key not in self._records:
                raise ValueError(f"extra_records for {zone!r}, which is not a served zone")
            self._records[key].extend(lines)
        self.recursion = recursion
        self.named_binary = named_binary

        #: The generated ``named.conf``.
        self.config_path: Path = self.workdir / "named.conf"
        #: The TSIG key in ``named.conf`` syntax (usable as ``nsupdate -k`` key file).
        self.key_file: Path = self.workdir / "tsig.key"
        #: ``named``'s combined stdout and stderr (``-g`` logs there).
        self.log_path: Path = self.workdir / "named.log"
        self.pid_path: Path = self.workdir / "named.pid"

        self._port: int | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The UDP and TCP port ``named`` listens on (on ``127.0.0.1``)."""
        if self._port is None or not self._procs:
            raise RuntimeError("BindServer is not started")
        return self._port

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, the form Pebble's ``-dnsserver`` takes."""
        return f"127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the config and zones, start ``named`` and wait until it answers SOA queries.

        Raises:
            RuntimeError: ``named`` is missing, exits early, or is not ready within 20 s;
                the message carries the tail of its log. Nothing is left running.
        """
        super().start()

    def __repr__(self) -> str:
        state = f"address={self.address!r}" if self.running else "stopped"
        return f"<BindServer {state} workdir={str(self.workdir)!r}>"

    # -- queries -----------------------------------------------------------------------------

    def query(
        self, name: str, rdtype: str = "TXT", *, recursion_desired: bool = False
    ) -> dns.message.Message:
        """Send one query for ``name``/``rdtype`` to the server (UDP, TCP on truncation).

        Without ``recursion_desired`` the answer is what the zone holds (a CNAME is not
        followed into another zone); with it, what a resolver would answer.
        """
        request = dns.message.make_query(_absolute(name), rdtype)
        if not recursion_desired:
            request.flags &= ~dns.flags.RD
        response, _ = dns.query.udp_with_fallback(request, "127.0.0.1", timeout=5, port=self.port)
        return response

    def txt_values(self, name: str, *, recursion_desired: bool = False) -> set[str]:
        """The TXT strings served at ``name`` now (each record's strings joined).

        With ``recursion_desired``, TXT records reached through a CNAME count too.
        """
        response = self.query(name, "TXT", recursion_desired=recursion_desired)
        values: set[str] = set()
        for rrset in response.answer:
            if rrset.rdtype != dns.rdatatype.TXT:
                continue
            if not recursion_desired and rrset.name.to_text() != _absolute(name):
                continue
            for rdata in rrset:
                assert isinstance(rdata, dns.rdtypes.ANY.TXT.TXT)
                values.add(b"".join(rdata.strings).decode("ascii", "replace"))
        return values

    # -- internals ---------------------------------------------------------------------------

    def _missing(self) -> str | None:
        if shutil.which(self.named_binary) is None:
            return (
                f"{self.named_binary!r} not found; install the Debian package: "
                "apt-get install -y bind9 bind9-utils"
            )
        return None

    def _launch(self) -> None:
        (self._port,) = _free_ports(1, udp_for_last=True)
        self._write_files(self._port)
        self._spawn(
            "named",
            # -g: foreground, log to stderr; -4: IPv4 only; -n 1: one worker thread.
            [
                self.named_binary,
                "-g",
                "-4",
                "-n",
                "1",
                "-c",
                str(self.config_path),
                "-p",
                str(self._port),
            ],
            self.log_path,
        )

    def _ready_checks(self) -> Sequence[tuple[str, Callable[[], bool]]]:
        return [("SOA answers", self._answers_soa)]

    def _write_files(self, port: int) -> None:
        work = self.workdir.resolve()
        self.key_file.write_text(
            f'key "{self.tsig_key_name}" {{\n'
            f"\talgorithm {self.tsig_algorithm};\n"
            f'\tsecret "{self.tsig_secret}";\n'
            "};\n",
            encoding="ascii",
        )
        self.key_file.chmod(0o600)
        zone_blocks = []
        for zone in self.zones:
            zone_file = work / f"{zone}.zone"
            # A stale journal from a previous start would replay old updates onto the zone.
            zone_file.with_name(zone_file.name + ".jnl").unlink(missing_ok=True)
            zone_file.write_text(_zone_text(zone, self._records[zone]), encoding="ascii")
            zone_blocks.append(
                f'zone "{zone}" {{\n'
                "\ttype primary;\n"
                f'\tfile "{zone_file}";\n'
                + (
                    ""
                    if zone in _READONLY_ZONES
                    else f'\tallow-update {{ key "{self.tsig_key_name}"; }};\n'
                )
                + "};\n"
            )
        if self.recursion:
            root_file = work / "root.zone"
            root_file.write_text(
                _zone_text(".", ["ns.example.test. A 127.0.0.1"]), encoding="ascii"
            )
            zone_blocks.append(f'zone "." {{\n\ttype primary;\n\tfile "{root_file}";\n}};\n')
            recursion = "\trecursion yes;\n\tallow-recursion { 127.0.0.1; };\n"
        else:
            recursion = "\trecursion no;\n"
        self.config_path.write_text(
            f'include "{self.key_file.resolve()}";\n'
            "options {\n"
            f'\tdirectory "{work}";\n'
            f'\tpid-file "{work / "named.pid"}";\n'
            f'\tsession-keyfile "{work / "session.key"}";\n'
            f'\tmanaged-keys-directory "{work}";\n'
            f"\tlisten-on port {port} {{ 127.0.0.1; }};\n"
            "\tlisten-on-v6 { none; };\n"
            f"{recursion}"
            "\tallow-query { any; };\n"
            "\tdnssec-validation no;\n"
            "\tnotify no;\n"
            "};\n"
            "controls { };\n" + "".join(zone_blocks),
            encoding="ascii",
        )

    def _answers_soa(self) -> bool:
        assert self._port is not None
        try:
            for zone in self.zones:
                request = dns.message.make_query(_absolute(zone), "SOA")
                response = dns.query.udp(request, "127.0.0.1", timeout=0.5, port=self._port)
                if response.rcode() != dns.rcode.NOERROR or not response.answer:
                    return False
        except (OSError, dns.exception.DNSException):
            return False
        return True


def _absolute(name: str) -> str:
    return name if name.endswith(".") else name + "."


def _zone_text(zone: str, records: Iterable[str]) -> str:
    lines = [
        f"$ORIGIN {zone.rstrip('.')}.",
        "$TTL 60",
        # serial refresh retry expire negative-TTL: a 1 s negative TTL keeps any cache honest.
        "@ SOA ns.example.test. hostmaster.example.test. 1 3600 600 86400 1",
        "@ NS ns.example.test.",
        *records,
    ]
    return "\n".join(lines) + "\n"
