"""``xpupool agent`` logs what an operator needs by default, not a line per heartbeat or per
device field a vendor tool does not report; ``-v`` gives both (issue 42, part 4)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, stop_process, until

FAKE = Path(__file__).parents[2] / "examples" / "agent-fake.yaml"  # reports no utilisation


@pytest.mark.parametrize("verbose", [False, True])
def test_heartbeats_and_unread_fields_are_quiet_unless_verbose(
    tmp_path: Path, verbose: bool
) -> None:
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        extra = ("-v",) if verbose else ()
        agent, log = srv.start_agent(tmp_path, "box", FAKE, *extra)
        try:
            until(
                lambda: log.read_text().count("registered") >= 1,
                f"the agent's registration ({log})",
            )
            until(lambda: _heartbeats(srv) >= 12, f"a dozen heartbeats at 0.2 s ({log})")
        finally:
            stop_process(agent)
    text = log.read_text()
    requests = text.count("HTTP Request: POST")
    unread = text.count("cannot be read")
    if verbose:
        assert requests >= 12 and unread >= 3, text
    else:
        assert requests == 0 and unread == 0, text
        assert text.count("not reported by the vendor tools") == 1, text


def _heartbeats(srv: ServerProc) -> int:
    """The server's count of the node's heartbeats (its /metrics counter)."""
    with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
        metrics = admin.get("/metrics").text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("xpupool_agent_heartbeats_total{") and 'node="box"' in line
    )
