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
  the store's clock (``clock=``, the system clock by default), or when a waiter has seen
  it unchanged for a whole lease (so a holder whose clock runs ahead cannot keep a lock
  forever). The lease logic is FileStorage's too (:mod:`acmecerts.storage._lease`); only
  the compare-and-swap of the Lease object is this store's.

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
import logging
import os
import secrets
import socket

import httpx2
import lightkube
from lightkube.core.client import LabelSelector
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Secret

from acmecerts._time import Clock, SystemClock, duration_seconds
from acmecerts.errors import StorageError
from acmecerts.storage._backend import StoreBase
from acmecerts.storage._base import ANY_VERSION, StoredValue, VersionConflict, _AnyVersion
from acmecerts.storage._kube_client import (
    CERTIFICATE_ANNOTATION,
    KEY_ANNOTATION,
    PREFIX_RE,
    RECORD,
    VALUE_FIELD,
    WRITE_ANNOTATION,
    Kind,
    KubeApi,
    certificate_of,
    digest,
    dns_name,
    looks_secret,
    object_name,
    pair_matches,
    status_code,
    version_of,
)
from acmecerts.storage._kube_lease import KubeLeases
from acmecerts.storage._lease import LeaseLocks
from acmecerts.storage.keys import (
    CertificateBundle,
    certificate_slug,
)

__all__ = ["KubernetesStorage"]

_log = logging.getLogger("acmecerts.storage.kubernetes")


class KubernetesStorage(StoreBase):
    """Keys, values and locks in a Kubernetes namespace (see the module docstring).

    ``KubernetesStorage(namespace, kubeconfig=..., context=...)`` uses that kubeconfig
    file and context (the current one by default). Without ``kubeconfig`` it runs
    in-cluster with the pod's service account, else falls back to ``$KUBECONFIG`` or
    ``~/.kube/config``. Without ``namespace``, the context's namespace (in-cluster: the
    pod's own). Close it with :meth:`aclose` or use it as an ``async with`` block.

    ``name_prefix`` starts every object name and is the ``acmecerts.io/store`` label:
    stores with different prefixes share a namespace without seeing each other's keys.
    ``timeout`` bounds each API request (seconds or a ``timedelta``; InvalidInput for
    NaN, infinity, zero or less). ``identity`` names this replica in Lease holders
    (default ``<hostname>/<pid>/<random>``). ``clock`` stamps and times leases
    (default: the system clock). A lock is a ``Lease`` object, its lease rounded
    up to whole seconds (``leaseDurationSeconds``).

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
        timeout: float | _dt.timedelta = 10.0,
        identity: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        timeout = duration_seconds(timeout, "timeout", positive=True)
        if not PREFIX_RE.fullmatch(name_prefix):
            raise ValueError(
                f"name_prefix {name_prefix!r} must be 1-40 lowercase letters, digits or '-'"
            )
        self._api = KubeApi(
            namespace,
            kubeconfig=kubeconfig,
            context=context,
            name_prefix=name_prefix,
            timeout=timeout,
        )
        self.namespace: str = self._api.namespace
        self.name_prefix = name_prefix
        self._identity = identity or (
            f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        )
        #: Which kind of object each key was last seen in (saves a request on load).
        self._kinds: dict[str, Kind] = {}
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._locks = LeaseLocks(KubeLeases(self._api, self._identity), self._clock)

    def __repr__(self) -> str:
        return (
            f"KubernetesStorage(namespace={self.namespace!r}, server={self._api.server!r}, "
            f"name_prefix={self.name_prefix!r})"
        )

    # -- lifecycle -----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._api.aclose()

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
        return f"{self.name_prefix}-{dns_name(slug) or digest(slug)}-tls"

    # -- values ----------------------------------------------------------------

    def _lookup_order(self, key: str) -> tuple[Kind, Kind]:
        first = self._kinds.get(key)
        if first is None:
            first = Secret if looks_secret(key) else ConfigMap
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
        encoded = (fields or {}).get(VALUE_FIELD)
        if encoded is None or meta.resourceVersion is None:
            raise StorageError(
                f"{where} (key {key!r}) is corrupt: it has no {VALUE_FIELD!r} data", path=key
            )
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise StorageError(
                f"{where} (key {key!r}) is corrupt: its data is not base64", path=key
            ) from exc
        return StoredValue(data=data, version=meta.resourceVersion)

    def _build(self, kind: Kind, key: str, data: bytes, version: str | None) -> Secret | ConfigMap:
        # A fresh write id makes every write a change, so even rewriting the same bytes
        # gets a new resourceVersion (no ABA for compare-and-swap).
        annotations = {KEY_ANNOTATION: key, WRITE_ANNOTATION: secrets.token_hex(8)}
        meta = self._api.meta(self.object_name(key), "value", annotations, version)
        encoded = {VALUE_FIELD: base64.b64encode(data).decode("ascii")}
        if kind is Secret:
            return Secret(metadata=meta, type="Opaque", data=encoded)
        return ConfigMap(metadata=meta, binaryData=encoded)

    async def _find(self, key: str) -> tuple[Kind, StoredValue] | None:
        name = self.object_name(key)
        for kind in self._lookup_order(key):
            obj = await self._api.get(kind, name)
            if obj is not None:
                self._kinds[key] = kind
                return kind, self._decode(key, obj)
        return None

    async def _load(self, key: str) -> StoredValue | None:
        """Read ``key`` (its ConfigMap or Secret)."""
        found = await self._find(key)
        return found[1] if found else None

    async def _store(
        self, key: str, data: bytes, secret: bool, expect_version: str | _AnyVersion | None
    ) -> str:
        """Write ``key`` (one create or update request) and return its resourceVersion.

        A key is one object: a Secret when written with ``secret=True``, else a ConfigMap.
        Writing an existing key with the other ``secret`` moves it (the new object is
        written first, then the old one deleted).
        """
        kind: Kind = Secret if secret else ConfigMap
        other: Kind = ConfigMap if secret else Secret
        name = self.object_name(key)
        expected = expect_version if isinstance(expect_version, str) else None
        version: str
        while True:
            if expect_version is not None:
                # Update in place: with the expected resourceVersion, a compare-and-swap.
                obj = self._build(kind, key, data, expected)
                try:
                    replaced = await self._api.replace(obj)
                except lightkube.ApiError as exc:
                    if status_code(exc) == 409:
                        raise VersionConflict(
                            f"key {key!r} changed since version {expected} was read"
                        ) from exc
                    if status_code(exc) != 404:
                        raise self._api.error(exc, f"writing key {key!r}") from exc
                except (httpx2.HTTPError, OSError) as exc:
                    raise self._api.error(exc, f"writing key {key!r}") from exc
                else:
                    version = version_of(replaced)
                    break
            # Not there as `kind`: it is new, or it is kept as the other kind.
            old = await self._api.get(other, name)
            old_version = old.metadata.resourceVersion if old and old.metadata else None
            if old is not None and expect_version is None:
                raise VersionConflict(f"key {key!r} already exists")
            if expected is not None and old_version != expected:
                raise VersionConflict(f"key {key!r} changed since version {expected} was read")
            try:
                created = await self._api.create(self._build(kind, key, data, None))
            except lightkube.ApiError as exc:
                if status_code(exc) == 409:
                    if expect_version is ANY_VERSION:
                        continue  # created meanwhile by someone else: overwrite it
                    raise VersionConflict(f"key {key!r} already exists") from exc
                raise self._api.error(exc, f"creating key {key!r}") from exc
            except (httpx2.HTTPError, OSError) as exc:
                raise self._api.error(exc, f"creating key {key!r}") from exc
            version = version_of(created)
            if old is not None:
                # The move's second half. Whatever changed the old object since it was
                # read lost to this write, which is already in place.
                try:
                    await self._api.delete(other, name, old_version)
                except VersionConflict:
                    await self._api.delete(other, name, None)
            break
        self._kinds[key] = kind
        await self._reflect_tls(key)
        return version

    async def _delete(self, key: str, expect_version: str | _AnyVersion | None) -> bool:
        """Remove ``key``: with a version, as a precondition (409 → VersionConflict)."""
        if expect_version is None:
            if await self._find(key) is not None:
                raise VersionConflict(f"key {key!r} exists")
            return False
        expected = expect_version if isinstance(expect_version, str) else None
        name = self.object_name(key)
        deleted = False
        for kind in self._lookup_order(key):
            try:
                deleted = await self._api.delete(kind, name, expected)
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

    async def _list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted (a label-selected list)."""
        labels: LabelSelector = dict(self._api.labels("value"))
        keys: set[str] = set()

        def add(meta: ObjectMeta | None) -> None:
            key = ((meta and meta.annotations) or {}).get(KEY_ANNOTATION)
            if key is not None and key.startswith(prefix):
                keys.add(key)

        ns = self.namespace
        try:
            async for cm in self._api.client.list(
                ConfigMap, namespace=ns, labels=labels, chunk_size=500
            ):
                add(cm.metadata)
            async for secret in self._api.client.list(
                Secret, namespace=ns, labels=labels, chunk_size=500
            ):
                add(secret.metadata)
        except (lightkube.ApiError, httpx2.HTTPError, OSError) as exc:
            raise self._api.error(exc, "listing ConfigMaps and Secrets") from exc
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
        current = await self._api.get(Secret, secret_name)
        version = current.metadata.resourceVersion if current and current.metadata else None
        while True:
            written = await self._write_tls(secret_name, cert_pem, key_pem, name, version)
            if written is not None:
                return written
            current = await self._api.get(Secret, secret_name)
            version = current.metadata.resourceVersion if current and current.metadata else None

    async def load_tls_secret(self, name: str) -> tuple[bytes, bytes] | None:
        """``(tls.crt, tls.key)`` of certificate ``name``'s TLS Secret; ``None`` if absent."""
        secret_name = self.tls_secret_name(name)
        obj = await self._api.get(Secret, secret_name)
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
            metadata=self._api.meta(secret_name, "tls", {CERTIFICATE_ANNOTATION: source}, version),
            type="kubernetes.io/tls",
            data={
                "tls.crt": base64.b64encode(cert_pem).decode("ascii"),
                "tls.key": base64.b64encode(key_pem).decode("ascii"),
            },
        )
        written = await self._api.swap(obj, create=version is None)
        return None if written is None else version_of(written)

    def _tls_target(self, key: str) -> tuple[str, bool, str] | None:
        """``(certificate prefix, whether key is its record, TLS Secret)`` for its files."""
        certificate = certificate_of(key)
        if certificate is None:
            return None
        prefix, slug, is_record = certificate
        return prefix, is_record, self._tls_name(slug)

    async def _reflect_tls(self, key: str) -> None:
        """Copy a certificate into its TLS Secret once both halves are stored and match.

        The keyed values are the truth and are already stored: a failure here is logged,
        not raised (a caller that retried the store would only order the certificate again).
        """
        target = self._tls_target(key)
        if target is None:
            return
        prefix, is_record, secret_name = target
        try:
            for _ in range(5):
                pair = await self._certificate_pair(prefix, is_record)
                if pair is None:
                    return  # the other half is missing or stale: it comes next
                cert, priv = pair
                current = await self._api.get(Secret, secret_name)
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
            record = await self.load(f"{prefix}{RECORD}")
            if record is None:
                return None
            try:
                bundle = CertificateBundle.from_bytes(record.data, f"{prefix}{RECORD}")
            except StorageError as exc:
                _log.warning("not publishing %s as a TLS Secret: %s", prefix, exc)
                return None
            cert_pem = bundle.fullchain_pem.encode("ascii", "replace")
            key_pem = bundle.private_key_pem.encode("ascii", "replace")
        else:
            if await self.load(f"{prefix}{RECORD}") is not None:
                return None  # the record is the certificate; these files are leftovers
            cert = await self.load(f"{prefix}cert.pem")
            priv = await self.load(f"{prefix}privkey.pem") if cert is not None else None
            if cert is None or priv is None:
                return None
            cert_pem, key_pem = cert.data, priv.data
        return (cert_pem, key_pem) if pair_matches(cert_pem, key_pem) else None

    async def _unreflect_tls(self, key: str) -> None:
        target = self._tls_target(key)
        if target is None:
            return
        prefix, is_record, secret_name = target
        try:
            if not is_record and await self.load(f"{prefix}{RECORD}") is not None:
                return  # the previous layout's files removed after the record replaced them
            current = await self._api.get(Secret, secret_name)
            meta = current.metadata if current is not None else None
            if meta is not None and (meta.annotations or {}).get(CERTIFICATE_ANNOTATION) == prefix:
                await self._api.delete(Secret, secret_name, meta.resourceVersion)
        except StorageError as exc:
            _log.error("could not delete TLS Secret %s for %s: %s", secret_name, prefix, exc)
