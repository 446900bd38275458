"""The agent loop carries out a re-cut from a heartbeat reply and reports a failed tool run in
its next heartbeat, once: the order is not run again while the server keeps sending it, and the
failure is not sent again once the server has answered the heartbeat that carried it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent_work import settings, stand_ins

from xpupool.agent import Agent, HostedNode, Monitor, Runner
from xpupool.agent.inventory import node_in
from xpupool.agent.recut import Recuts, chip_locator
from xpupool.probes.base import ProbeError, ProbeFailure
from xpupool.probes.fake import FakeProbe
from xpupool.server.schemas.agent_protocol import CardRecut, Heartbeat, HeartbeatReply, NodeIn

FAKE = """\
devices:
  - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, memory: 80Gi, uuid_prefix: GPU-a,
     partitions: [3g.40gb@0, 3g.40gb@4]}
"""
ORDER = CardRecut(card="GPU-a-0", layout=["3g.40gb@0", "2g.20gb@4", "2g.20gb@6"])


class Server:
    """Answers every heartbeat with the same re-cut order; records the heartbeats."""

    def __init__(self) -> None:
        self.heartbeats: list[Heartbeat] = []

    def register(self, node: NodeIn) -> None:
        pass

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        self.heartbeats.append(body)
        return HeartbeatReply(heartbeat_s=0.1, recut=[ORDER])

    def append_log(self, *_: object) -> None:
        pass


def test_a_failed_tool_run_is_reported_once_and_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text(FAKE)
    ran: list[list[str]] = []

    def tool(vendor: str, argv: Sequence[str]) -> str:
        ran.append(list(argv))
        if "-lgi" in argv:
            return "|   0  MIG 3g.40gb   9   1   0:4   |\n|   0  MIG 3g.40gb   9   2   4:4   |\n"
        if "-cgi" in argv:
            raise ProbeError(
                vendor, " ".join(argv), ProbeFailure.TOOL_FAILED, "In use by another client"
            )
        return ""

    probes = [FakeProbe(path)]
    node = HostedNode(
        name="n1",
        runner=Runner("n1", tmp_path / "work", grace_s=0.5, settings=settings(tmp_path)),
        monitor=Monitor(probes, dev_root=stand_ins(tmp_path / "dev", nvidia0="/dev/zero")),
        inventory=lambda devices: node_in("n1", devices),
        recuts=Recuts(chip_locator(probes), tool),
    )
    server = Server()
    agent = Agent(server, [node], heartbeat_s=0.1, poll_s=0.02)  # type: ignore[arg-type]
    for _ in range(3):
        agent.step(node)
    assert [h.recut_failed for h in server.heartbeats[:1]] == [[]]
    failed = server.heartbeats[1].recut_failed
    assert [f.card for f in failed] == ["GPU-a-0"] and "In use" in failed[0].reason
    assert server.heartbeats[2].recut_failed == []  # answered: not sent again
    assert [a[-1] for a in ran] == ["-lgi", "-dci", "-dgi", "-C"]  # once, not every heartbeat
