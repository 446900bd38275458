"""Image replicas' host ports (agent/launch/ports.py) and the network flags they become
(container.py): one port per live replica, never reused, refused with the reason when the range
has none left; ``-p PORT:PORT`` under bridge, ``--network host`` under host, for both runtimes.
That replicas really reach each other this way is tested on podman:
tests/integration/test_container_engine.py (the gang tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_work import settings, work

from xpupool.agent.launch import LaunchError, build_spec
from xpupool.agent.launch.container import ContainerBackend, container_env
from xpupool.agent.launch.ports import PortRange, replica_ports
from xpupool.agent.launch.spec_file import SpecFile, dumps, loads
from xpupool.server.schemas.agent_protocol import ElasticMember, ElasticWorld

GANG_MASTER = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "30005", "MASTER_ADDR": "127.0.0.1"}


def _option(argv: list[str], key: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == key]


def test_a_port_range_parses_or_says_what_is_wrong() -> None:
    assert PortRange.parse("30000-30999") == PortRange(30000, 30999)
    assert PortRange.parse("30000").size == 1
    for bad in ("x-y", "30999-30000", "80-90", "30000-70000"):
        with pytest.raises(ValueError, match="FIRST"):
            PortRange.parse(bad)


def test_the_lowest_free_port_and_never_one_a_live_replica_holds() -> None:
    ports = PortRange(30000, 30002)
    assert replica_ports({}, ports, ()) == (30000,)
    assert replica_ports({}, ports, {30000, 30002}) == (30001,)
    with pytest.raises(ValueError, match=r"no free port in this node's range 30000-30002"):
        replica_ports({}, ports, {30000, 30001, 30002})


def test_a_gangs_replica_0_claims_the_master_port_the_server_chose() -> None:
    ports = PortRange(30000, 30009)
    assert replica_ports(GANG_MASTER, ports, {30000}) == (30005,)
    with pytest.raises(ValueError, match="MASTER_PORT 30005 is held"):
        replica_ports(GANG_MASTER, ports, {30005})
    other = {**GANG_MASTER, "RANK": "1"}  # a non-master replica gets a port of its own
    assert replica_ports(other, ports, {30000}) == (30001,)


def test_an_elastic_jobs_replica_0_claims_the_master_port_while_it_runs_alone(
    tmp_path: Path,
) -> None:
    """An elastic job started at one replica has WORLD_SIZE 1, yet the replicas it grows join
    a rendezvous its replica 0 hosts at MASTER_ADDR:MASTER_PORT (torchrun's elastic mode,
    docs/jobs.md): that port must be the one published, not the lowest free one."""
    cfg = settings(tmp_path, runtime="podman", ports=PortRange(30000, 30009))
    alone = {**GANG_MASTER, "WORLD_SIZE": "1"}
    member = ElasticMember(rank=0, replica=0, address="127.0.0.1")
    world = ElasticWorld(replicas=1, rank=0, min_replicas=1, max_replicas=2, members=[member])
    elastic = work(["true"], image="busybox", env=alone).model_copy(update={"elastic": world})
    assert build_spec(elastic, tmp_path / "l.log", cfg).ports == (30005,)
    fixed = work(["true"], image="busybox", env=alone)  # one replica, no peers: any port
    assert build_spec(fixed, tmp_path / "l.log", cfg).ports == (30000,)


def test_a_spec_with_no_port_left_is_refused_with_the_reason(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="podman", ports=PortRange(30000, 30000))
    w = work(["true"], image="busybox")
    spec = build_spec(w, tmp_path / "l.log", cfg)
    assert spec.ports == (30000,)
    assert (spec.env["PORT"], spec.env["XPUPOOL_PORTS"]) == ("30000", "30000")
    with pytest.raises(LaunchError, match=r"no free port.*widen --ports"):
        build_spec(w, tmp_path / "l.log", cfg, held_ports={30000})
    command = build_spec(work(["true"]), tmp_path / "l.log", cfg, held_ports={30000})
    assert command.ports == () and "PORT" not in command.env  # command jobs: the host's own


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_bridge_publishes_each_port_as_itself(tmp_path: Path, runtime: str) -> None:
    cfg = settings(tmp_path, runtime=runtime, ports=PortRange(30000, 30009))
    spec = build_spec(work(["true"], image="busybox", env=GANG_MASTER), tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    cut = argv.index("--")
    assert _option(argv[:cut], "-p") == ["30005:30005"]
    assert "--network" not in argv[:cut]  # the runtime's own bridge
    host_gateway = ["host.docker.internal:host-gateway"] if runtime == "docker" else []
    assert _option(argv[:cut], "--add-host") == host_gateway


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_host_network_publishes_nothing(tmp_path: Path, runtime: str) -> None:
    cfg = settings(tmp_path, runtime=runtime, network="host")
    spec = build_spec(work(["true"], image="busybox"), tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    cut = argv.index("--")
    assert _option(argv[:cut], "--network") == ["host"]
    assert "-p" not in argv[:cut] and "--add-host" not in argv[:cut]


def test_on_the_bridge_a_loopback_master_is_the_host_as_the_container_names_it(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path, runtime="podman")
    env = {**GANG_MASTER, "XPUPOOL_PEERS": "127.0.0.1,10.0.0.2"}
    spec = build_spec(work(["true"], image="busybox", env=env), tmp_path / "l.log", cfg)
    bridged = container_env(spec, "bridge", "host.containers.internal")
    assert bridged["MASTER_ADDR"] == "host.containers.internal"
    assert bridged["XPUPOOL_PEERS"] == "host.containers.internal,10.0.0.2"
    hosted = container_env(spec, "host", "host.containers.internal")
    assert hosted["MASTER_ADDR"] == "127.0.0.1"  # the host's loopback is its own


def test_network_and_ports_travel_to_the_supervisor(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="podman", network="host", ports=PortRange(31000, 31009))
    spec = build_spec(work(["true"], image="busybox"), tmp_path / "l.log", cfg)
    back = loads(dumps(SpecFile("container", cfg, spec, 1.0)))
    assert (back.settings.network, back.settings.ports) == ("host", PortRange(31000, 31009))
    assert back.spec.ports == (31000,)


def test_the_nodes_of_one_process_never_share_a_port(tmp_path: Path) -> None:
    """``xpupool up`` runs several nodes' runners on one host: a port one holds is held for all."""
    from xpupool.agent.runner import Runner

    cfg = settings(tmp_path, runtime="podman", ports=PortRange(30000, 30009))
    never = ("/bin/false",)  # no supervisor is needed to see the spec's port
    a = Runner("a", tmp_path / "a", settings=cfg, supervisor=never)
    b = Runner("b", tmp_path / "b", settings=cfg, supervisor=never)
    first = a.start(work(["true"], image="busybox", node="a", job_id=1))
    second = b.start(work(["true"], image="busybox", node="b", job_id=2))
    assert first is not None and second is not None
    assert first.spec is not None and second.spec is not None
    assert first.spec.ports != second.spec.ports
    both = {*first.spec.ports, *second.spec.ports}
    assert both <= a.held_ports() and both <= b.held_ports()


def test_a_host_job_that_asks_for_a_port_gets_one_as_port(tmp_path: Path) -> None:
    """Issue 47: a served process on the host needs a port its node's agent hands out (so two
    replicas on one node never fight for one); ``port: 0`` asks for it, nothing else changes."""
    cfg = settings(tmp_path, ports=PortRange(30000, 30009))
    w = work(["python3", "-m", "http.server"]).model_copy(update={"port": 0})
    spec = build_spec(w, tmp_path / "l.log", cfg, held_ports={30000})
    assert spec.ports == (30001,) and spec.container_port == 0
    assert (spec.env["PORT"], spec.env["XPUPOOL_PORTS"]) == ("30001", "30001")


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_an_images_own_port_is_published_on_the_node_port(tmp_path: Path, runtime: str) -> None:
    """A server image listens on its own port (vLLM: 8000): the node port the agent picks is
    published to that one, and the process is told the port it listens on."""
    cfg = settings(tmp_path, runtime=runtime, ports=PortRange(30000, 30009))
    w = work([], image="vllm").model_copy(update={"port": 8000})
    spec = build_spec(w, tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    assert _option(argv[: argv.index("--")], "-p") == ["30000:8000"]
    assert (spec.env["PORT"], spec.env["XPUPOOL_PORTS"]) == ("8000", "30000")
    back = loads(dumps(SpecFile("container", cfg, spec, 1.0)))
    assert back.spec.container_port == 8000  # the supervisor builds the same argv


def test_an_images_own_port_cannot_be_kept_on_the_hosts_network(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="podman", network="host")
    w = work([], image="vllm").model_copy(update={"port": 8000})
    with pytest.raises(LaunchError, match=r"listen on \$PORT.*give the job port 0"):
        build_spec(w, tmp_path / "l.log", cfg)
    anywhere = build_spec(w.model_copy(update={"port": 0}), tmp_path / "l.log", cfg)
    assert anywhere.env["PORT"] == str(anywhere.ports[0])
