"""How long an agent's replicas may run without a heartbeat the server answered, and when the
server may run a silent node's jobs elsewhere.

The agent renews its replicas' leases only after a heartbeat the server answered, to (the time
that heartbeat was sent) + ``lease_s``: the server saw it at or after that time, so a lease never
outlives what the server believes. When a node falls silent, its replicas' supervisors stop them
at the lease's end (SIGTERM, SIGKILL ``grace_s`` later). The server therefore frees a silent
node's jobs only ``requeue_after_s`` = lease + grace + a margin after the last heartbeat it saw:
by then the old copy is surely dead, and a job never runs twice at once. Durations only, each
timed on its own side's monotonic clock: the agent's lease from when it sent the heartbeat
(CLOCK_MONOTONIC, which its supervisors share on the same host), the server's silence from when
it received the last one (``ControlPlane.monotonic``; after a restart, from the restart). No
decision subtracts wall-clock times, which a step (NTP, ``date -s``) moves, or compares one
machine's time with another's: the two clocks need not agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.model.errors import RequestError

MARGIN_S = 1.0  # a supervisor's poll period, the SIGKILL taking effect, a slow disk
MAX_GRACE_S = 10.0
HEARTBEATS_PER_LEASE = 5.0
MIN_DEFAULT_LEASE_S = 20.0  # what a restart of the server (or of an agent) usually takes, and more


@dataclass(frozen=True, slots=True)
class Lease:
    """``lease_s``: what one answered heartbeat buys; ``grace_s``: SIGTERM to SIGKILL when it
    runs out."""

    lease_s: float
    grace_s: float

    @property
    def requeue_after_s(self) -> float:
        """Silence after which nothing of a node's replicas can be running any more."""
        return self.lease_s + self.grace_s + MARGIN_S

    @classmethod
    def for_settings(
        cls, heartbeat_s: float, lost_after_s: float, lease_s: float | None = None
    ) -> Lease:
        """``lease_s`` None: five heartbeat periods and at least 20 s (running work survives a
        restart of the server or of its agent), at most 80 % of ``lost_after_s`` (the lease
        ends before the node is declared lost). Raises RequestError naming ``--lease``."""
        if lease_s is None:
            wanted = max(HEARTBEATS_PER_LEASE * heartbeat_s, MIN_DEFAULT_LEASE_S)
            lease_s = min(wanted, 0.8 * lost_after_s)
        elif not 0 < lease_s < lost_after_s:
            raise RequestError(
                "--lease",
                str(lease_s),
                f"must be above 0 and below --lost-after ({lost_after_s:g})",
            )
        elif lease_s <= heartbeat_s:
            raise RequestError(
                "--lease", str(lease_s), f"must be longer than --heartbeat ({heartbeat_s:g})"
            )
        return cls(lease_s, min(MAX_GRACE_S, lease_s))
