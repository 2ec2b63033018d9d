"""KubernetesStorage's plumbing: object names and labels, and API calls with errors translated.

See :mod:`acmecerts.storage.kubernetes` for the object mapping.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Final, Literal, TypeVar, overload

import anyio
import httpx2
import lightkube
from lightkube.config import client_adapter
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease as LeaseObject
from lightkube.resources.core_v1 import ConfigMap, Secret

from acmecerts.errors import StorageError
from acmecerts.storage._base import VersionConflict

#: Labels and annotations on every object this store owns.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "acmecerts"
STORE_LABEL: Final = "acmecerts.io/store"
ROLE_LABEL: Final = "acmecerts.io/role"
KEY_ANNOTATION: Final = "acmecerts.io/key"
LOCK_ANNOTATION: Final = "acmecerts.io/lock"
WRITE_ANNOTATION: Final = "acmecerts.io/write-id"
CERTIFICATE_ANNOTATION: Final = "acmecerts.io/certificate"

VALUE_FIELD: Final = "value"
_MAX_NAME: Final = 253
_HASH_CHARS: Final = 16
PREFIX_RE: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")

Role = Literal["value", "tls", "lock"]
Kind = type[Secret] | type[ConfigMap]


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH_CHARS]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def object_name(prefix: str, text: str, *, infix: str = "", suffix: str = "") -> str:
    """A DNS-1123 subdomain name for ``text``: ``prefix-[infix-]slug-[suffix-]hash``.

    The hash (of the exact ``text``) keeps distinct texts apart even when their slugs
    agree (``A`` and ``a``) or had to be cut to fit in 253 characters.
    """
    head = f"{prefix}-{infix}-" if infix else f"{prefix}-"
    tail = f"-{suffix}-{digest(text)}" if suffix else f"-{digest(text)}"
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
RECORD: Final = "certificate.json"


def certificate_of(key: str) -> tuple[str, str, bool] | None:
    """``(certificate prefix, slug, whether it is the record)`` for a certificate's file."""
    match = _CERTIFICATE_FILE.fullmatch(key)
    return (match["prefix"], match["slug"], match["file"] == RECORD) if match else None


def dns_name(slug: str) -> str:
    """A certificate slug as DNS-1123 labels (``_wildcard_.a.org`` → ``wildcard.a.org``)."""
    labels = (re.sub(r"[^a-z0-9-]+", "-", label).strip("-") for label in slug.split("."))
    return ".".join(label for label in labels if label)


def pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
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
# Errors and versions
# ---------------------------------------------------------------------------


def status_code(exc: lightkube.ApiError) -> int:
    """The HTTP status of a lightkube error."""
    code = exc.status.code if exc.status is not None else None
    return int(code) if code else exc.response.status_code


def looks_secret(key: str) -> bool:
    """Whether ``key`` is probably kept in a Secret (private keys): look there first."""
    return key.endswith(("key.pem", ".key"))


def version_of(obj: Secret | ConfigMap | LeaseObject) -> str:
    version = obj.metadata.resourceVersion if obj.metadata else None
    if not version:
        raise StorageError("the Kubernetes API answered an object without a resourceVersion")
    return version


_R = TypeVar("_R", Secret, LeaseObject)


class KubeApi:
    """One namespace of one API server, as lightkube reaches it; errors as StorageError."""

    def __init__(
        self,
        namespace: str | None,
        *,
        kubeconfig: str | os.PathLike[str] | None,
        context: str | None,
        name_prefix: str,
        timeout: float,
    ) -> None:
        """Load the configuration (see :class:`~acmecerts.storage.kubernetes.KubernetesStorage`)."""
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
        self.server = config.cluster.server
        self._timeout = httpx2.Timeout(timeout)
        try:
            self.client = lightkube.AsyncClient(
                config,
                namespace=self.namespace,
                timeout=self._timeout,
                lazy=False,
                field_manager="acmecerts",
            )
        except (lightkube.ConfigError, OSError, ValueError) as exc:
            raise StorageError(f"cannot set up the Kubernetes client: {exc}") from exc
        self._raw: httpx2.AsyncClient | None = None

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        with anyio.CancelScope(shield=True):
            await self.client.aclose()
            if self._raw is not None:
                await self._raw.aclose()

    def labels(self, role: Role) -> dict[str, str]:
        """The labels of every object of ``role`` in this store."""
        return {MANAGED_BY_LABEL: MANAGED_BY, STORE_LABEL: self.name_prefix, ROLE_LABEL: role}

    def meta(
        self, name: str, role: Role, annotations: dict[str, str], version: str | None = None
    ) -> ObjectMeta:
        """Metadata for object ``name`` (``version``: the resourceVersion to update from)."""
        return ObjectMeta(
            name=name,
            namespace=self.namespace,
            labels=self.labels(role),
            annotations=annotations,
            resourceVersion=version,
        )

    def error(self, exc: Exception, what: str) -> StorageError:
        """Translate a lightkube / HTTP error into a :class:`StorageError`."""
        if isinstance(exc, lightkube.ApiError):
            code = status_code(exc)
            message = (exc.status.message if exc.status is not None else None) or str(exc)
            if code == 401:
                return StorageError(
                    f"the Kubernetes API at {self.server} rejected our credentials "
                    f"(401 Unauthorized) while {what}: the token or client certificate in "
                    f"the kubeconfig / service account is wrong or expired"
                )
            if code == 403:
                return StorageError(
                    f"the Kubernetes API at {self.server} forbids {what} (403 Forbidden): "
                    f"grant get/list/create/update/delete on secrets and configmaps and "
                    f"get/create/update on leases.coordination.k8s.io in namespace "
                    f"{self.namespace!r} ({message})"
                )
            if code == 409:
                return VersionConflict(f"{what}: {message}")
            return StorageError(f"Kubernetes API error {code} while {what}: {message}")
        if isinstance(exc, httpx2.HTTPError):
            return StorageError(
                f"cannot reach the Kubernetes API at {self.server} while {what}: "
                f"{type(exc).__name__}: {exc}"
            )
        return StorageError(f"{what} failed: {type(exc).__name__}: {exc}")

    @overload
    async def get(self, kind: type[LeaseObject], name: str) -> LeaseObject | None: ...
    @overload
    async def get(self, kind: Kind, name: str) -> Secret | ConfigMap | None: ...
    async def get(
        self, kind: Kind | type[LeaseObject], name: str
    ) -> Secret | ConfigMap | LeaseObject | None:
        """Object ``name`` of ``kind``; ``None`` if there is none."""
        try:
            return await self.client.get(kind, name)
        except lightkube.ApiError as exc:
            if status_code(exc) == 404:
                return None
            raise self.error(exc, f"reading {kind.__name__} {name}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self.error(exc, f"reading {kind.__name__} {name}") from exc

    async def create(self, obj: Secret | ConfigMap) -> Secret | ConfigMap:
        """Create ``obj`` (lightkube's errors are the caller's)."""
        if isinstance(obj, Secret):
            return await self.client.create(obj)
        return await self.client.create(obj)

    async def replace(self, obj: Secret | ConfigMap) -> Secret | ConfigMap:
        """Update ``obj`` from its resourceVersion (lightkube's errors are the caller's)."""
        if isinstance(obj, Secret):
            return await self.client.replace(obj)
        return await self.client.replace(obj)

    async def swap(self, obj: _R, *, create: bool) -> _R | None:
        """Create or CAS-update ``obj``; ``None`` on 404/409 (someone else got there first)."""
        what = f"writing {type(obj).__name__} {obj.metadata.name if obj.metadata else '?'}"
        try:
            if create:
                return await self.client.create(obj)
            return await self.client.replace(obj)
        except lightkube.ApiError as exc:
            if status_code(exc) in (404, 409):
                return None
            raise self.error(exc, what) from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise self.error(exc, what) from exc

    async def delete(self, kind: Kind, name: str, version: str | None) -> bool:
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
            if self._raw is None:
                params = client_adapter.ConnectionParams(timeout=self._timeout)
                self._raw = client_adapter.AsyncClient(self._config, params)
            response = await self._raw.request("DELETE", path, json=body)
            if response.status_code == 404:
                return False
            if response.is_error:
                raise lightkube.ApiError(request=response.request, response=response)
        except (lightkube.ApiError, httpx2.HTTPError, OSError, ValueError) as exc:
            raise self.error(exc, what) from exc
        return True
