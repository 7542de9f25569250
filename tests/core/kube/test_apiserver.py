"""The benchmarks' fake API server (tests/support/apiserver.py) speaks the list/watch protocol
the real client expects: the benchmarks measure the client's work, not a broken imitation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.support.apiserver import FakeApiServer
from tests.support.objects import configmap, cpu_node, pod


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    """A started fake API server, stopped after the test."""
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def core(fake: FakeApiServer) -> Iterator[client.CoreV1Api]:
    """The real client on the fake (plain HTTP on loopback)."""
    api = client.ApiClient(client.Configuration(host=fake.url))
    yield client.CoreV1Api(api)
    api.close()


def events(resp: Any) -> Iterator[dict[str, Any]]:
    buf = b""
    for chunk in resp.stream(None):
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield json.loads(line)


def test_list_models_and_resource_version(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    fake.add(cpu_node("b"))
    fake.add(cpu_node("a"))
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["a", "b"]
    assert nodes.metadata.resource_version == str(fake.resource_version)
    assert nodes.items[0].metadata.resource_version == "3"


def test_paged_list_is_a_consistent_snapshot(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    for i in range(5):
        fake.add(cpu_node(f"n{i}"))
    first = core.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3
    fake.delete("Node", "n4")  # later pages still show the list as of the first page
    rest = core.list_node(limit=10, _continue=first.metadata._continue)
    assert [n.metadata.name for n in rest.items] == ["n2", "n3", "n4"]
    assert rest.metadata.resource_version == first.metadata.resource_version
    fake.compact()
    with pytest.raises(ApiException) as err:
        core.list_node(limit=2, _continue=first.metadata._continue)
    assert err.value.status == 410


def test_field_selectors(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    fake.add(configmap("a", "ns1", {}))
    fake.add(configmap("b", "ns1", {}))
    fake.add(configmap("a", "ns2", {}))
    got = core.list_namespaced_config_map("ns1", field_selector="metadata.name=a")
    assert [(c.metadata.namespace, c.metadata.name) for c in got.items] == [("ns1", "a")]
    fake.add(pod("run", node="n1"))
    fake.add(pod("done", phase="Succeeded"))
    live = core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded")
    assert [p.metadata.name for p in live.items] == ["run"]
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="spec.bogus=1")
    assert err.value.status == 400


def test_watch_stream_events_and_bookmarks(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    fake.add(cpu_node("a"))
    rv = core.list_node().metadata.resource_version
    resp = core.list_node(
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _preload_content=False,
    )
    stream = events(resp)
    fake.add(cpu_node("b"))
    assert next(stream)["type"] == "ADDED"
    fake.modify("Node", "b", lambda o: o["metadata"]["labels"].update(x="1"))
    assert next(stream)["type"] == "MODIFIED"
    fake.delete("Node", "a")
    deleted = next(stream)
    assert deleted["type"] == "DELETED"
    assert deleted["object"]["metadata"]["resourceVersion"] == str(fake.resource_version)
    fake.add(configmap("c", "ns", {}))  # another kind: no event here, but the rv moves on
    fake.bookmark()
    bookmark = next(stream)
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(fake.resource_version)},
        },
    }
    resp.close()


def test_selector_transitions_are_added_and_deleted(
    fake: FakeApiServer, core: client.CoreV1Api
) -> None:
    fake.add(pod("p", phase="Pending"))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    resp = core.list_pod_for_all_namespaces(
        watch=True,
        resource_version=rv,
        field_selector="status.phase!=Succeeded",
        timeout_seconds=5,
        _preload_content=False,
    )
    stream = events(resp)
    fake.modify("Pod", "p", lambda o: o["status"].update(phase="Succeeded"), namespace="ml")
    assert next(stream)["type"] == "DELETED"
    fake.modify("Pod", "p", lambda o: o["status"].update(phase="Running"), namespace="ml")
    assert next(stream)["type"] == "ADDED"
    resp.close()


def test_kubernetes_watch_helper_works_too(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    fake.add(cpu_node("a"))
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for ev in w.stream(core.list_node, timeout_seconds=1):  # no rv: synthetic ADDED first
        seen.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    assert seen == [("ADDED", "a")]


def test_timeout_ends_the_stream_cleanly(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    rv = str(fake.resource_version)
    resp = core.list_node(
        watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    assert list(events(resp)) == []  # no exception: the final chunk came


def test_too_old_resource_version_is_an_error_event(
    fake: FakeApiServer, core: client.CoreV1Api
) -> None:
    fake.add(cpu_node("a"))
    fake.add(cpu_node("b"))
    fake.compact()
    resp = core.list_node(
        watch=True, resource_version="2", timeout_seconds=5, _preload_content=False
    )
    (error,) = list(events(resp))
    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"


def test_drop_cuts_streams_mid_chunk(fake: FakeApiServer, core: client.CoreV1Api) -> None:
    rv = str(fake.resource_version)
    resp = core.list_node(
        watch=True, resource_version=rv, timeout_seconds=30, _preload_content=False
    )
    assert fake.wait_for(lambda: fake.open_watches == 1)
    threading.Timer(0.05, fake.drop_watches).start()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(events(resp))


@pytest.mark.parametrize("mode", ["503", "close", "refuse"])
def test_outage_modes(fake: FakeApiServer, core: client.CoreV1Api, mode: str) -> None:
    fake.add(cpu_node("a"))
    fake.go_down(mode)
    expected = ApiException if mode == "503" else urllib3.exceptions.HTTPError
    with pytest.raises(expected):
        core.list_node()
    fake.come_back()
    assert [n.metadata.name for n in core.list_node().items] == ["a"]
