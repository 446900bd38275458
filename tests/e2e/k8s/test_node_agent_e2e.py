"""``xpupool k8s agent`` as a real process against a real kube-apiserver v1.36, under the shipped
admission policy with a token bound to its Node (as a DaemonSet pod runs it): it writes the
devices and a heartbeat, sends the devices again only when they change (counted at a recording
proxy between the agent and the apiserver, not from the agent's own word), survives another
writer changing the Node between its read and its patch (a real 409), serves metrics and stops
cleanly on SIGTERM; with --hami-register it also writes HAMi's register annotations, which the
extender's node decoder reads as the same cards.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from agent_identity import AGENT_SA, FAKE, NAMESPACE, agent_rbac, apply_policy, make_node
from api_proxy import ApiProxy, Seen
from cluster import (
    K8sCluster,
    free_port,
    log_tail,
    make_api_client,
    require_binaries,
    write_kubeconfig,
)

from xpupool.catalog import load_accelerators
from xpupool.k8s.codec.node_annotations import (
    DEVICES_KEY,
    HEARTBEAT_KEY,
    decode_devices,
    decode_heartbeat,
)
from xpupool.k8s.informers.decoders import decode_node
from xpupool.model.device import Device

pytestmark = pytest.mark.k8s

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
NODE = "gpu-node-a"


def wait_for(what: str, check: Callable[[], bool], log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; agent log:\n{log_tail(log)}")
        time.sleep(0.1)


def patched_keys(seen: Seen) -> set[str]:
    return set(json.loads(seen.body)["metadata"].get("annotations", {}))


@pytest.fixture
def kc(tmp_path: Path) -> Iterator[K8sCluster]:
    require_binaries(("etcd", "kube-apiserver"))
    with K8sCluster(tmp_path / "k8s", scheduler=False) as cluster:
        agent_rbac(cluster)
        apply_policy(cluster)
        make_node(cluster, NODE)
        yield cluster


def test_agent_process_writes_heartbeats_patches_only_changes_and_survives_conflicts(
    kc: K8sCluster, tmp_path: Path
) -> None:
    devices_file = tmp_path / "devices.yaml"
    devices_file.write_text(FAKE.read_text())
    log = tmp_path / "agent.log"
    metrics_port = free_port()

    def node() -> dict:
        return dict(kc.api.get(f"/api/v1/nodes/{NODE}").json())

    def annotations() -> dict[str, str]:
        return dict(node()["metadata"].get("annotations") or {})

    with ApiProxy(kc.api_url) as proxy:
        config = tmp_path / "agent.kubeconfig"
        write_kubeconfig(config, proxy.url, kc.token(NAMESPACE, AGENT_SA, node=NODE))
        started = datetime.now(UTC).replace(microsecond=0)
        with log.open("wb") as out:
            agent = subprocess.Popen(
                [
                    *CLI,
                    "k8s",
                    "agent",
                    f"--node-name={NODE}",
                    f"--kubeconfig={config}",
                    "--interval=0.5",
                    f"--fake={devices_file}",
                    f"--metrics=127.0.0.1:{metrics_port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            # 1. devices and a heartbeat, in the first patch
            wait_for("the devices annotation", lambda: DEVICES_KEY in annotations(), log)
            found = decode_devices(annotations()[DEVICES_KEY])
            assert [d.uuid for d in found] == ["GPU-fake-a100-0", "GPU-fake-a100-1"]
            assert found[0].memory_mib == 80 * 1024

            # 2. later passes send the heartbeat alone, and it moves on
            def ok_patches() -> list[Seen]:
                return [s for s in proxy.requests("PATCH") if s.status == 200]

            wait_for("four accepted patches", lambda: len(ok_patches()) >= 4, log)
            sent = [patched_keys(s) for s in ok_patches()]
            assert sent[0] == {DEVICES_KEY, HEARTBEAT_KEY}
            assert all(keys == {HEARTBEAT_KEY} for keys in sent[1:]), sent
            assert all(
                json.loads(s.body)["metadata"].get("resourceVersion")
                for s in proxy.requests("PATCH")
            ), "every patch carries the resourceVersion it was read at"
            beat = decode_heartbeat(annotations()[HEARTBEAT_KEY])
            assert started - timedelta(seconds=1) <= beat <= datetime.now(UTC)

            # 3. someone else writes the Node between the agent's read and its patch
            def concurrent_write() -> None:
                r = kc.api.patch(
                    f"/api/v1/nodes/{NODE}",
                    json={"metadata": {"labels": {"other-writer": "was-here"}}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert r.status_code == 200, r.text

            before = len(proxy.requests())
            proxy.before.append(("PATCH", concurrent_write))

            def recovered() -> bool:
                after = proxy.requests()[before:]
                codes = [(s.method, s.status) for s in after]
                return ("PATCH", 409) in codes and codes[codes.index(("PATCH", 409)) + 1 :][:2] == [
                    ("GET", 200),
                    ("PATCH", 200),
                ]

            wait_for("a 409, a re-read and a patch that succeeds", recovered, log)
            assert node()["metadata"]["labels"]["other-writer"] == "was-here"
            assert agent.poll() is None

            # 4. a changed inventory goes out once, in one more patch
            devices_patches = sum(DEVICES_KEY in patched_keys(s) for s in ok_patches())
            assert devices_patches == 1
            devices_file.write_text(FAKE.read_text().replace("count: 2", "count: 3"))
            wait_for(
                "three devices",
                lambda: len(decode_devices(annotations()[DEVICES_KEY])) == 3,
                log,
            )
            time.sleep(1.5)  # a few more passes: nothing new to send but heartbeats
            assert sum(DEVICES_KEY in patched_keys(s) for s in ok_patches()) == 2

            # 5. metrics: the cards and what the agent did
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            assert 'xpupool_agent_device_memory_total_bytes{model="A100-SXM4-80GB"' in text
            assert f'xpupool_node_agent_conflicts_total{{node="{NODE}"}} 1.0' in text
            # the 409 was retried within its pass: no pass failed
            assert f'xpupool_node_agent_failures_total{{node="{NODE}"}} 0.0' in text
            writes = f'annotation="{DEVICES_KEY}",node="{NODE}"}} 2.0'
            assert f"xpupool_node_agent_annotation_writes_total{{{writes}" in text

            # 6. SIGTERM: a clean, prompt exit
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=10) == 0, log_tail(log)
            assert "SIGTERM: stopping" in log.read_text()
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()


def test_agent_process_with_hami_register_writes_hamis_annotations_the_extender_reads(
    kc: K8sCluster, tmp_path: Path
) -> None:
    """--hami-register under the shipped policy: the agent writes HAMi's register annotation for
    each device type it found (NVIDIA and an Ascend vNPU chip here), and the extender's node
    decoder reads the same cards from them as from xpupool.io/devices."""
    fake = FAKE.parent / "fake-a100x2-910b3.yaml"
    log = tmp_path / "agent.log"
    config = tmp_path / "agent.kubeconfig"
    write_kubeconfig(config, kc.api_url, kc.token(NAMESPACE, AGENT_SA, node=NODE))
    keys = {"hami.io/node-nvidia-register", "hami.io/node-register-Ascend910B3"}
    wait_policy_live(kc)

    def node() -> dict:
        return dict(kc.api.get(f"/api/v1/nodes/{NODE}").json())

    def annotations() -> dict[str, str]:
        return dict(node()["metadata"].get("annotations") or {})

    with log.open("wb") as out:
        agent = subprocess.Popen(
            [
                *CLI,
                "k8s",
                "agent",
                f"--node-name={NODE}",
                f"--kubeconfig={config}",
                "--interval=0.5",
                f"--fake={fake}",
                "--hami-register",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for("HAMi's register annotations", lambda: keys <= set(annotations()), log)
        obj = node()
        ours = decode_node(obj)
        assert ours is not None
        hami_only = json.loads(json.dumps(obj))
        del hami_only["metadata"]["annotations"][DEVICES_KEY]
        theirs = decode_node(hami_only)
        assert theirs is not None
        assert [d.uuid for d in theirs.devices] == [
            "GPU-fake-a100-0",
            "GPU-fake-a100-1",
            "NPU-fake-910b3-0",
        ]
        assert sorted(map(card, theirs.devices)) == sorted(map(card, ours.devices))
        assert {d.max_tasks for d in theirs.devices} == {10}  # HAMi's deviceSplitCount default
        # the policy let every write through; a word of its own, not inside a port like 44039
        assert re.search(r"\b403\b", log.read_text()) is None
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0, log_tail(log)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def card(d: Device) -> tuple[object, ...]:
    """What HAMi's format carries of a card, the model as the catalog names it."""
    found = load_accelerators().lookup(d.model, d.vendor)
    model = found.name if found is not None else d.model
    return (d.uuid, d.vendor, model, d.memory_mib, d.index, d.numa_node or 0, d.healthy)


def wait_policy_live(kc: K8sCluster) -> None:
    """The policy's informers take a moment after creation: wait until the agent's identity is
    refused another Node, so a write the policy would refuse cannot slip through before it."""
    make_node(kc, "other-node")
    token = kc.token(NAMESPACE, AGENT_SA, node=NODE)
    deadline = time.monotonic() + 30
    with make_api_client(kc.api_url, token) as client:
        while True:
            r = client.patch(
                "/api/v1/nodes/other-node",
                json={"metadata": {"annotations": {"xpupool.io/probe": "x"}}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if r.status_code == 403:
                return
            assert time.monotonic() < deadline, f"policy not live: HTTP {r.status_code}"
            time.sleep(0.3)
