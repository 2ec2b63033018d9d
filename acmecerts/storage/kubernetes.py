"""A :class:`~acmecerts.storage.Storage` in the Kubernetes API, for several replicas.

Install with the ``kubernetes`` extra (it brings `lightkube`_, a typed async client that
reads kubeconfig files and the in-cluster service account). Every replica of an operator
pointed at the same namespace shares one account key, one set of certificates, one
rate-limit ledger and the same locks.

Object mapping (all in one namespace; ``P`` is ``name_prefix``, ``acmecerts`` by default)::

    key, secret=False    ConfigMap  P-<key slug>-<hash>        binaryData.value
    key, secret=True     Secret     P-<key slug>-<hash>        type Opaque, data.value
    certificate <name>   Secret     P-<name>-tls               type kubernetes.io/tls,
      (a copy of its chain and key)                            tls.crt, tls.key
    lock(name)           Lease      P-lock-<name slug>-<hash>  coordination.k8s.io/v1

* Object names are DNS-1123 subdomains: the key with every character outside
  ``[a-z0-9]`` turned into ``-``, cut so that the whole name stays within 253
  characters, and 16 hex digits of the key's SHA-256 appended, so two keys never share
  an object. The exact key is kept in the annotation ``acmecerts.io/key`` and checked on
  every read; an ``acmecerts.io/write-id`` annotation changes on every write, so even
  rewriting the same bytes gives a new version.
* A key lives in one object. Reads try the kind it was last seen in (else a Secret for
  ``*key.pem``, a ConfigMap otherwise), then the other kind. Storing a key with the
  other ``secret`` flag than it has moves it (write the new object, delete the old).
* Leases are never deleted (one per lock name, e.g. per certificate); TLS Secrets are
  deleted with their certificate's record (or, in the previous layout with no record
  beside it, its ``cert.pem`` or ``privkey.pem``).
* Everything carries the labels ``app.kubernetes.io/managed-by: acmecerts``,
  ``acmecerts.io/store: P`` and ``acmecerts.io/role`` (``value``, ``tls`` or ``lock``);
  :meth:`KubernetesStorage.list` selects by label and filters on the annotation.
* The version of a value is the object's ``metadata.resourceVersion``. A compare-and-swap
  sends it back on the update (``PUT``), or as a delete precondition; the API server
  answers 409 Conflict when the object changed, which becomes
  :class:`~acmecerts.storage.VersionConflict` (re-read and retry). ``expect_version=None``
  is a create, whose 409 AlreadyExists is a conflict too.
* Certificates: when a certificate's record ``certificate.json`` is stored (as laid out
  by :mod:`acmecerts.storage.keys`; or, in the previous layout, its ``cert.pem`` or
  ``privkey.pem``) and its chain and key match, they are also copied into a
  ``kubernetes.io/tls`` Secret that an Ingress can name (see :meth:`tls_secret_name`,
  and :meth:`store_tls_secret` to write one directly). The keyed values stay the source
  of truth; the TLS Secret follows them and is removed with them.
* Locks are ``Lease`` objects: ``holderIdentity``, ``leaseDurationSeconds`` (the lease,
  rounded up to whole seconds), ``acquireTime``, ``renewTime``, ``leaseTransitions``. A
  lock is taken by creating the Lease, or by a compare-and-swap update when it has no
  holder or its lease has run out; the holder renews it every third of the lease while
  its ``async with`` block runs, and clears the holder (compare-and-swap) on the way
  out. A lease counts as run out when ``renewTime + leaseDurationSeconds`` is past by
  this machine's clock, or when a waiter has seen it unchanged for a whole lease (so a
  holder whose clock runs ahead cannot keep a lock forever).

Lease holders read ``<identity>/<random per acquisition>``, the identity being
``<hostname>/<pid>/<random>`` unless given, so ``kubectl get leases`` shows who holds what.

RBAC: the service account needs ``get``, ``list``, ``create``, ``update`` and ``delete`` on
``secrets`` and ``configmaps``, and ``get``, ``create`` and ``update`` on
``leases.coordination.k8s.io``, in the namespace.

Errors: every API or connection failure is a :class:`~acmecerts.errors.StorageError` (401
and 403 say which credentials or permission are missing); conflicts are
:class:`~acmecerts.storage.VersionConflict`, and a lock not acquired in time is
:class:`~acmecerts.storage.LockTimeout`.

.. _lightkube: https://lightkube.readthedocs.io/
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import logging
import math
import os
import random
import re
import secrets
import socket
from types import TracebackType
from typing import Any, Final, Literal

import anyio
import anyio.abc
import httpx2
import lightkube
from lightkube.config import client_adapter
from lightkube.core.client import LabelSelector
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease as LeaseObject
from lightkube.resources.core_v1 import ConfigMap, Secret

from acmecerts._time import as_seconds
from acmecerts.errors import InvalidInput, StorageError
from acmecerts.storage._base import ANY_VERSION, LockTimeout, StoredValue, VersionConflict
from acmecerts.storage._base import _AnyVersion as _AnyVersionType
from acmecerts.storage.keys import (
    CertificateBundle,
    certificate_slug,
    validate_key,
    validate_prefix,
)

__all__ = ["KubernetesStorage"]

_log = logging.getLogger("acmecerts.storage.kubernetes")

#: Labels and annotations on every object this store owns.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "acmecerts"
STORE_LABEL: Final = "acmecerts.io/store"
ROLE_LABEL: Final = "acmecerts.io/role"
KEY_ANNOTATION: Final = "acmecerts.io/key"
LOCK_ANNOTATION: Final = "acmecerts.io/lock"
WRITE_ANNOTATION: Final = "acmecerts.io/write-id"
CERTIFICATE_ANNOTATION: Final = "acmecerts.io/certificate"

_VALUE_FIELD: Final = "value"
_MAX_NAME: Final = 253
_HASH_CHARS: Final = 16
_PREFIX_RE: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")

_Role = Literal["value", "tls", "lock"]
_Kind = type[Secret] | type[ConfigMap]


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH_CHARS]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def object_name(prefix: str, text: str, *, infix: str = "", suffix: str = "") -> str:
    """A DNS-1123 subdomain name for ``text``: ``prefix-[infix-]slug-[suffix-]hash``.

    The hash (of the exact ``text``) keeps distinct texts apart even when their slugs
    agree (``A`` and ``a``) or had to be cut to fit in 253 characters.
    """
    head = f"{prefix}-{infix}-" if infix else f"{prefix}-"
    tail = f"-{suffix}-{_digest(text)}" if suffix else f"-{_digest(text)}"
    room = _MAX_NAME - len(head) - len(tail)
    slug = _slug(text)[:room].strip("-")
    return f"{head}{slug}{tail}" if slug else f"{head.rstrip('-')}{tail}"


# ---------------------------------------------------------------------------
# Certificates: which keys make a pair (named by acmecerts.storage.keys.KeyLayout)
# ---------------------------------------------------------------------------

#: ``<ca>/accounts/<account>/certificates/<cert>/{certificate.json,cert.pem,privkey.pem}``
_CERTIFICATE_FILE: Final = re.compile(
    r"(?P<prefix>[^/]+/accounts/[^/]+/certificates/(?P<slug>[^/]+)/)"
    r"(?P<file>certificate\.json|cert\.pem|privkey\.pem)"
)
_RECORD: Final = "certificate.json"


def _certificate_of(key: str) -> tuple[str, str, bool] | None:
    """``(certificate prefix, slug, whether it is the record)`` for a certificate's file."""
    match = _CERTIFICATE_FILE.fullmatch(key)
    return (match["prefix"], match["slug"], match["file"] == _RECORD) if match else None


def _dns_name(slug: str) -> str:
    """A certificate slug as DNS-1123 labels (``_wildcard_.a.org`` → ``wildcard.a.org``)."""
    labels = (re.sub(r"[^a-z0-9-]+", "-", label).strip("-") for label in slug.split("."))
    return ".".join(label for label in labels if label)


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether the first certificate in ``cert_pem`` is for the private key ``key_pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki))


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _status_code(exc: lightkube.ApiError) -> int:
    code = exc.status.code if exc.status is not None else None
    return int(code) if code else exc.response.status_code


class KubernetesStorage:
    """Keys, values and locks in a Kubernetes namespace (see the module docstring).

    ``KubernetesStorage(namespace, kubeconfig=..., context=...)`` uses that kubeconfig
    file and context (the current one by default). Without ``kubeconfig`` it runs
    in-cluster with the pod's service account, else falls back to ``$KUBECONFIG`` or
    ``~/.kube/config``. Without ``namespace``, the context's namespace (in-cluster: the
    pod's own). Close it with :meth:`aclose` or use it as an ``async with`` block.

    ``name_prefix`` starts every object name and is the ``acmecerts.io/store`` label:
    stores with different prefixes share a namespace without seeing each other's keys.
    ``timeout`` bounds each API request (seconds). ``identity`` names this replica in
    Lease holders (default ``<hostname>/<pid>/<random>``).

    Raises :class:`~acmecerts.errors.StorageError` when no configuration can be loaded.
    Nothing is sent to the API server until the first call.
    """

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        name_prefix: str = "acmecerts",
        timeout: float = 10.0,
        identity: str | None = None,
    ) -> None:
        if not _PREFIX_RE.fullmatch(name_prefix):
            raise ValueError(
                f"name_prefix {name_prefix!r} must be 1-40 lowercase letters, digits or '-'"
            )
        try:
            if kubeconfig is not None:
                config = lightkube.KubeConfig.from_file(kubeconfig).get(context)
            else:
                config = lightkube.KubeConfig.from_env().get(context)
        except (lightkube.ConfigError, OSError, ValueError, KeyError) as exc:
            where = f"kubeconfig {os.fspath(kubeconfig)!r}" if kubeconfig else "the environment"
            raise StorageError(
                f"cannot load a Kubernetes configuration from {where}: {exc}"
            ) from exc
        if config is None:
            raise StorageError("no Kubernetes context selected in the configuration")
        self._config = config
        self.namespace: str = namespace or config.namespace
        self.name_prefix = name_prefix
        self._server = config.cluster.server
        self._timeout = httpx2.Timeout(timeout)
        try:
            self._client = lightkube.AsyncClient(
                config,
                namespace=self.namespace,
                timeout=self._timeout,
                lazy=False,
                field_manager="acmecerts",
            )
        except (lightkube.ConfigError, OSError, ValueError) as exc:
            raise StorageError(f"cannot set up the Kubernetes client: {exc}") from exc
        self._raw: httpx2.AsyncClient | None = None
        self._identity = identity or (
            f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        )
        #: Which kind of object each key was last seen in (saves a request on load).
        self._kinds: dict[str, _Kind] = {}

    def __repr__(self) -> str:
        return (
            f"KubernetesStorage(namespace={self.namespace!r}, server={self._server!r}, "
            f"name_prefix={self.name_prefix!r})"
        )

    # -- lifecycle -----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        with anyio.CancelScope(shield=True):
            await self._client.aclose()
            if self._raw is not None:
                await self._raw.aclose()

    async def __aenter__(self) -> KubernetesStorage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- names ---------------------------------------------------------------

    def object_name(self, key: str) -> str:
        """The name of the ConfigMap or Secret that holds ``key``."""
        return object_name(self.name_prefix, key)

    def lease_name(self, lock: str) -> str:
        """The name of the ``Lease`` behind ``lock(name)``."""
        return object_name(self.name_prefix, lock, infix="lock")

    def tls_secret_name(self, certificate: str) -> str:
        """The ``kubernetes.io/tls`` Secret that mirrors certificate ``certificate``.

        ``certificate`` is the certificate's name as given to
        :meth:`KeyLayout.certificate <acmecerts.storage.keys.KeyLayout.certificate>`; the
        Secret is ``P-<name>-tls`` (``*`` spelled ``wildcard``, other characters outside
        DNS labels as ``-``): ``acmecerts-www.example.com-tls``. Name it in an Ingress's
        ``tls[].secretName``; list them with ``kubectl get secrets -l acmecerts.io/role=tls``.
        """
        return self._tls_name(certificate_slug(certificate))

    def _tls_name(self, slug: str) -> str:
        return f"{self.name_prefix}-{_dns_name(slug) or _digest(slug)}-tls"

    def _labels(self, role: _Role) -> dict[str, str]:
        return {MANAGED_BY_LABEL: MANAGED_BY, STORE_LABEL: self.name_prefix, ROLE_LABEL: role}

    def _meta(
        self, name: str, role: _Role, annotations: dict[str, str], version: str | None = None
    ) -> ObjectMeta:
        return ObjectMeta(
            name=name,
            namespace=self.namespace,
            labels=self._labels(role),
            annotations=annotations,
            resourceVersion=version,
        )

    # -- API calls, with errors translated ------------------------------------

    def _error(self, exc: Exception, what: str) -> StorageError:
        """Translate a lightkube / HTTP error into a :class:`StorageError`."""
        if isinstance(exc, lightkube.ApiError):
            code = _status_code(exc)
            message = (exc.status.message if exc.status is not None else None) or str(exc)
            if code == 401:
                return StorageError(
                    f"the Kubernetes API at {self._server} rejected our credentials "
                    f"(401 Unauthorized) while {what}: the token or client certificate in "
                    f"the kubeconfig / service account is wrong or expired"
                )
            if code == 403:
                return StorageError(
                    f"the Kubernetes API at {self._server} forbids {what} (403 Forbidden): "
                    f"grant get/list/create/update/delete on secrets and configmaps and "
                    f"get/create/update on leases.coordination.k8s.io in namespace "
                    f"{self.namespace!r} ({message})"
                )
            if code == 409:
                return VersionConflict(f"{what}: {message}")
            return StorageError(f"Kubernetes API error {code} while {what}: {message}")
        if isinstance(exc, httpx2.HTTPError):
            return StorageError(
                f"cannot reach the Kubernetes API at {self._server} while {what}: "
                f"{type(exc).__name__}: {exc}"
            )
        return StorageError(f"{what} failed: {type(exc).__name__}: {exc}")

    async def _get(self, kind: _Kind, name: str) -> Secret | ConfigMap | None:
        try:
            return await self._client.get(kind, name)
        except lightkube.ApiError as exc:
            if _status_code(exc) == 404:
                return None
            raise self._error(exc, f"reading {kind.__name__} {name}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self._error(exc, f"reading {kind.__name__} {name}") from exc

    async def _create(self, obj: Secret | ConfigMap) -> Secret | ConfigMap:
        if isinstance(obj, Secret):
            return await self._client.create(obj)
        return await self._client.create(obj)

    async def _replace(self, obj: Secret | ConfigMap) -> Secret | ConfigMap:
        if isinstance(obj, Secret):
            return await self._client.replace(obj)
        return await self._client.replace(obj)

    async def _raw_client(self) -> httpx2.AsyncClient:
        if self._raw is None:
            params = client_adapter.ConnectionParams(timeout=self._timeout)
            self._raw = client_adapter.AsyncClient(self._config, params)
        return self._raw

    async def _delete(self, kind: _Kind, name: str, version: str | None) -> bool:
        """Delete one object, only if its resourceVersion is ``version`` (when given).

        lightkube has no delete preconditions, so this one request goes through an HTTP
        client that lightkube configured (same server, TLS and credentials).
        """
        plural = "secrets" if kind is Secret else "configmaps"
        path = f"/api/v1/namespaces/{self.namespace}/{plural}/{name}"
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if version is not None:
            body["preconditions"] = {"resourceVersion": version}
        what = f"deleting {kind.__name__} {name}"
        try:
            client = await self._raw_client()
            response = await client.request("DELETE", path, json=body)
            if response.status_code == 404:
                return False
            if response.is_error:
                raise lightkube.ApiError(request=response.request, response=response)
        except (lightkube.ApiError, httpx2.HTTPError, OSError, ValueError) as exc:
            raise self._error(exc, what) from exc
        return True

    # -- values ----------------------------------------------------------------

    def _lookup_order(self, key: str) -> tuple[_Kind, _Kind]:
        first = self._kinds.get(key)
        if first is None:
            first = Secret if _looks_secret(key) else ConfigMap
        return (first, ConfigMap if first is Secret else Secret)

    def _decode(self, key: str, obj: Secret | ConfigMap) -> StoredValue:
        meta = obj.metadata or ObjectMeta()
        kind = type(obj).__name__
        where = f"{kind} {self.namespace}/{meta.name}"
        stored_key = (meta.annotations or {}).get(KEY_ANNOTATION)
        if stored_key != key:
            raise StorageError(
                f"{where} should hold key {key!r} but its {KEY_ANNOTATION} annotation is "
                f"{stored_key!r}; not touching it",
                path=key,
            )
        fields = obj.data if isinstance(obj, Secret) else obj.binaryData
        encoded = (fields or {}).get(_VALUE_FIELD)
        if encoded is None or meta.resourceVersion is None:
            raise StorageError(
                f"{where} (key {key!r}) is corrupt: it has no {_VALUE_FIELD!r} data", path=key
            )
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise StorageError(
                f"{where} (key {key!r}) is corrupt: its data is not base64", path=key
            ) from exc
        return StoredValue(data=data, version=meta.resourceVersion)

    def _build(self, kind: _Kind, key: str, data: bytes, version: str | None) -> Secret | ConfigMap:
        # A fresh write id makes every write a change, so even rewriting the same bytes
        # gets a new resourceVersion (no ABA for compare-and-swap).
        annotations = {KEY_ANNOTATION: key, WRITE_ANNOTATION: secrets.token_hex(8)}
        meta = self._meta(self.object_name(key), "value", annotations, version)
        encoded = {_VALUE_FIELD: base64.b64encode(data).decode("ascii")}
        if kind is Secret:
            return Secret(metadata=meta, type="Opaque", data=encoded)
        return ConfigMap(metadata=meta, binaryData=encoded)

    async def _find(self, key: str) -> tuple[_Kind, StoredValue] | None:
        name = self.object_name(key)
        for kind in self._lookup_order(key):
            obj = await self._get(kind, name)
            if obj is not None:
                self._kinds[key] = kind
                return kind, self._decode(key, obj)
        return None

    async def load(self, key: str) -> StoredValue | None:
        """Read ``key`` (its ConfigMap or Secret); ``None`` if it does not exist."""
        validate_key(key)
        found = await self._find(key)
        return found[1] if found else None

    async def store(
        self,
        key: str,
        data: bytes,
        *,
        secret: bool = False,
        expect_version: str | _AnyVersionType | None = ANY_VERSION,
    ) -> str:
        """Write ``key`` (one create or update request) and return its resourceVersion.

        A key is one object: a Secret when written with ``secret=True``, else a ConfigMap.
        Writing an existing key with the other ``secret`` moves it (the new object is
        written first, then the old one deleted).
        """
        validate_key(key)
        if not isinstance(data, bytes):
            raise InvalidInput(f"a stored value must be bytes, got {type(data).__name__}")
        kind: _Kind = Secret if secret else ConfigMap
        other: _Kind = ConfigMap if secret else Secret
        name = self.object_name(key)
        expected = expect_version if isinstance(expect_version, str) else None
        version: str
        while True:
            if expect_version is not None:
                # Update in place: with the expected resourceVersion, a compare-and-swap.
                obj = self._build(kind, key, data, expected)
                try:
                    replaced = await self._replace(obj)
                except lightkube.ApiError as exc:
                    if _status_code(exc) == 409:
                        raise VersionConflict(
                            f"key {key!r} changed since version {expected} was read"
                        ) from exc
                    if _status_code(exc) != 404:
                        raise self._error(exc, f"writing key {key!r}") from exc
                except (httpx2.HTTPError, OSError) as exc:
                    raise self._error(exc, f"writing key {key!r}") from exc
                else:
                    version = _version_of(replaced)
                    break
            # Not there as `kind`: it is new, or it is kept as the other kind.
            old = await self._get(other, name)
            old_version = old.metadata.resourceVersion if old and old.metadata else None
            if old is not None and expect_version is None:
                raise VersionConflict(f"key {key!r} already exists")
            if expected is not None and old_version != expected:
                raise VersionConflict(f"key {key!r} changed since version {expected} was read")
            try:
                created = await self._create(self._build(kind, key, data, None))
            except lightkube.ApiError as exc:
                if _status_code(exc) == 409:
                    if expect_version is ANY_VERSION:
                        continue  # created meanwhile by someone else: overwrite it
                    raise VersionConflict(f"key {key!r} already exists") from exc
                raise self._error(exc, f"creating key {key!r}") from exc
            except (httpx2.HTTPError, OSError) as exc:
                raise self._error(exc, f"creating key {key!r}") from exc
            version = _version_of(created)
            if old is not None:
                # The move's second half. Whatever changed the old object since it was
                # read lost to this write, which is already in place.
                try:
                    await self._delete(other, name, old_version)
                except VersionConflict:
                    await self._delete(other, name, None)
            break
        self._kinds[key] = kind
        await self._reflect_tls(key)
        return version

    async def delete(
        self, key: str, *, expect_version: str | _AnyVersionType | None = ANY_VERSION
    ) -> bool:
        """Remove ``key``; ``False`` if it did not exist.

        With a version, the delete carries it as a precondition (409 → VersionConflict).
        """
        validate_key(key)
        if expect_version is None:
            if await self._find(key) is not None:
                raise VersionConflict(f"key {key!r} exists")
            return False
        expected = expect_version if isinstance(expect_version, str) else None
        name = self.object_name(key)
        deleted = False
        for kind in self._lookup_order(key):
            try:
                deleted = await self._delete(kind, name, expected)
            except VersionConflict as exc:
                raise VersionConflict(
                    f"key {key!r} changed since version {expected} was read"
                ) from exc
            if deleted:
                break
        self._kinds.pop(key, None)
        if not deleted and expected is not None:
            raise VersionConflict(f"key {key!r} was deleted since version {expected} was read")
        if deleted:
            await self._unreflect_tls(key)
        return deleted

    async def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted (a label-selected list)."""
        validate_prefix(prefix)
        labels: LabelSelector = dict(self._labels("value"))
        keys: set[str] = set()

        def add(meta: ObjectMeta | None) -> None:
            key = ((meta and meta.annotations) or {}).get(KEY_ANNOTATION)
            if key is not None and key.startswith(prefix):
                keys.add(key)

        ns = self.namespace
        try:
            async for cm in self._client.list(
                ConfigMap, namespace=ns, labels=labels, chunk_size=500
            ):
                add(cm.metadata)
            async for secret in self._client.list(
                Secret, namespace=ns, labels=labels, chunk_size=500
            ):
                add(secret.metadata)
        except (lightkube.ApiError, httpx2.HTTPError, OSError) as exc:
            raise self._error(exc, "listing ConfigMaps and Secrets") from exc
        return sorted(keys)

    # -- kubernetes.io/tls Secrets ---------------------------------------------

    async def store_tls_secret(self, name: str, cert_pem: bytes, key_pem: bytes) -> str:
        """Create or update the ``kubernetes.io/tls`` Secret of certificate ``name``.

        :meth:`tls_secret_name` tells the Secret's name. Returns its resourceVersion.
        :meth:`store` does this by itself whenever a certificate's record (or, in the
        previous layout, both ``cert.pem`` and ``privkey.pem``) is stored and matches;
        call it to publish a certificate kept elsewhere. It overwrites whatever the
        Secret held.
        """
        slug = certificate_slug(name)
        secret_name = self._tls_name(slug)
        current = await self._get(Secret, secret_name)
        version = current.metadata.resourceVersion if current and current.metadata else None
        while True:
            written = await self._write_tls(secret_name, cert_pem, key_pem, name, version)
            if written is not None:
                return written
            current = await self._get(Secret, secret_name)
            version = current.metadata.resourceVersion if current and current.metadata else None

    async def load_tls_secret(self, name: str) -> tuple[bytes, bytes] | None:
        """``(tls.crt, tls.key)`` of certificate ``name``'s TLS Secret; ``None`` if absent."""
        secret_name = self.tls_secret_name(name)
        obj = await self._get(Secret, secret_name)
        if obj is None:
            return None
        data = (obj.data if isinstance(obj, Secret) else None) or {}
        try:
            return base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])
        except (KeyError, binascii.Error, ValueError) as exc:
            raise StorageError(f"TLS Secret {self.namespace}/{secret_name} is corrupt") from exc

    async def _write_tls(
        self, secret_name: str, cert_pem: bytes, key_pem: bytes, source: str, version: str | None
    ) -> str | None:
        """Create (``version`` None) or CAS-update a TLS Secret; ``None`` on a conflict."""
        obj = Secret(
            metadata=self._meta(secret_name, "tls", {CERTIFICATE_ANNOTATION: source}, version),
            type="kubernetes.io/tls",
            data={
                "tls.crt": base64.b64encode(cert_pem).decode("ascii"),
                "tls.key": base64.b64encode(key_pem).decode("ascii"),
            },
        )
        try:
            if version is None:
                return _version_of(await self._client.create(obj))
            return _version_of(await self._client.replace(obj))
        except lightkube.ApiError as exc:
            if _status_code(exc) in (404, 409):
                return None
            raise self._error(exc, f"writing TLS Secret {secret_name}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self._error(exc, f"writing TLS Secret {secret_name}") from exc

    async def _reflect_tls(self, key: str) -> None:
        """Copy a certificate into its TLS Secret once both halves are stored and match.

        The keyed values are the truth and are already stored: a failure here is logged,
        not raised (a caller that retried the store would only order the certificate again).
        """
        certificate = _certificate_of(key)
        if certificate is None:
            return
        prefix, slug, is_record = certificate
        secret_name = self._tls_name(slug)
        try:
            for _ in range(5):
                pair = await self._certificate_pair(prefix, is_record)
                if pair is None:
                    return  # the other half is missing or stale: it comes next
                cert, priv = pair
                current = await self._get(Secret, secret_name)
                version = None
                if current is not None:
                    meta = current.metadata or ObjectMeta()
                    owner = (meta.annotations or {}).get(CERTIFICATE_ANNOTATION)
                    if owner != prefix:
                        _log.warning(
                            "not publishing %s as TLS Secret %s: that Secret belongs to %s",
                            prefix,
                            secret_name,
                            owner,
                        )
                        return
                    data = current.data or {}
                    if data.get("tls.crt") == base64.b64encode(cert).decode() and data.get(
                        "tls.key"
                    ) == base64.b64encode(priv).decode("ascii"):
                        return
                    version = meta.resourceVersion
                if await self._write_tls(secret_name, cert, priv, prefix, version):
                    return
        except StorageError as exc:
            _log.error("could not update TLS Secret %s for %s: %s", secret_name, prefix, exc)

    async def _certificate_pair(self, prefix: str, is_record: bool) -> tuple[bytes, bytes] | None:
        """The certificate's chain and key as stored, if both are there and match."""
        if is_record:
            record = await self.load(f"{prefix}{_RECORD}")
            if record is None:
                return None
            try:
                bundle = CertificateBundle.from_bytes(record.data, f"{prefix}{_RECORD}")
            except StorageError as exc:
                _log.warning("not publishing %s as a TLS Secret: %s", prefix, exc)
                return None
            cert_pem = bundle.fullchain_pem.encode("ascii", "replace")
            key_pem = bundle.private_key_pem.encode("ascii", "replace")
        else:
            if await self.load(f"{prefix}{_RECORD}") is not None:
                return None  # the record is the certificate; these files are leftovers
            cert = await self.load(f"{prefix}cert.pem")
            priv = await self.load(f"{prefix}privkey.pem") if cert is not None else None
            if cert is None or priv is None:
                return None
            cert_pem, key_pem = cert.data, priv.data
        return (cert_pem, key_pem) if _pair_matches(cert_pem, key_pem) else None

    async def _unreflect_tls(self, key: str) -> None:
        certificate = _certificate_of(key)
        if certificate is None:
            return
        prefix, slug, is_record = certificate
        secret_name = self._tls_name(slug)
        try:
            if not is_record and await self.load(f"{prefix}{_RECORD}") is not None:
                return  # the previous layout's files removed after the record replaced them
            current = await self._get(Secret, secret_name)
            meta = current.metadata if current is not None else None
            if meta is not None and (meta.annotations or {}).get(CERTIFICATE_ANNOTATION) == prefix:
                await self._delete(Secret, secret_name, meta.resourceVersion)
        except StorageError as exc:
            _log.error("could not delete TLS Secret %s for %s: %s", secret_name, prefix, exc)

    # -- locks -----------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        lease: float | _dt.timedelta = 60.0,
        timeout: float | _dt.timedelta | None = None,
    ) -> _LockContext:
        """Hold the lock ``name`` (a ``Lease`` object) for an ``async with`` block.

        The lease is rounded up to whole seconds (``leaseDurationSeconds``). Not
        re-entrant: a task that already holds ``name`` waits for itself.
        """
        validate_key(name)
        seconds = as_seconds(lease)
        if not 0 < seconds < math.inf:
            raise InvalidInput(f"lease must be a finite number of seconds > 0, got {lease!r}")
        wait = None if timeout is None else as_seconds(timeout)
        if wait is not None and not 0 <= wait < math.inf:
            raise InvalidInput(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        return _LockContext(self, name, max(1, math.ceil(seconds)), wait)

    def _lease_meta(self, name: str, version: str | None) -> ObjectMeta:
        return self._meta(self.lease_name(name), "lock", {LOCK_ANNOTATION: name}, version)

    async def _get_lease(self, name: str) -> LeaseObject | None:
        lease_name = self.lease_name(name)
        try:
            return await self._client.get(LeaseObject, lease_name)
        except lightkube.ApiError as exc:
            if _status_code(exc) == 404:
                return None
            raise self._error(exc, f"reading Lease {lease_name}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self._error(exc, f"reading Lease {lease_name}") from exc

    async def _write_lease(self, obj: LeaseObject, *, create: bool) -> LeaseObject | None:
        """Create or CAS-update a Lease; ``None`` on 409 (someone else got there first)."""
        name = obj.metadata.name if obj.metadata else "?"
        try:
            if create:
                return await self._client.create(obj)
            return await self._client.replace(obj)
        except lightkube.ApiError as exc:
            if _status_code(exc) in (404, 409):
                return None
            raise self._error(exc, f"writing Lease {name}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self._error(exc, f"writing Lease {name}") from exc


def _looks_secret(key: str) -> bool:
    """Whether ``key`` is probably kept in a Secret (private keys): look there first."""
    return key.endswith(("key.pem", ".key"))


def _version_of(obj: Secret | ConfigMap | LeaseObject) -> str:
    version = obj.metadata.resourceVersion if obj.metadata else None
    if not version:
        raise StorageError("the Kubernetes API answered an object without a resourceVersion")
    return version


def _micro_time(when: _dt.datetime) -> _dt.datetime:
    # The API server parses MicroTime with exactly six fractional digits, and the encoder
    # leaves them out when they are all zero.
    return when if when.microsecond else when.replace(microsecond=1)


def _now() -> _dt.datetime:
    return _micro_time(_dt.datetime.now(_dt.UTC))


class _HeldLease:
    """The :class:`~acmecerts.storage.Lease` handed to the holder of a lock."""

    def __init__(self, name: str, duration: int) -> None:
        self._name = name
        self.duration = duration
        self._lost = False
        self._expires_at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=duration)

    @property
    def name(self) -> str:
        return self._name

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def expires_at(self) -> _dt.datetime:
        return self._expires_at

    def __repr__(self) -> str:
        return f"<Lease {self._name!r} expires_at={self._expires_at.isoformat()} lost={self._lost}>"


class _LockContext:
    """``async with storage.lock(name)``: acquire, heartbeat, release.

    A class rather than an ``asynccontextmanager`` so that the heartbeat's task group does
    not wrap exceptions raised by the ``async with`` body.
    """

    def __init__(
        self, store: KubernetesStorage, name: str, duration: int, timeout: float | None
    ) -> None:
        self._store = store
        self._name = name
        self._duration = duration
        self._timeout = timeout
        self._lease: _HeldLease | None = None
        self._object: LeaseObject | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._heartbeat_scope = anyio.CancelScope()
        # Unique per acquisition, so two tasks of one process never mistake each other's
        # lease for their own.
        self._holder = f"{store._identity}/{secrets.token_hex(4)}"

    # -- acquire -------------------------------------------------------------

    def _spec(self, *, acquired: _dt.datetime, transitions: int) -> LeaseSpec:
        return LeaseSpec(
            holderIdentity=self._holder,
            leaseDurationSeconds=self._duration,
            acquireTime=acquired,
            renewTime=_now(),
            leaseTransitions=transitions,
        )

    async def _try_write(self, obj: LeaseObject, *, create: bool) -> bool:
        """Claim the Lease; on success remember it in ``self._object``.

        Shielded: once the request is sent its outcome must be known, or a cancellation
        arriving meanwhile would leave a lease held by nobody who knows it.
        """
        with anyio.CancelScope(shield=True):
            won = await self._store._write_lease(obj, create=create)
            if won is not None:
                self._object = won
        return won is not None

    async def _acquire(self) -> None:
        store = self._store
        deadline = math.inf if self._timeout is None else anyio.current_time() + self._timeout
        seen: tuple[str, float] | None = None  # (resourceVersion, when first seen)
        delay = 0.05
        while True:
            current = await store._get_lease(self._name)
            if current is None:
                now = _now()
                obj = LeaseObject(
                    metadata=store._lease_meta(self._name, None),
                    spec=self._spec(acquired=now, transitions=0),
                )
                if await self._try_write(obj, create=True):
                    return
                continue
            version = _version_of(current)
            if seen is None or seen[0] != version:
                seen = (version, anyio.current_time())
            spec = current.spec or LeaseSpec()
            duration = spec.leaseDurationSeconds or 0
            renewed = spec.renewTime or spec.acquireTime
            now = _now()
            free = (
                not spec.holderIdentity
                or renewed is None
                or renewed + _dt.timedelta(seconds=duration) <= now
                or anyio.current_time() - seen[1] >= duration
            )
            if free:
                transitions = (spec.leaseTransitions or 0) + (1 if spec.holderIdentity else 0)
                obj = LeaseObject(
                    metadata=store._lease_meta(self._name, version),
                    spec=self._spec(acquired=now, transitions=transitions),
                )
                if await self._try_write(obj, create=False):
                    return
                continue
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise LockTimeout(
                    f"lock {self._name!r} is held by {spec.holderIdentity!r}; not acquired "
                    f"within {self._timeout} s"
                )
            wait = min(remaining, delay * random.uniform(0.5, 1.0))
            if renewed is not None:
                until_expiry = (renewed - now).total_seconds() + duration
                wait = min(wait, max(until_expiry, 0.0) + 0.01)
            await anyio.sleep(wait)
            delay = min(delay * 1.5, 0.5)

    # -- heartbeat -----------------------------------------------------------

    async def _heartbeat(self) -> None:
        lease = self._lease
        assert lease is not None
        interval = self._duration / 3
        with self._heartbeat_scope:
            while True:
                await anyio.sleep(interval)
                while not await self._renew(lease):
                    if lease.lost:
                        return
                    await anyio.sleep(min(0.5, interval / 2))

    async def _renew(self, lease: _HeldLease) -> bool:
        """One renewal attempt: ``True`` when done (renewed, or the lease is lost)."""
        store = self._store
        current = self._object
        assert current is not None
        spec = current.spec or LeaseSpec()
        obj = LeaseObject(
            metadata=store._lease_meta(self._name, _version_of(current)),
            spec=LeaseSpec(
                holderIdentity=self._holder,
                leaseDurationSeconds=self._duration,
                acquireTime=spec.acquireTime,
                renewTime=_now(),
                leaseTransitions=spec.leaseTransitions,
            ),
        )
        try:
            renewed = await store._write_lease(obj, create=False)
            if renewed is None:
                fresh = await store._get_lease(self._name)
                if fresh is None or (fresh.spec and fresh.spec.holderIdentity) != self._holder:
                    _log.warning("lock %r was taken over by another holder", self._name)
                    lease._lost = True
                    return True
                self._object = fresh
                return False
        except StorageError as exc:
            if _dt.datetime.now(_dt.UTC) >= lease.expires_at:
                _log.warning("lock %r lost: could not renew its lease: %s", self._name, exc)
                lease._lost = True
                return True
            _log.info("renewing lock %r failed, retrying: %s", self._name, exc)
            return False
        self._object = renewed
        lease._expires_at = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=self._duration)
        return True

    # -- release -------------------------------------------------------------

    async def _release(self) -> None:
        store = self._store
        current = self._object
        for _ in range(5):
            if current is None or (current.spec and current.spec.holderIdentity) != self._holder:
                return
            spec = current.spec or LeaseSpec()
            obj = LeaseObject(
                metadata=store._lease_meta(self._name, _version_of(current)),
                spec=LeaseSpec(
                    leaseDurationSeconds=self._duration,
                    acquireTime=spec.acquireTime,
                    renewTime=spec.renewTime,
                    leaseTransitions=spec.leaseTransitions,
                ),
            )
            if await store._write_lease(obj, create=False) is not None:
                return
            current = await store._get_lease(self._name)

    # -- the context manager ---------------------------------------------------

    async def __aenter__(self) -> _HeldLease:
        try:
            await self._acquire()
            self._lease = _HeldLease(self._name, self._duration)
            tg = anyio.create_task_group()
            await tg.__aenter__()
        except BaseException:
            # Cancelled (or failed) right after winning: give the lease back at once.
            await self._release_quietly()
            raise
        self._tg = tg
        tg.start_soon(self._heartbeat)
        return self._lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._heartbeat_scope.cancel()
        try:
            if self._tg is not None:
                # The body's exception is not the task group's business: pass none.
                await self._tg.__aexit__(None, None, None)
        finally:
            self._tg = None
            await self._release_quietly()

    async def _release_quietly(self) -> None:
        """Release, shielded from cancellation; a failure is logged (the lease expires)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                await self._release()
            except StorageError as exc:
                _log.warning("releasing lock %r failed (it expires by itself): %s", self._name, exc)
