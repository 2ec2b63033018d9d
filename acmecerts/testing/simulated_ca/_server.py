"""``SimulatedCA``: an in-process ACME server (RFC 8555, RFC 9773 ARI, profiles).

It is an :class:`~acmecerts.transport.HttpExchange`: give it to an
:class:`~acmecerts.transport.AcmeTransport` (``client=ca``) and the real client, its
flow, retries, ledger and the :class:`~acmecerts.CertificateManager` above it talk to it
as to Let's Encrypt, with no socket. See :mod:`acmecerts.testing.simulated_ca`.
"""

from __future__ import annotations

import collections
import datetime as _dt
import ipaddress
import json
import random
from typing import TYPE_CHECKING, Any

import httpx
from cryptography import x509

from acmecerts import Clock
from acmecerts.testing.simulated_ca import _jws
from acmecerts.testing.simulated_ca._buckets import Limits
from acmecerts.testing.simulated_ca._config import (
    Account,
    Authorization,
    CertificateRecord,
    Latency,
    MassRevocation,
    Order,
    Outage,
    wait_latency,
)
from acmecerts.testing.simulated_ca._enforce import Enforcer, Refusal
from acmecerts.testing.simulated_ca._issuer import (
    Issuer,
    _b64d,
    _csr_identifiers,
    _iso,
    immediate_window,
)
from acmecerts.testing.simulated_ca._jws import JwsRejected, Nonces, decode, public_key
from acmecerts.testing.simulated_ca._profiles import Profile, lets_encrypt_profiles
from acmecerts.testing.simulated_ca._solver import Published
from acmecerts.transport import Answer

if TYPE_CHECKING:
    from acmecerts.testing.simulated_ca._source import SourceExchange

__all__ = ["SimulatedCA"]

_ERR = "urn:ietf:params:acme:error:"
#: RFC 9773 §4.3: how long a client should wait before asking renewalInfo again.
ARI_RETRY_AFTER = 21_600
_ORDER_LIFETIME = _dt.timedelta(days=7)
_PENDING_AUTHZ = _dt.timedelta(days=7)
_CHALLENGES = ("http-01", "dns-01", "tls-alpn-01")
_OWN_HEADERS = ("content-type", "replay-nonce", "link")  # set by SimulatedCA.answer
_ARI_HEADERS = (("Retry-After", str(ARI_RETRY_AFTER)),)
#: notBefore lies this long before issuance (kept in mind by mass revocations).
BACKDATE = _dt.timedelta(hours=1)


class _Answer(Exception):
    """Ends a request with a problem document (or any status)."""

    def __init__(
        self, status: int, problem: str, detail: str, retry_after: int | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.problem, self.detail = status, problem, detail
        self.retry_after = retry_after


class SimulatedCA:
    """Let's Encrypt, in process, on the clock you give it (see the package docstring).

    Args:
        clock: Its time (share the client's: a :class:`~acmecerts.VirtualClock` for
            simulations).
        limits: The limits to enforce (:class:`Limits`; Let's Encrypt's by default).
        profiles: The profiles offered (Let's Encrypt's, with their dated steps).
        default_profile: The profile of an order naming none.
        seed: Seeds every random choice (tokens, serials, failures, revocation draws).
        failure_rate: The probability that a validation fails though answered right.
        always_fail: Identifier values whose validation always fails (misconfigured).
        outages: Periods answered with ``503``.
        latency: Virtual seconds each request takes (or a function of method and URL).
        mass_revocation: A mass revocation to stage (:class:`MassRevocation`).
        base_url: Where it pretends to live (``https://``; no socket is opened).
        source: The client address newAccount limits count (see :meth:`exchange_for`).
    """

    def __init__(
        self,
        clock: Clock,
        *,
        limits: Limits | None = None,
        profiles: dict[str, Profile] | None = None,
        default_profile: str = "classic",
        seed: int = 0,
        failure_rate: float = 0.0,
        always_fail: frozenset[str] | set[str] = frozenset(),
        outages: tuple[Outage, ...] = (),
        latency: Latency = 0.0,
        mass_revocation: MassRevocation | None = None,
        base_url: str = "https://ca.simulated.test",
        source: str = "192.0.2.1",
    ) -> None:
        self.clock = clock
        self.limits = limits if limits is not None else Limits()
        self.profiles = profiles if profiles is not None else lets_encrypt_profiles()
        self.default_profile = default_profile
        self.rng = random.Random(seed)  # noqa: S311 - a simulation, reproducible by seed
        self.failure_rate = failure_rate
        self.always_fail = frozenset(always_fail)
        self.outages = tuple(outages)
        self.latency = latency
        self.mass_revocation = mass_revocation
        self.base = base_url.rstrip("/")
        self.directory_url = f"{self.base}/directory"
        self.source = source
        self.issuer = Issuer(self.rng)
        self.nonces = Nonces()
        self.enforcer = Enforcer(self.limits, clock.now())
        #: What solvers published for the CA to validate (give it to SimulatedSolver).
        self.published = Published()
        self.accounts: dict[int, Account] = {}
        self._accounts_by_key: dict[str, int] = {}
        self.orders: dict[int, Order] = {}
        self.authorizations: dict[int, Authorization] = {}
        #: The orders waiting on each pending authorization.
        self._orders_of_authz: dict[int, list[Order]] = {}
        self._valid_authz: dict[tuple[int, tuple[str, str]], Authorization] = {}
        #: Every certificate issued, by serial.
        self.certificates: dict[int, CertificateRecord] = {}
        self._by_cert_id: dict[str, CertificateRecord] = {}
        self._sets_issued: set[tuple[tuple[str, str], ...]] = set()
        #: Requests answered, by endpoint and status: ``stats[("newOrder", 201)]``.
        self.stats: collections.Counter[tuple[str, int]] = collections.Counter()
        #: Refusals by limit name (``"new_orders_per_account"``, ``"request_rate:..."``).
        self.refusals: collections.Counter[str] = collections.Counter()
        self._next_id = 0
        self._directory = json.dumps(
            {
                "newNonce": f"{self.base}/new-nonce",
                "newAccount": f"{self.base}/new-account",
                "newOrder": f"{self.base}/new-order",
                "revokeCert": f"{self.base}/revoke-cert",
                "keyChange": f"{self.base}/key-change",
                "renewalInfo": f"{self.base}/renewal-info",
                "meta": {
                    "profiles": {p.name: p.description for p in self.profiles.values()},
                },
            }
        ).encode()
        self._routes = {
            "directory": self._get_directory,
            "new-nonce": self._new_nonce,
            "new-account": self._new_account,
            "new-order": self._new_order,
            "account": self._account,
            "order": self._order,
            "authz": self._authz,
            "chall": self._challenge,
            "finalize": self._finalize,
            "cert": self._cert,
            "renewal-info": self._renewal_info,
        }
        self._index = (b"Link", f'<{self.directory_url}>;rel="index"'.encode())  # every answer
        self._endpoints = {
            "directory": "directory",
            "new-nonce": "newNonce",
            "new-account": "newAccount",
            "new-order": "newOrder",
            "renewal-info": "renewalInfo",
            "revoke-cert": "revokeCert",
        }

    # -- the exchange seam ------------------------------------------------------------

    def exchange_for(self, source: str) -> SourceExchange:
        """An exchange whose requests come from ``source`` (per-IP limits count it)."""
        from acmecerts.testing.simulated_ca._source import SourceExchange

        return SourceExchange(self, source)

    async def exchange(
        self, method: str, url: httpx.URL, headers: Any, body: bytes, timeouts: Any
    ) -> Answer:
        """Answer one request (the :class:`~acmecerts.transport.HttpExchange` contract)."""
        return await self.answer(method, url, body, self.source)

    async def aclose(self) -> None:
        """Nothing to release."""

    async def answer(self, method: str, url: httpx.URL, body: bytes, source: str) -> Answer:
        """One request from ``source``: its whole answer, after the configured latency."""
        await wait_latency(self.latency, method, url)
        path = url.path
        parts = path.strip("/").split("/")
        route = parts[0] if parts else ""
        endpoint = self._endpoints.get(route, "other")
        now = self.clock.now()
        headers: list[tuple[str, str]] = []
        try:
            for outage in self.outages:
                if outage.covers(now):
                    raise _Answer(
                        503, "serverInternal", "the CA is unavailable", outage.retry_after
                    )
            refused = self.enforcer.request(endpoint, source, now)
            if refused is not None:
                raise self._refused(refused)
            handler = self._routes.get(route)
            if handler is None:
                raise _Answer(404, "malformed", f"no resource at {path}", None)
            status, content, headers, ctype = handler(method, parts[1:], body, source, now)
        except _Answer as exc:
            status, ctype = exc.status, "application/problem+json"
            content = json.dumps(
                {"type": _ERR + exc.problem, "detail": exc.detail, "status": exc.status}
            ).encode()
            if exc.retry_after is not None:
                headers = [("Retry-After", str(exc.retry_after))]
        except JwsRejected as exc:
            status, ctype = 400, "application/problem+json"
            if exc.problem == "unauthorized":
                status = 403
            content = json.dumps(
                {"type": _ERR + exc.problem, "detail": exc.detail, "status": status}
            ).encode()
        self.stats[(endpoint if endpoint != "other" else route, status)] += 1
        # these three are the CA's own: a handler's are replaced
        own = [(k.encode(), v.encode()) for k, v in headers if k.lower() not in _OWN_HEADERS]
        own.append((b"Content-Type", ctype.encode()))
        if method != "GET" or route == "new-nonce":  # as Boulder: no nonce to other GETs
            own.append((b"Replay-Nonce", self.nonces.issue().encode()))
        return Answer(status, b"", httpx.Headers([*own, self._index]), content)

    def _refused(self, refusal: Refusal) -> _Answer:
        self.refusals[refusal.limit] += 1
        return _Answer(refusal.status, "rateLimited", refusal.detail, refusal.retry_after)

    # -- helpers ----------------------------------------------------------------------

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _verified(
        self, body: bytes, url: str, *, new_account: bool = False
    ) -> tuple[dict[str, Any], Any, Account | None]:
        """The JWS's header and payload (JSON or ``None`` for POST-as-GET), its account."""
        header, payload, signing_input, signature = decode(body)
        self.nonces.redeem(header.get("nonce"))
        if header.get("url") != url:
            raise JwsRejected("unauthorized", "the JWS url does not match the request URL")
        alg = header.get("alg")
        account: Account | None = None
        if new_account:
            if "jwk" not in header or "kid" in header:
                raise JwsRejected("malformed", "newAccount must be signed with a jwk")
            key = public_key(header["jwk"])
        else:
            kid = header.get("kid")
            if not isinstance(kid, str) or "jwk" in header:
                raise JwsRejected("malformed", "the request must be signed with a kid")
            account = self._account_at(kid)
            key = account.key
        _jws.verify(key, str(alg), signing_input, signature)
        data = json.loads(payload) if payload else None
        return header, data, account

    def _account_at(self, kid: str) -> Account:
        try:
            number = int(kid.rsplit("/", 1)[1])
            return self.accounts[number]
        except (IndexError, ValueError, KeyError):
            raise JwsRejected("accountDoesNotExist", f"no account {kid}") from None

    def _json(self, status: int, doc: Any, *extra: tuple[str, str]) -> Any:
        return status, json.dumps(doc).encode(), list(extra), "application/json"

    # -- resources --------------------------------------------------------------------

    def _get_directory(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        return 200, self._directory, [], "application/json"

    def _new_nonce(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        return (200 if method == "HEAD" else 204), b"", [("Cache-Control", "no-store")], ""

    def _new_account(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        header, payload, _ = self._verified(body, f"{self.base}/new-account", new_account=True)
        jwk = header["jwk"]
        thumb = _jws.thumbprint(jwk)
        existing = self._accounts_by_key.get(thumb)
        if existing is not None:
            account = self.accounts[existing]
            return self._json(200, {"status": "valid"}, ("Location", account.url))
        if (payload or {}).get("onlyReturnExisting"):
            raise _Answer(400, "accountDoesNotExist", "no account for this key")
        refused = self.enforcer.new_account(src, now)
        if refused is not None:
            raise self._refused(refused)
        number = self._id()
        account = Account(number, f"{self.base}/account/{number}", jwk, public_key(jwk), thumb)
        self.accounts[number] = account
        self._accounts_by_key[thumb] = number
        return self._json(201, {"status": "valid"}, ("Location", account.url))

    def _account(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, _, account = self._verified(body, f"{self.base}/account/{parts[0]}")
        assert account is not None
        return self._json(200, {"status": "valid"})

    def _new_order(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, payload, account = self._verified(body, f"{self.base}/new-order")
        assert account is not None
        payload = payload or {}
        try:
            idents = tuple(
                sorted({(str(i["type"]), str(i["value"]).lower()) for i in payload["identifiers"]})
            )
        except (KeyError, TypeError) as exc:
            raise _Answer(400, "malformed", f"bad identifiers: {exc}") from None
        name = payload.get("profile") or self.default_profile
        profile = self.profiles.get(name)
        if profile is None:
            raise _Answer(400, "invalidProfile", f"profile {name!r} is not offered")
        if not idents or len(idents) > profile.max_names:
            raise _Answer(400, "rejectedIdentifier", f"{len(idents)} identifiers")
        if not profile.allows_ip and any(kind == "ip" for kind, _ in idents):
            raise _Answer(400, "rejectedIdentifier", f"profile {name} allows no IP addresses")
        replaces = payload.get("replaces")
        if replaces is not None:
            self._check_replaces(str(replaces), account, idents)
        renewal = idents in self._sets_issued
        refused = self.enforcer.new_order(
            account.id, idents, replaces=replaces is not None, renewal=renewal, now=now
        )
        if refused is not None:
            raise self._refused(refused)
        era = profile.era(now)
        authzs = [self._authorization_for(account, ident, era.reuse, now) for ident in idents]
        number = self._id()
        order = Order(
            number,
            f"{self.base}/order/{number}",
            account.id,
            idents,
            profile.name,
            authzs,
            now + _ORDER_LIFETIME,
            replaces,
            renewal,
        )
        self._update_order(order)
        self.orders[number] = order
        for authz in authzs:
            if authz.status == "pending":
                self._orders_of_authz.setdefault(authz.id, []).append(order)
        return self._json(201, self._order_doc(order), ("Location", order.url))

    def _check_replaces(self, cert_id: str, account: Account, idents: tuple[Any, ...]) -> None:
        record = self._by_cert_id.get(cert_id)
        if record is None or record.account != account.id:
            raise _Answer(400, "malformed", f"replaces names no certificate of yours: {cert_id}")
        if record.replaced_by is not None:
            raise _Answer(409, "alreadyReplaced", f"{cert_id} was already replaced")
        if not set(record.identifiers) & set(idents):
            raise _Answer(400, "malformed", "the order shares no identifier with replaces")

    def _authorization_for(
        self, account: Account, ident: tuple[str, str], reuse: _dt.timedelta, now: _dt.datetime
    ) -> Authorization:
        valid = self._valid_authz.get((account.id, ident))
        if valid is not None and valid.validated_at is not None:  # noqa: SIM102
            if now - valid.validated_at <= reuse and valid.expires > now:
                return valid
        number = self._id()
        authz = Authorization(
            number,
            f"{self.base}/authz/{number}",
            account.id,
            ident,
            ident[1].startswith("*."),
            f"{self.rng.getrandbits(128):032x}",
            "pending",
            now + _PENDING_AUTHZ,
        )
        self.authorizations[number] = authz
        return authz

    def _update_order(self, order: Order) -> None:
        if order.status != "pending":
            return
        states = {a.status for a in order.authorizations}
        if states - {"valid", "pending"}:
            order.status = "invalid"
            failed = next(a for a in order.authorizations if a.status != "valid" and a.error)
            order.error = failed.error if failed else None
        elif states == {"valid"}:
            order.status = "ready"

    def _order_doc(self, order: Order) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "status": order.status,
            "expires": _iso(order.expires),
            "identifiers": [{"type": t, "value": v} for t, v in order.identifiers],
            "authorizations": [a.url for a in order.authorizations],
            "finalize": f"{self.base}/finalize/{order.id}",
            "profile": order.profile,
        }
        if order.replaces is not None:
            doc["replaces"] = order.replaces
        if order.certificate is not None:
            doc["certificate"] = f"{self.base}/cert/{order.certificate}"
        if order.error is not None:
            doc["error"] = order.error
        return doc

    def _order(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, _, account = self._verified(body, f"{self.base}/order/{parts[0]}")
        order = self._owned(self.orders, parts[0], account)
        return self._json(200, self._order_doc(order))

    def _owned(self, table: dict[int, Any], key: str, account: Account | None) -> Any:
        try:
            item = table[int(key)]
        except (ValueError, KeyError):
            raise _Answer(404, "malformed", "no such resource") from None
        if account is None or item.account != account.id:
            raise _Answer(403, "unauthorized", "not your resource")
        return item

    def _authz_doc(self, authz: Authorization) -> dict[str, Any]:
        kind, value = authz.identifier
        base = value[2:] if authz.wildcard else value
        types = ("dns-01",) if authz.wildcard else _CHALLENGES
        challenges = []
        for index, ctype in enumerate(types):
            challenge: dict[str, Any] = {
                "type": ctype,
                "url": f"{self.base}/chall/{authz.id}/{index}",
                "token": authz.token,
                "status": authz.status if authz.status in ("valid", "invalid") else "pending",
            }
            if authz.status == "invalid" and authz.error is not None:
                challenge["error"] = authz.error
            challenges.append(challenge)
        doc: dict[str, Any] = {
            "status": authz.status,
            "expires": _iso(authz.expires),
            "identifier": {"type": kind, "value": base},
            "challenges": challenges,
        }
        if authz.wildcard:
            doc["wildcard"] = True
        return doc

    def _authz(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, payload, account = self._verified(body, f"{self.base}/authz/{parts[0]}")
        authz = self._owned(self.authorizations, parts[0], account)
        if payload and payload.get("status") == "deactivated":  # noqa: SIM102
            if authz.status in ("pending", "valid"):
                authz.status = "deactivated"
                self._valid_authz.pop((authz.account, authz.identifier), None)
        return self._json(200, self._authz_doc(authz))

    def _challenge(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        url = f"{self.base}/chall/{parts[0]}/{parts[1]}"
        _, payload, account = self._verified(body, url)
        assert account is not None
        authz = self._owned(self.authorizations, parts[0], account)
        types = ("dns-01",) if authz.wildcard else _CHALLENGES
        ctype = types[int(parts[1])]
        if payload is not None and authz.status == "pending":
            self._validate(authz, account, ctype, now)
        challenge = self._authz_doc(authz)["challenges"][int(parts[1])]
        return self._json(200, challenge, ("Link", f'<{authz.url}>;rel="up"'))

    def _validate(self, authz: Authorization, account: Account, ctype: str, now: Any) -> None:
        """RFC 8555 §8: the published key authorization must be token.thumbprint."""
        value = authz.identifier[1]
        base = value[2:] if authz.wildcard else value
        expected = f"{authz.token}.{account.thumbprint}"
        seen = self.published.get(ctype, base, authz.token)
        problem: str | None = None
        if seen != expected:
            problem = f"{ctype}: the key authorization for {base} is missing or wrong"
        elif value in self.always_fail or base in self.always_fail:
            problem = f"{ctype}: {base} is misconfigured (validation always fails)"
        elif self.failure_rate and self.rng.random() < self.failure_rate:
            problem = f"{ctype}: validation of {base} failed (simulated transient failure)"
        if problem is None:
            authz.status = "valid"
            authz.validated_at = now
            authz.expires = now + _dt.timedelta(days=30)
            self._valid_authz[(account.id, authz.identifier)] = authz
            self.enforcer.authorization_valid(account.id, authz.identifier)
        else:
            authz.status = "invalid"
            authz.error = {"type": _ERR + "unauthorized", "detail": problem, "status": 403}
            self.enforcer.authorization_failed(account.id, authz.identifier, now)
        for order in self._orders_of_authz.pop(authz.id, ()):
            self._update_order(order)

    def _finalize(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, payload, account = self._verified(body, f"{self.base}/finalize/{parts[0]}")
        order = self._owned(self.orders, parts[0], account)
        self._update_order(order)
        if order.status != "ready":
            raise _Answer(403, "orderNotReady", f"the order is {order.status}")
        try:
            csr = x509.load_der_x509_csr(_b64d(str((payload or {})["csr"])))
        except (KeyError, ValueError) as exc:
            raise _Answer(400, "badCSR", f"unreadable CSR: {exc}") from None
        if not csr.is_signature_valid:
            raise _Answer(400, "badCSR", "the CSR's signature does not verify")
        names = _csr_identifiers(csr)
        if names != set(order.identifiers):
            raise _Answer(400, "badCSR", "the CSR's names are not the order's")
        profile = self.profiles[order.profile]
        era = profile.era(now)
        not_before = now.replace(microsecond=0) - BACKDATE
        not_after = not_before + era.lifetime - _dt.timedelta(seconds=1)
        serial = self.issuer.new_serial()
        general: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address(v)) if k == "ip" else x509.DNSName(v)
            for k, v in order.identifiers
        ]
        pem = self.issuer.sign(csr, general, serial, not_before, not_after)
        record = CertificateRecord(
            serial,
            self.issuer.cert_id(serial),
            order.account,
            order.identifiers,
            order.profile,
            not_before,
            not_after,
            pem + self.issuer.chain_pem,
            self.rng.random(),
        )
        self.certificates[serial] = record
        self._by_cert_id[record.cert_id] = record
        self.enforcer.issued(
            order.identifiers, replaces=order.replaces is not None, renewal=order.renewal, now=now
        )
        self._sets_issued.add(order.identifiers)
        if order.replaces is not None:
            old = self._by_cert_id[order.replaces]
            old.replaced_by, old.replaced_at = serial, now
        order.status = "valid"
        order.certificate = serial
        return self._json(200, self._order_doc(order), ("Location", order.url))

    def _cert(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        _, _, account = self._verified(body, f"{self.base}/cert/{parts[0]}")
        record = self._owned(self.certificates, parts[0], account)
        return 200, record.pem, [], "application/pem-certificate-chain"

    def _renewal_info(self, method: str, parts: list[str], body: bytes, src: str, now: Any) -> Any:
        """RFC 9773 §4.2: GET {renewalInfo}/{certID}, cached per certificate."""
        record = self._by_cert_id.get(parts[0]) if parts else None
        if record is None:
            raise _Answer(404, "malformed", "no certificate with this certID")
        window = self.window_of(record, now)
        if window != record.ari_window:
            doc = {"suggestedWindow": {"start": _iso(window[0]), "end": _iso(window[1])}}
            record.ari_window, record.ari_body = window, json.dumps(doc).encode()
        return 200, record.ari_body, _ARI_HEADERS, "application/json"

    def window_of(
        self, record: CertificateRecord, now: _dt.datetime
    ) -> tuple[_dt.datetime, _dt.datetime]:
        """The suggested window of ``record`` as its renewalInfo states it at ``now``."""
        revocation = self.mass_revocation
        if (
            revocation is not None
            and now >= revocation.at
            and record.not_before + BACKDATE < revocation.at  # issued before it
            and record.draw < revocation.fraction
        ):
            if record.revoked_at is None and record.replaced_by is None:  # noqa: SIM102
                if now >= revocation.deadline:
                    record.revoked_at = revocation.deadline
            return immediate_window(revocation.at)
        return record.base_window

    def unpause(self, account_url: str, identifier: str, kind: str = "dns") -> None:
        """Unpause ``identifier`` for the account (what Let's Encrypt's unpause page does)."""
        self.enforcer.unpause(self._account_at(account_url).id, (kind, identifier.lower()))
