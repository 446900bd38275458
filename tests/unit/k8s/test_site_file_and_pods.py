"""The Kubernetes site's pure parts (issue 49): the sites file is read as strictly as every other
file the operator gives (a bad one refused naming the field), a replica becomes the Pod the
extender reads (idempotent name, labels, HAMi's names, the plane's node and cards as constraints,
``preemptionPolicy: Never``), and a Pod's state becomes the replica report the heartbeat takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.link_domains import labelled
from xpupool.k8s.codec.pod_request import pod_demand
from xpupool.k8s.extender.main import domain_decoder
from xpupool.k8s.informers.decoders import decode_node
from xpupool.k8s.informers.pod_groups import group_claim
from xpupool.k8s.site.pods import (
    PodPlan,
    build_pod,
    pod_name,
    pod_state,
    report,
    secret_object,
)
from xpupool.k8s.site.site import read_node
from xpupool.k8s.site.sites_file import load_agent_pool, load_site_network, load_sites
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.errors import RequestError
from xpupool.model.spec import parse_spec
from xpupool.server.schemas.agent_protocol import ReplicaState


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "kc.yaml").write_text("apiVersion: v1\nkind: Config\n")
    path = tmp_path / "sites.yaml"
    path.write_text(text)
    return path


def test_a_sites_file_gives_each_site_its_settings_and_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "sites:\n"
        "  - {name: gpu-a, kubeconfig: kc.yaml, namespaces: {ml: research}}\n"
        "  - {name: gpu-b, in_cluster: true, create_namespaces: true, namespace_prefix: t-}\n",
    )
    a, b = load_sites(path)
    assert (a.name, a.kind, a.kubeconfig, a.scheduler_name) == (
        "gpu-a",
        "kubernetes",
        (tmp_path / "kc.yaml").resolve(),
        "xpupool-scheduler",
    )
    assert a.namespace("ml") == "research" and a.namespace("ops") == "xpupool-ops"
    assert not a.create_namespaces and b.create_namespaces and b.namespace("ops") == "t-ops"
    assert a.finished_pods_retention_s == 300  # kubectl logs answers a few minutes after the end
    with pytest.raises(RequestError, match=r"tenant.*not a namespace name"):
        a.namespace("dots.in.name")


def test_a_finished_jobs_pods_are_kept_as_long_as_the_sites_file_says(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "sites:\n"
        "  - {name: gpu-a, in_cluster: true, finished_pods_retention_s: 0}\n"
        "  - {name: gpu-b, in_cluster: true, finished_pods_retention_s: 2.5}\n",
    )
    a, b = load_sites(path)
    assert (a.finished_pods_retention_s, b.finished_pods_retention_s) == (0, 2.5)


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        ("sites:\n  - {name: a, kubeconfig: kc.yaml, colour: red}\n", "sites[0].colour", "Extra"),
        ("sites:\n  - {name: A_B, kubeconfig: kc.yaml}\n", "sites[0].name", "pattern"),
        ("sites:\n  - {name: a}\n", "sites[0]", "kubeconfig_secret, or in_cluster"),
        (
            "sites:\n  - {name: a, kubeconfig: kc.yaml, kubeconfig_secret: a}\n",
            "sites[0]",
            "give one of kubeconfig, kubeconfig_secret",
        ),
        (
            "sites:\n  - {name: a, kubeconfig_secret: A_B}\n",
            "sites[0].kubeconfig_secret",
            "pattern",
        ),
        ("sites:\n  - {name: a, kubeconfig: nope.yaml}\n", "sites[0].kubeconfig", "no such file"),
        ("sites:\n  - {name: a, in_cluster: true, kind: slurm}\n", "sites[0].kind", "kubernetes"),
        (
            "sites:\n  - {name: a, in_cluster: true, scheduler_name: 'Bad Name'}\n",
            "sites[0].scheduler_name",
            "pattern",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true, namespaces: {t: Not_A_Label}}\n",
            "sites[0].namespaces",
            "not a namespace name",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true}\n  - {name: a, in_cluster: true}\n",
            "sites",
            "two",
        ),
        ("sites:\n  - {name: agents, in_cluster: true}\n", "sites[0].name", "agent pool"),
        ("nodes: []\n", "sites", "Field required"),
        (
            "sites:\n  - {name: a, in_cluster: true, finished_pods_retention_s: -1}\n",
            "sites[0].finished_pods_retention_s",
            "greater than or equal to 0",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true, finished_pods_retention_s: 1000000}\n",
            "sites[0].finished_pods_retention_s",
            "less than or equal to 604800",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true, finished_pods_retention_s: .nan}\n",
            "sites[0].finished_pods_retention_s",
            "finite number",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true, finished_pods_retention_s: '60'}\n",
            "sites[0].finished_pods_retention_s",
            "valid number",
        ),
        (
            "sites:\n  - {name: a, in_cluster: true, finished_pods_retention_s: true}\n",
            "sites[0].finished_pods_retention_s",
            "valid number",
        ),
        ("sites: [\n", "sites.yaml", "not valid YAML"),
        (
            "sites: []\nlinks: [{sites: [a, b], bandwidth_gbps: -1}]\n",
            "links[0].bandwidth_gbps",
            "greater than 0",
        ),
        (
            "sites: []\nlinks: [{sites: [a, b], bandwidth_gbps: 1}, {sites: [b, a], bandwidth_gbps: 2}]\n",
            "links[1].sites",
            "given twice",
        ),
        ("sites: []\ndatasets: {x: {size: 1Qi, sites: [a]}}\n", "datasets.x.size", "unit"),
        (
            "sites:\n  - {name: a, in_cluster: true, link_domain_label: 'a zone'}\n",
            "sites[0].link_domain_label",
            "a node label's name",
        ),
        ("sites: []\nagents: {link_domain_label: -zone}\n", "agents.link_domain_label", "label"),
        ("sites: []\nagents: {colour: red}\n", "agents.colour", "Extra"),
    ],
)
def test_a_bad_sites_file_is_refused_naming_the_field(
    tmp_path: Path, text: str, field: str, why: str
) -> None:
    with pytest.raises(RequestError) as err:
        load_sites(write(tmp_path, text))
    assert field in err.value.field and why in str(err.value), str(err.value)


def test_link_domain_labels_are_read_from_the_sites_file(tmp_path: Path) -> None:
    """A site's and the agent pool's ``link_domain_label`` (issue 51): None when not given."""
    path = write(
        tmp_path,
        "sites:\n"
        "  - {name: gpu-a, in_cluster: true, link_domain_label: topology.kubernetes.io/zone}\n"
        "  - {name: gpu-b, in_cluster: true}\n"
        "agents: {link_domain_label: rack}\n",
    )
    a, b = load_sites(path)
    assert (a.link_domain_label, b.link_domain_label) == ("topology.kubernetes.io/zone", None)
    assert load_agent_pool(path).link_domain_label == "rack"
    assert load_agent_pool(write(tmp_path, "sites: []\n")).link_domain_label is None


def test_a_nodes_link_domain_is_its_sites_label_value() -> None:
    """What a site hands the engine (``KubernetesSite.hosted``, the extender's decoder): the
    value of the label its ``link_domain_label`` names; None without the label or the setting."""
    obj = hami_node("n1")
    obj["metadata"]["labels"] = {"topology.kubernetes.io/zone": "zone-1"}
    node = read_node(obj, "gpu-a").node
    assert node is not None and node.link_domain is None
    zoned = labelled(node, "topology.kubernetes.io/zone")
    assert zoned.link_domain == "zone-1" and labelled(zoned, "rack").link_domain is None
    assert labelled(node, None) is node
    decoded = domain_decoder("topology.kubernetes.io/zone")(obj)
    assert decoded is not None and decoded.link_domain == "zone-1"
    assert domain_decoder(None) is decode_node


def test_links_and_datasets_are_read_from_the_sites_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "sites: []\n"
        "links: [{sites: [gpu-a, agents-bj], bandwidth_gbps: 25}]\n"
        "datasets: {imagenet: {size: 150Gi, sites: [gpu-a]}}\n",
    )
    assert load_sites(path) == []
    network = load_site_network(path)
    assert network.bandwidth_gbps("agents-bj", "gpu-a") == 25
    assert network.transfer("imagenet", "agents-bj").source == "gpu-a"


def plan(**overrides: Any) -> PodPlan:
    shares = (DeviceShare("GPU-n1-0", 0, 20480, 250), DeviceShare("GPU-n1-1", 1, 20480, 250))
    alloc = Allocation(7, "job-12", 1, "n1", 0, 2000, 4096, shares)
    values: dict[str, Any] = {
        "job": 12,
        "replica": 1,
        "attempt": 2,
        "tenant": "ml",
        "queue": "ml-main",
        "site": "gpu-a",
        "namespace": "xpupool-ml",
        "scheduler_name": "xpupool-scheduler",
        "image": "registry.example/train:1",
        "command": ("python", "train.py"),
        "env": {"EPOCHS": "3"},
        "allocation": alloc,
        "vendor": "nvidia",
        "card_memory_mib": 81920,
    }
    return PodPlan(**{**values, **overrides})


def test_a_replica_becomes_a_pod_the_extender_reads_as_the_plane_placed_it() -> None:
    pod = build_pod(plan())
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == pod_name(12, 1, 2) == "xp-12-1-2"
    assert meta["namespace"] == "xpupool-ml"
    assert meta["labels"] == {
        "xpupool.io/job": "12",
        "xpupool.io/replica": "1",
        "xpupool.io/attempt": "2",
        "xpupool.io/tenant": "ml",
        "xpupool.io/queue": "ml-main",
        "xpupool.io/plane-site": "gpu-a",
    }
    assert spec["schedulerName"] == "xpupool-scheduler"
    assert spec["preemptionPolicy"] == "Never" and spec["restartPolicy"] == "Never"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    (ctr,) = spec["containers"]
    assert ctr["image"] == "registry.example/train:1"
    assert ctr["command"] == ["python", "train.py"]
    assert ctr["env"] == [{"name": "EPOCHS", "value": "3"}]
    # the extender's own reader takes it as two cards of 20 GiB and a quarter of each
    demand = pod_demand({**pod, "metadata": {**meta, "uid": "u1"}})
    (one,) = demand.demands
    assert one.request.devices.count == 2
    assert one.request.devices.memory_mib == 20480
    assert one.request.devices.core_permille == 250
    assert set(one.request.devices.uuids) == {"GPU-n1-0", "GPU-n1-1"}
    assert one.request.cpu_milli == 2000 and one.request.memory_mib == 4096


def test_a_gangs_pods_are_one_group_of_identical_members_the_extender_places() -> None:
    """Pinned each to its replica's place, the extender could not place a gang's pods as one
    group (its gang wants identical members): they carry the group and its size instead, and
    the same request, so the extender's reader makes one gang of them."""
    other = Allocation(8, "job-12", 2, "n2", 0, 2000, 4096, plan().allocation.devices)
    pods = [build_pod(plan(gang_size=3)), build_pod(plan(replica=2, allocation=other, gang_size=3))]
    for pod in pods:
        assert pod["metadata"]["annotations"] == {
            "xpupool.io/gang": "xp-12-2",
            "xpupool.io/gang-size": "3",
        }
        assert "affinity" not in pod["spec"]
    demands = [pod_demand({**p, "metadata": {**p["metadata"], "uid": "u"}}) for p in pods]
    assert demands[0].demands == demands[1].demands  # one template
    (one,) = demands[0].demands
    assert not one.request.devices.uuids and one.request.devices.count == 2
    claim = group_claim(pods[0])
    assert claim is not None and (claim.namespace, claim.name, claim.size) == (
        "xpupool-ml",
        "xp-12-2",
        3,
    )
    alone = build_pod(plan(gang_size=1))  # a gang of one: placed as the plane placed it
    assert "xpupool.io/gang" not in alone["metadata"]["annotations"] and alone["spec"]["affinity"]


def test_what_no_pod_can_say_is_refused_naming_it() -> None:
    with pytest.raises(RequestError, match="env"):
        build_pod(plan(env={"BAD NAME": "x"}))
    with pytest.raises(RequestError, match="no HAMi resource names"):
        build_pod(plan(vendor="nonesuch"))
    with pytest.raises(RequestError, match="volumes are not mounted"):
        build_pod(plan(volumes=True))


def test_a_jobs_secrets_are_files_and_variables_from_one_secret_of_its_run() -> None:
    p = plan(secrets=(("token", "TOKEN"), ("key.pem", None)))
    spec = build_pod(p)["spec"]
    (ctr,) = spec["containers"]
    assert ctr["env"][1:] == [
        {"name": "XPUPOOL_SECRETS_DIR", "value": "/run/secrets"},
        {
            "name": "TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "xp-12-2-secrets", "key": "token"}},
        },
    ]
    assert ctr["volumeMounts"] == [
        {"name": "secrets", "mountPath": "/run/secrets", "readOnly": True}
    ]
    assert spec["volumes"][0]["secret"]["secretName"] == "xp-12-2-secrets"
    obj = secret_object(p, {"token": b"s3cret", "key.pem": b"\x00\x01"})
    assert obj["metadata"]["name"] == "xp-12-2-secrets"
    assert obj["metadata"]["labels"]["xpupool.io/job"] == "12"
    assert obj["data"] == {"token": "czNjcmV0", "key.pem": "AAE="}


def pod(phase: str, **status: Any) -> dict[str, Any]:
    labels = {"xpupool.io/job": "12", "xpupool.io/replica": "1", "xpupool.io/attempt": "2"}
    return {
        "metadata": {"name": "xp-12-1-2", "namespace": "xpupool-ml", "labels": labels},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, **status},
    }


def test_pod_phases_become_replica_reports() -> None:
    assert report(pod_state(pod("Pending"))) is None  # the job stays scheduled
    running = report(pod_state(pod("Running")))
    assert running is not None and running.state is ReplicaState.RUNNING
    assert (running.job_id, running.replica, running.attempt) == (12, 1, 2)
    done = report(pod_state(pod("Succeeded")))
    assert done is not None and (done.state, done.exit_code) == (ReplicaState.SUCCEEDED, 0)
    terminated = {"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
    failed = report(
        pod_state(
            pod("Failed", reason="Evicted", message="low memory", containerStatuses=[terminated])
        )
    )
    assert failed is not None and failed.state is ReplicaState.FAILED
    assert failed.exit_code == 3 and failed.reason == "Evicted: low memory: Error"
    stopped = report(pod_state(pod("Running")), gone=True, stopping=True)
    assert stopped is not None and stopped.state is ReplicaState.STOPPED
    lost = report(pod_state(pod("Running")), gone=True)
    assert lost is not None and lost.state is ReplicaState.FAILED and "deleted" in lost.reason


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"metadata": {"labels": {"xpupool.io/job": "-1"}}}, "xpupool.io/job"),
        ({"metadata": {"labels": {"xpupool.io/job": "9" * 40}}}, "xpupool.io/job"),
        ({"status": {"phase": "Exploded"}}, "status.phase"),
        ({"spec": {"nodeName": "n" * 300}}, "spec.nodeName"),
    ],
)
def test_a_hostile_pod_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    obj = pod("Running")
    for key, part in change.items():
        if key == "metadata":
            obj["metadata"]["labels"].update(part["labels"])
        else:
            obj[key].update(part)
    with pytest.raises(RequestError) as err:
        pod_state(obj)
    assert field in err.value.field


def hami_node(name: str, **spec: Any) -> dict[str, Any]:
    register = (
        '[{"id":"GPU-0","index":0,"count":10,"devmem":81920,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-80GB","numa":0,"mode":"hami-core","health":true}]'
    )
    return {
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": register},
            "labels": {"xpupool.io/site": "elsewhere"},
        },
        "spec": spec,
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


def test_a_node_reads_as_the_sites_own_with_its_taints_and_cordon() -> None:
    got = read_node(
        hami_node("n1", unschedulable=True, taints=[{"key": "gpu", "effect": "NoSchedule"}]),
        "gpu-a",
    ).node
    assert got is not None
    assert got.site == "gpu-a"  # the site's name, whatever the label says: site=gpu-a names it
    assert got.container_runtime == "kubernetes" and not got.schedulable
    assert [str(t) for t in got.taints] == ["gpu:NoSchedule"]
    assert [d.uuid for d in got.devices] == ["GPU-0"]
    assert read_node({"metadata": {"name": "plain"}, "status": {}}, "gpu-a").node is None
    with pytest.raises(RequestError, match="63"):
        read_node(hami_node("n" * 64), "gpu-a")
    with pytest.raises(RequestError, match="effect"):
        read_node(hami_node("n1", taints=[{"key": "k", "effect": "Sometimes"}]), "gpu-a")


def test_a_gang_keeps_to_one_kubernetes_site() -> None:
    """Issue 51 part 3: a Kubernetes site's nodes carry its name as their site, so the engine's
    one-site rule for gangs (``engine/gang_sites.py``) holds across Kubernetes sites as across
    agent sites: two sites of one card each cannot hold a gang of two, though the pool could."""
    nodes = []
    for site in ("gpu-a", "gpu-b"):
        obj = hami_node(f"{site}-n1")
        notes = obj["metadata"]["annotations"]
        notes["hami.io/node-nvidia-register"] = notes["hami.io/node-nvidia-register"].replace(
            "GPU-0", f"GPU-{site}"
        )
        node = read_node(obj, site).node
        assert node is not None
        nodes.append(node)
    engine = Engine(ClusterState(nodes), "binpack")
    refused = engine.place(parse_spec("A100 replicas=2 gang"))
    assert not refused.ok
    assert "no single site holds 2 replicas" in refused.failures[0].note
    assert engine.place(parse_spec("A100 replicas=2 gang sites=any")).ok
