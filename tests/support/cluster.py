"""The real control plane as a test drives it: objects in, faults on demand, requests counted.

:class:`LiveCluster` puts objects into the real API server the way their owners do (a Node's
or a Pod's ``status`` through the ``status`` subresource, as the kubelet and the device plugin
write it), and reaches it through a :class:`~tests.support.faultproxy.FaultProxy` so that a test
can count requests and make the API server slow, unavailable or cut its watches. Clients under
test get :meth:`LiveCluster.write_kubeconfig` (the proxy) or the control plane's own kubeconfig.

Everything a test made, and what the product made meanwhile, is deleted by :meth:`cleanup`
(the ``live_cluster`` fixture calls it): one control plane serves the whole session.
"""

from __future__ import annotations

import contextlib
import copy
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from tests.support.controlplane import ControlPlane, namespace_gone
from tests.support.faultproxy import FaultProxy, Request
from tests.support.waiting import TIMEOUT, wait_until

__all__ = ["LiveCluster", "live_cluster", "report_crds", "running_cluster"]

REPORT_CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "report-crds"

#: (apiVersion, kind) of every namespaced kind a test or the product may leave behind.
_NAMESPACED = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "CronJob"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("wgpolicyk8s.io/v1alpha2", "PolicyReport"),
    ("openreports.io/v1alpha1", "Report"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
)
#: Cluster-wide kinds: what exists after a test and did not before is deleted.
_CLUSTER = (
    ("v1", "Node"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"),
    ("openreports.io/v1alpha1", "ClusterReport"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
)
#: What :meth:`LiveCluster.forbid` grants, by API group.
_GRANTABLE = {
    "": ("nodes", "pods", "configmaps", "secrets", "namespaces", "events", "serviceaccounts"),
    "apps": ("deployments", "statefulsets", "daemonsets", "replicasets"),
    "batch": ("jobs", "cronjobs"),
    "admissionregistration.k8s.io": (
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ),
    "wgpolicyk8s.io": ("policyreports", "clusterpolicyreports"),
    "openreports.io": ("reports", "clusterreports"),
}
#: DRA kinds, listed by :meth:`LiveCluster.dump` as the audit lists them (tests that make them
#: delete them; cleanup leaves them to their module).
_DRA = tuple(
    ("resource.k8s.io/v1", kind)
    for kind in ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
)
_API_VERSIONS = {kind: api for api, kind in (*_NAMESPACED, *_CLUSTER, *_DRA)}
# Set by the server, refused or ignored on create.
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
# Names the control plane makes in every namespace.
_KEEP = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}


class LiveCluster:
    """The real API server behind a fault proxy, with the controls tests need."""

    def __init__(self, plane: ControlPlane, proxy: FaultProxy) -> None:
        self.plane = plane
        self.proxy = proxy
        self._namespaces: set[str] = set()
        self._created_namespaces: set[str] = set()
        self._uids: dict[str, str] = {}
        self._removed_crds = False
        self._rbac = 0
        self._roles: list[str] = []
        self._before = {kind: set(self._names(api, kind)) for api, kind in _CLUSTER}

    # --- reaching it -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The proxy's address (plain HTTP; the proxy holds the credentials)."""
        return self.proxy.url

    def write_kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig for the proxy in ``directory`` (what the fakes' kubeconfigs were)."""
        return self.proxy.write_kubeconfig(directory)

    @property
    def requests(self) -> list[Request]:
        """Every request that went through the proxy."""
        return self.proxy.requests

    def count(self, resource: str, verb: str) -> int:
        """How many requests of ``verb`` on ``resource`` went through the proxy."""
        return self.proxy.count(resource, verb)

    @property
    def open_watches(self) -> int:
        """Watches streaming through the proxy now."""
        return self.proxy.open_watches

    def wait_for(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        """Wait until ``predicate()`` holds."""
        return self.proxy.wait_for(predicate, timeout)

    def go_down(self, mode: str = "503") -> None:
        """An outage as clients of the proxy see it (see FaultProxy.go_down)."""
        self.proxy.go_down(mode)

    def come_back(self) -> None:
        """End the outage."""
        self.proxy.come_back()

    def drop_watches(self) -> int:
        """Cut the watch streams open through the proxy."""
        return self.proxy.drop_watches()

    @property
    def delay(self) -> float:
        """Seconds the proxy holds each request."""
        return self.proxy.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self.proxy.delay = seconds

    # --- who the proxy forwards as --------------------------------------------------------

    def forbid(self, *resources: str) -> None:
        """From now on, forward as a user whom RBAC grants every resource the product reads
        or writes except ``resources`` (URL plurals): the API server answers 403 for those."""
        self._rbac += 1
        user = f"restricted-{self._rbac}"
        rules = [
            {"apiGroups": [group], "resources": sorted(set(names) - set(resources)), "verbs": ["*"]}
            for group, names in _GRANTABLE.items()
            if set(names) - set(resources)
        ]
        rbac = "rbac.authorization.k8s.io/v1"
        self.plane.create(
            {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": user}, "rules": rules}
        )
        self.plane.create(
            {
                "apiVersion": rbac,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": user},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": user,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            }
        )
        self._roles.append(user)
        self._act_as(self.plane.ssl_context(user))

    def act_as_service_account(self, namespace: str, name: str) -> None:
        """From now on, forward as ServiceAccount ``namespace/name`` (a token the API server
        issued for it): what RBAC grants it, and nothing more."""
        token = self.plane.service_account_token(namespace, name)
        self._act_as(self.plane.anonymous_ssl_context(), token)

    def allow_all(self) -> None:
        """Forward as the admin again (after :meth:`forbid`)."""
        self._act_as(self.plane.admin_ssl_context())

    def _act_as(self, context: ssl.SSLContext, bearer: str | None = None) -> None:
        self.proxy.context = context
        self.proxy.bearer = bearer
        self.proxy.cut_all()  # connections opened as the previous user

    # --- objects ---------------------------------------------------------------------------

    def _resource(self, obj_or_kind: dict[str, Any] | str) -> Any:
        if isinstance(obj_or_kind, str):
            kind, api = obj_or_kind, _API_VERSIONS.get(obj_or_kind, "v1")
        else:
            kind = obj_or_kind["kind"]
            api = obj_or_kind.get("apiVersion") or _API_VERSIONS.get(kind, "v1")
        return self.plane.dynamic.resources.get(api_version=api, kind=kind)

    def _names(self, api: str, kind: str) -> Iterator[str]:
        with contextlib.suppress(ResourceNotFoundError, NotFoundError):
            resource = self.plane.dynamic.resources.get(api_version=api, kind=kind)
            for item in resource.get().items:
                yield item.metadata.name

    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` (and its ``default`` ServiceAccount) unless it exists; one
        it created goes after the test."""
        self._namespaces.add(name)
        core = self.plane.dynamic.resources.get(api_version="v1", kind="Namespace")
        try:
            core.create(body={"metadata": {"name": name}})
            self._created_namespaces.add(name)
        except ApiException:
            pass  # it exists
        sa = self.plane.dynamic.resources.get(api_version="v1", kind="ServiceAccount")
        with contextlib.suppress(ApiException):
            sa.create(body={"metadata": {"name": "default"}}, namespace=name)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``, then write its ``status`` as its owner would; the stored object.

        A namespaced object without a namespace goes to ``default``. Objects from a dump keep
        their owners when the owners were added first (owner references follow the new uids).
        """
        body = copy.deepcopy(obj)
        resource = self._resource(body)
        body.setdefault("apiVersion", resource.group_version)
        meta = body.setdefault("metadata", {})
        for key in _SERVER_FIELDS:
            meta.pop(key, None)
        namespace = None
        if resource.namespaced:
            namespace = meta.setdefault("namespace", "default")
            self.ensure_namespace(namespace)
        status = body.pop("status", None)
        # Owners get new uids in this cluster: point the dependents at them, as a restore
        # does (the garbage collector deletes an object whose owner's uid does not exist).
        for ref in meta.get("ownerReferences") or []:
            ref["uid"] = self._uids.get(ref.get("uid", ""), ref.get("uid", ""))
        stored = resource.create(body=body, namespace=namespace).to_dict()
        if "uid" in obj.get("metadata", {}):
            self._uids[obj["metadata"]["uid"]] = stored["metadata"]["uid"]
        if status:
            stored = self._set_status(resource, meta["name"], namespace, status)
        return stored  # type: ignore[no-any-return]

    def _set_status(
        self, resource: Any, name: str, namespace: str | None, status: dict[str, Any]
    ) -> dict[str, Any]:
        return resource.status.patch(  # type: ignore[no-any-return]
            body={"status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        ).to_dict()

    def add_many(self, objs: Iterable[dict[str, Any]]) -> None:
        """:meth:`add` each object."""
        for obj in objs:
            self.add(obj)

    def get(self, kind: str, name: str, *, namespace: str = "") -> dict[str, Any]:
        """The stored object."""
        resource = self._resource(kind)
        return resource.get(name=name, namespace=namespace or None).to_dict()  # type: ignore[no-any-return]

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Update the object to ``obj`` (a PUT; its ``status`` through the subresource)."""
        body = copy.deepcopy(obj)
        resource = self._resource(body)
        meta = body.setdefault("metadata", {})
        namespace = meta.get("namespace") if resource.namespaced else None
        if resource.namespaced and not namespace:
            namespace = meta["namespace"] = "default"
        status = body.pop("status", None)
        current = resource.get(name=meta["name"], namespace=namespace).to_dict()
        for key in _SERVER_FIELDS:
            meta.pop(key, None)
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        body.setdefault("apiVersion", resource.group_version)
        stored = resource.replace(body=body, namespace=namespace).to_dict()
        if status is not None and status != current.get("status"):
            stored = self._set_status(resource, meta["name"], namespace, status)
        return stored  # type: ignore[no-any-return]

    def modify(
        self,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        *,
        namespace: str = "",
    ) -> dict[str, Any]:
        """Apply ``change`` to the stored object and write it back."""
        obj = self.get(kind, name, namespace=namespace)
        change(obj)
        return self.replace(obj)

    def delete(self, kind: str, name: str, *, namespace: str = "") -> None:
        """Delete the object (a pod at once, as a kubelet's final delete)."""
        resource = self._resource(kind)
        resource.delete(
            name=name,
            namespace=namespace or None,
            body={"gracePeriodSeconds": 0} if kind == "Pod" else None,
        )

    def bind(self, pod: str, node: str, *, namespace: str) -> None:
        """Bind a pending pod to ``node`` (the ``binding`` subresource), as the scheduler does."""
        from kubernetes import client

        client.CoreV1Api(self.plane.client).create_namespaced_pod_binding(
            pod,
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            _preload_content=False,
        )

    def bookmark(self) -> str:
        """Send every open watch that allows bookmarks a BOOKMARK at the API server's current
        resourceVersion (the watch cache does so about once a minute); that version."""
        rv = str(self.resource_version)
        self.proxy.bookmark(rv)
        return rv

    def delete_collection(self, kind: str, *, label_selector: str, namespace: str = "") -> None:
        """Delete every ``kind`` matching ``label_selector`` in one request (a burst of events)."""
        self._resource(kind).delete(namespace=namespace or None, label_selector=label_selector)

    def remove_crd(self, name: str) -> None:
        """Delete the CRD ``name`` (its kind is then 404, as in a cluster without it); the
        report CRDs come back after the test."""
        remove_crd(self.plane, name)
        self._removed_crds = True

    def expire_watches(self) -> None:
        """Restart the API server: its watch cache starts afresh, so a watch resuming from a
        resourceVersion older than the restart gets ``410 Gone`` and must list again."""
        self.plane.restart_apiserver()
        self.proxy.cut_all()

    def dump(self, *kinds: str) -> list[dict[str, Any]]:
        """Every object of ``kinds`` in the cluster, as ``kubectl get -A -o yaml`` lists them."""
        out: list[dict[str, Any]] = []
        for kind in kinds:
            listed = self._resource(kind).get().to_dict()
            for item in listed["items"]:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", listed["apiVersion"])
                out.append(item)
        return out

    @property
    def resource_version(self) -> int:
        """The API server's current resourceVersion (etcd's revision)."""
        ns = self.plane.dynamic.resources.get(api_version="v1", kind="Namespace")
        return int(ns.get(limit=1).metadata.resourceVersion)

    # --- after the test --------------------------------------------------------------------

    def cleanup(self) -> None:
        """Delete what the test (and the product under test) made; wait for the pods to go."""
        self.allow_all()
        for role in self._roles:
            for kind in ("ClusterRoleBinding", "ClusterRole"):
                with contextlib.suppress(ApiException, NotFoundError):
                    self.plane.dynamic.resources.get(
                        api_version="rbac.authorization.k8s.io/v1", kind=kind
                    ).delete(name=role)
        for name in self._namespaces:
            self._empty(name)
        for api, kind in _CLUSTER:
            with contextlib.suppress(ResourceNotFoundError, NotFoundError):
                resource = self.plane.dynamic.resources.get(api_version=api, kind=kind)
                for name in set(self._names(api, kind)) - self._before[kind]:
                    with contextlib.suppress(ApiException):
                        resource.delete(name=name)
        if self._removed_crds:
            install_report_crds(self.plane)
        # Pods the garbage collector removes after their owners: gone before the next test.
        pods = self.plane.dynamic.resources.get(api_version="v1", kind="Pod")
        deadline = time.monotonic() + 60
        for name in self._namespaces:
            while (left := pods.get(namespace=name).items) and time.monotonic() < deadline:
                for item in left:
                    with contextlib.suppress(ApiException):
                        pods.delete(
                            name=item.metadata.name, namespace=name, body={"gracePeriodSeconds": 0}
                        )
                time.sleep(0.2)
        for name in self._created_namespaces:
            self._delete_namespace(name)

    def _delete_namespace(self, name: str) -> None:
        """Delete an emptied namespace now: finalize it as the namespace controller would once
        its content is gone (the controller-manager may be stopped), then wait for it to go."""
        from kubernetes import client

        core = client.CoreV1Api(self.plane.client)
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)
        with contextlib.suppress(ApiException):
            core.replace_namespace_finalize(
                name, {"metadata": {"name": name}, "spec": {"finalizers": []}}
            )
        wait_until(lambda: namespace_gone(core, name), timeout=60, poll=0.1)

    def _empty(self, namespace: str) -> None:
        """Delete every object of the kinds in _NAMESPACED in ``namespace``."""
        for api, kind in _NAMESPACED:
            with contextlib.suppress(ResourceNotFoundError, NotFoundError, ApiException):
                resource = self.plane.dynamic.resources.get(api_version=api, kind=kind)
                for item in resource.get(namespace=namespace).items:
                    if (kind, item.metadata.name) in _KEEP:
                        continue
                    with contextlib.suppress(ApiException):
                        resource.delete(
                            name=item.metadata.name,
                            namespace=namespace,
                            body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
                        )


@contextlib.contextmanager
def running_cluster(plane: ControlPlane) -> Iterator[LiveCluster]:
    """A LiveCluster on ``plane`` behind a fresh fault proxy, controllers paused; what was
    made meanwhile is deleted at the end (see the ``live_cluster`` fixture).

    A namespace an earlier test deleted is emptied by the namespace controller: it is let
    finish first, or the namespace and what it held (a ResourceClaimTemplate the audit would
    count) would stay, terminating, while the controllers are paused."""
    if plane.controllers_running:
        wait_until(lambda: not _terminating_namespaces(plane), poll=0.2)
    plane.pause_controllers()
    host, port = plane.url.removeprefix("https://").rsplit(":", 1)
    with FaultProxy((host, int(port)), plane.admin_ssl_context()) as proxy:
        cluster = LiveCluster(plane, proxy)
        try:
            yield cluster
        finally:
            proxy.come_back()
            cluster.cleanup()


def _terminating_namespaces(plane: ControlPlane) -> list[str]:
    """The namespaces being deleted now (phase ``Terminating``)."""
    namespaces = plane.dynamic.resources.get(api_version="v1", kind="Namespace")
    return [
        item.metadata.name
        for item in namespaces.get().items
        if item.status and item.status.phase == "Terminating"
    ]


@pytest.fixture
def live_cluster(control_plane: ControlPlane) -> Iterator[LiveCluster]:
    """The real API server behind a fresh fault proxy; what the test made is deleted after.

    The controller-manager and the scheduler are paused meanwhile
    (:meth:`ControlPlane.pause_controllers`): what the test puts in stays as it put it (no
    ReplicaSet adds pods, no garbage collector removes them, no pod is bound but by the test),
    which is what a test of a reader (watch, list, audit) needs.
    """
    with running_cluster(control_plane) as cluster:
        yield cluster


def _crd(vendored: dict[str, Any]) -> dict[str, Any]:
    """The CustomResourceDefinition of one vendored schema file (tests/core/audit/crd_schema.py)."""
    group, version = vendored["apiVersion"].split("/")
    kind = vendored["kind"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": vendored["crd"]},
        "spec": {
            "group": group,
            "scope": vendored["scope"],
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": vendored["crd"].split(".", 1)[0],
                "singular": kind.lower(),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": vendored["openAPIV3Schema"]},
                }
            ],
        },
    }


def install_report_crds(plane: ControlPlane) -> list[str]:
    """Create the PolicyReport and openreports CRDs (tests/fixtures/report-crds) unless they
    exist, and wait until the API server serves them; their names."""
    import yaml

    crds = plane.dynamic.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    names = []
    for path in sorted(REPORT_CRDS.glob("*.yaml")):
        vendored = yaml.safe_load(path.read_text())
        with contextlib.suppress(ApiException):
            crds.create(body=_crd(vendored))
        names.append(vendored["crd"])
    deadline = time.monotonic() + 120
    for name in names:
        while True:
            conditions = crds.get(name=name).to_dict().get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established")
            time.sleep(0.1)
    plane.dynamic.resources.invalidate_cache()  # type: ignore[attr-defined]
    return names


def remove_crd(plane: ControlPlane, name: str) -> None:
    """Delete a CRD and wait until the API server no longer serves it (404 for its kind)."""
    crds = plane.dynamic.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    crds.delete(name=name)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            crds.get(name=name)
        except NotFoundError:
            break
        time.sleep(0.1)
    plane.dynamic.resources.invalidate_cache()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def report_crds(control_plane: ControlPlane) -> list[str]:
    """The PolicyReport and openreports CRDs, installed once for the session; their names.
    A test that removes one (:meth:`LiveCluster.remove_crd`) gets it back after."""
    return install_report_crds(control_plane)
