"""A kopf operator: one certificate per ``Certificate`` resource, kept in a TLS Secret.

    kubectl apply -f crd.yaml -f rbac.yaml
    kopf run --standalone --namespace default operator.py
    kubectl apply -f certificate.yaml        # spec.dnsNames, spec.secretName

* At start-up it opens one :class:`~acmecerts.manager.CertificateManager` for the whole
  operator (:func:`~acmecerts.manager.open_manager`), with its state (account key and
  URL, certificates, orders in flight, rate-limit ledger, locks) in the Kubernetes store,
  so a restarted or second replica carries on where the first left off. http-01 is
  answered by an in-process server on ``ACMECERTS_HTTP_PORT``: route
  ``/.well-known/acme-challenge/`` of every name to it.
* A ``Certificate`` created, resumed or changed is *managed*: issued, then renewed in the
  background. Each certificate issued, renewed or found in the store (after a restart,
  or issued by another replica) is written to the Secret
  ``spec.secretName`` (default ``<name>-tls``, type ``kubernetes.io/tls``, owned by the
  resource), and its serial and expiry to ``status.certificate``.
* A certificate that cannot be issued is reported on its ``Certificate``: one Warning
  ``Event`` (reason ``CertificateFailed``) per distinct failure, however many replicas
  see it, and ``status.conditions`` (``Ready`` false, with the reason). Bad input (a
  malformed name, a wildcard with http-01) is not retried until the spec changes.
* A ``Certificate`` deleted is *unmanaged*: in-flight work for it is cancelled at once,
  its pending authorizations are deactivated at the CA, and once the delete handler
  returns nothing more is sent for it. The manager also asks an *owner guard* before
  every order, so a resource deleted behind the operator's back costs no order either.

Configuration (environment): ``ACMECERTS_DIRECTORY`` (default Let's Encrypt staging),
``ACMECERTS_CA_BUNDLE``, ``ACMECERTS_HTTP_PORT`` (default 80), ``ACMECERTS_EMAIL``,
``ACMECERTS_STORE_NAMESPACE`` (where the store lives; default the kubeconfig's or the
pod's namespace), ``ACMECERTS_LOCK_LEASE`` (seconds a replica that dies keeps holding a
certificate's lock; default 120) and, for demonstrations, ``ACMECERTS_RENEWAL_FRACTION``
(without ARI, renew when this fraction of the lifetime remains; default the library's:
a third, half for certificates of under 10 days). The Kubernetes
credentials come from ``$KUBECONFIG`` or the pod's service account.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import hashlib
import logging
import os
from typing import Any

import kopf
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import Event, Secret
from lightkube.types import PatchType

from acmecerts import Http01Server, IssuedCertificate
from acmecerts.errors import InvalidInput
from acmecerts.manager import (
    CertificateEvent,
    CertificateFailed,
    CertificateLoaded,
    CertificateManager,
    CertificateObtained,
    Subscriber,
    open_manager,
)
from acmecerts.storage.kubernetes import KubernetesStorage

GROUP, VERSION, PLURAL = "acmecerts.example.com", "v1", "certificates"
STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"
FIELD_MANAGER = "acmecerts-example-operator"

CertificateResource = create_namespaced_resource(GROUP, VERSION, "Certificate", PLURAL)
log = logging.getLogger("acmecerts.example.operator")


@dataclasses.dataclass(frozen=True)
class Owner:
    """The resource a managed certificate belongs to."""

    namespace: str
    name: str
    uid: str
    secret_name: str


@dataclasses.dataclass
class Operator:
    """What the handlers share (kept in kopf's ``memo``)."""

    kube: AsyncClient
    manager: CertificateManager | None = None
    owners: dict[str, Owner] = dataclasses.field(default_factory=dict)
    ready: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


def certificate_name(namespace: str, name: str) -> str:
    """The manager's name for a resource's certificate (also its storage key)."""
    return f"{namespace}.{name}"


# --8<-- [start:guard]
def owner_guard(kube: AsyncClient, owner: Owner) -> Any:
    """Asked by the manager before every order: does the resource still exist?"""

    async def present() -> bool:
        try:
            obj = await kube.get(CertificateResource, owner.name, namespace=owner.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise  # unknown: the manager waits and asks again, it never guesses "gone"
        meta = obj.metadata
        return meta is not None and meta.uid == owner.uid and meta.deletionTimestamp is None

    return present


# --8<-- [end:guard]


async def publish(kube: AsyncClient, owner: Owner, cert: IssuedCertificate) -> None:
    """Write ``cert`` to the owner's kubernetes.io/tls Secret and its status."""
    secret = Secret(
        metadata=ObjectMeta(
            name=owner.secret_name,
            namespace=owner.namespace,
            labels={"app.kubernetes.io/managed-by": FIELD_MANAGER},
            ownerReferences=[
                OwnerReference(
                    apiVersion=f"{GROUP}/{VERSION}",
                    kind="Certificate",
                    name=owner.name,
                    uid=owner.uid,
                    controller=True,
                    blockOwnerDeletion=True,
                )
            ],
        ),
        type="kubernetes.io/tls",
        data={
            "tls.crt": base64.b64encode(cert.fullchain_pem.encode()).decode(),
            "tls.key": base64.b64encode(cert.private_key_pem.encode()).decode(),
        },
    )
    await kube.apply(secret, field_manager=FIELD_MANAGER, force=True)
    status = {
        "certificate": {
            "secretName": owner.secret_name,
            "serial": cert.serial,
            "notAfter": cert.not_after.isoformat(),
            "dnsNames": list(cert.names),
        }
    }
    try:
        await kube.patch(
            CertificateResource.Status,
            owner.name,
            {"status": status},
            namespace=owner.namespace,
            patch_type=PatchType.MERGE,
        )
    except ApiError as exc:
        if exc.status.code != 404:  # deleted meanwhile: nothing to report to
            raise


async def report_failure(
    kube: AsyncClient, owner: Owner, message: str, next_attempt: dt.datetime | None = None
) -> None:
    """Tell the owner why its certificate failed: one Event per distinct failure, and status.

    The Event's name is derived from the resource and the message, so the same failure
    seen by several replicas (or again after a restart) is one Event, not one per sighting.
    """
    reason = "CertificateFailed"
    digest = hashlib.sha256(f"{owner.uid}\n{reason}\n{message}".encode()).hexdigest()[:16]
    now = dt.datetime.now(dt.UTC)
    event = Event(
        metadata=ObjectMeta(name=f"{owner.name}.{digest}", namespace=owner.namespace),
        involvedObject=ObjectReference(
            apiVersion=f"{GROUP}/{VERSION}",
            kind="Certificate",
            name=owner.name,
            namespace=owner.namespace,
            uid=owner.uid,
        ),
        reason=reason,
        message=message[:1024],
        type="Warning",
        count=1,
        firstTimestamp=now,
        lastTimestamp=now,
        source=EventSource(component=FIELD_MANAGER),
        reportingComponent=FIELD_MANAGER,
    )
    try:
        await kube.create(event)
    except ApiError as exc:
        if exc.status.code != 409:  # 409: this failure was reported already
            raise
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now.isoformat(),
    }
    if next_attempt is not None:
        condition["nextAttempt"] = next_attempt.isoformat()
    try:
        await kube.patch(
            CertificateResource.Status,
            owner.name,
            {"status": {"conditions": [condition]}},
            namespace=owner.namespace,
            patch_type=PatchType.MERGE,
        )
    except ApiError as exc:
        if exc.status.code != 404:
            raise


def publisher(operator: Operator) -> Subscriber:
    """The manager's subscriber: every certificate to its owner's Secret, failures to it.

    A certificate issued or renewed here (``CertificateObtained``), and one read from the
    store (``CertificateLoaded``: after a restart, or issued by another replica).
    """

    async def on_event(event: CertificateEvent) -> None:
        owner = operator.owners.get(event.name)
        if owner is None:
            return
        if isinstance(event, CertificateObtained | CertificateLoaded) and event.certificate:
            await publish(operator.kube, owner, event.certificate)
            serial = event.certificate.serial
            log.info("%s: certificate %s in Secret %s", event.name, serial, owner.secret_name)
        elif isinstance(event, CertificateFailed):
            log.warning(
                "%s: failed: %s (next attempt %s)", event.name, event.error, event.next_attempt_at
            )
            try:
                await report_failure(operator.kube, owner, str(event.error), event.next_attempt_at)
            except Exception as exc:  # the API server may be what failed
                log.warning("%s: could not report the failure: %r", event.name, exc)

    return on_event


async def run_manager(operator: Operator) -> None:
    """The manager and what it needs, for the operator's lifetime (one task)."""
    directory = os.environ.get("ACMECERTS_DIRECTORY", STAGING)
    email = os.environ.get("ACMECERTS_EMAIL")
    given = os.environ.get("ACMECERTS_RENEWAL_FRACTION")
    fraction = float(given) if given else None  # None: a third, or half under 10 days
    # --8<-- [start:manager]
    async with (
        KubernetesStorage(os.environ.get("ACMECERTS_STORE_NAMESPACE")) as storage,
        Http01Server(port=int(os.environ.get("ACMECERTS_HTTP_PORT", "80"))) as solver,
        # the account key, the account and the rate-limit ledger live in the store:
        # every replica uses them (whichever comes first creates them, once)
        open_manager(
            storage,
            directory,
            solvers=[solver],
            contact=[f"mailto:{email}"] if email else [],
            ca_bundle=os.environ.get("ACMECERTS_CA_BUNDLE"),
            renewal_fraction=fraction,
            lock_lease=float(os.environ.get("ACMECERTS_LOCK_LEASE", "120")),
        ) as manager,
    ):
        manager.subscribe(publisher(operator))
        manager.on_cancel(lambda name, reason: log.info("cancelled %s: %s", name, reason))
        operator.manager = manager
        operator.ready.set()
        await operator.stop.wait()
    # --8<-- [end:manager]


@kopf.on.startup()
async def start(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    operator = Operator(kube=AsyncClient(field_manager=FIELD_MANAGER))
    operator.task = asyncio.create_task(run_manager(operator))
    ready = asyncio.create_task(operator.ready.wait())
    await asyncio.wait([ready, operator.task], return_when=asyncio.FIRST_COMPLETED)
    if not operator.ready.is_set():
        ready.cancel()
        await operator.task  # raises why it could not start
    operator.task.add_done_callback(manager_ended)
    memo.operator = operator


def manager_ended(task: asyncio.Task[None]) -> None:
    """A manager that stops on its own is an outage: say so loudly (a liveness probe's cue)."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("the certificate manager stopped: %r", task.exception())


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator = memo.operator
    operator.stop.set()
    if operator.task is not None:
        await operator.task
    await operator.kube.close()


# --8<-- [start:handlers]
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def manage(
    spec: kopf.Spec, name: str, namespace: str, uid: str, memo: kopf.Memo, **_: Any
) -> dict[str, Any]:
    operator: Operator = memo.operator
    assert operator.manager is not None
    cert_name = certificate_name(namespace, name)
    owner = Owner(namespace, name, uid, spec.get("secretName") or f"{name}-tls")
    operator.owners[cert_name] = owner
    # idempotent; new dnsNames re-issue; issued and renewed in the background from here
    try:
        operator.manager.manage(
            cert_name, list(spec["dnsNames"]), owner=owner_guard(operator.kube, owner)
        )
    except InvalidInput as exc:  # e.g. a malformed name: retrying will not help
        log.warning("%s: failed: %s (next attempt None)", cert_name, exc)
        await report_failure(operator.kube, owner, str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    return {"managed": cert_name}


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def unmanage(spec: kopf.Spec, name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    operator: Operator = memo.operator
    assert operator.manager is not None
    cert_name = certificate_name(namespace, name)
    owner = operator.owners.get(cert_name)
    # cancels in-flight work (pending authorizations are deactivated at the CA);
    # when it returns, nothing more is sent for this certificate
    await operator.manager.unmanage(cert_name)
    forget_owner(operator, cert_name, owner)
    try:  # the owner reference does this too where a GC runs
        await operator.kube.delete(
            Secret, spec.get("secretName") or f"{name}-tls", namespace=namespace
        )
    except ApiError as exc:
        if exc.status.code != 404:
            raise


@kopf.on.event(GROUP, VERSION, PLURAL)
async def deleted_anywhere(
    event: kopf.RawEvent, name: str, namespace: str, memo: kopf.Memo, **_: Any
) -> None:
    """Every replica stops the work of a deleted resource, wherever its handler ran.

    Replicas share one finalizer: the first whose delete handler returns removes it,
    and the others may only ever see the resource gone. Raw events reach them all.
    """
    meta = (event.get("object") or {}).get("metadata") or {}
    operator: Operator | None = getattr(memo, "operator", None)
    if operator is None or operator.manager is None:
        return
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        cert_name = certificate_name(namespace, name)
        owner = operator.owners.get(cert_name)
        if owner is None or owner.uid == meta.get("uid"):  # not a newer one of that name
            await operator.manager.unmanage(cert_name)
            forget_owner(operator, cert_name, owner)


def forget_owner(operator: Operator, cert_name: str, owner: Owner | None) -> None:
    """Forget ``owner`` once its certificate is unmanaged, unless it was replaced meanwhile.

    A resource of that name created again while the manager was unmanaging the old one
    has its own owner by now (kopf handles each object on its own): it stays, else its
    certificate would never reach its Secret.
    """
    if operator.owners.get(cert_name) is owner:
        operator.owners.pop(cert_name, None)


# --8<-- [end:handlers]
