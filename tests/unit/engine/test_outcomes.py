"""Outcomes: one text per code, rendered as the server has always stored job reasons."""

from __future__ import annotations

from xpupool.engine.outcomes import (
    INADMISSIBLE,
    TEXT,
    CannotSchedule,
    Code,
    ContainerDoesNotFit,
    FieldNeverFits,
    GangAnnotationFailed,
    GangBindTimeout,
    GangNoFreePlace,
    GangPlaceElsewhere,
    GangTooFewFit,
    Inadmissible,
    NamespaceQuota,
    NeverFits,
    NoNodeFits,
    NotAdmitted,
    NotInPool,
    NoUsableFlavor,
    OnNode,
    PreemptedByPriority,
    PreemptedByReclaim,
    PreemptingLowerPriority,
    QuotaCeiling,
    QuotaExceeded,
    Reclaiming,
    WaitingForVictims,
    render,
)
from xpupool.engine.reasons import Reason, ReasonCount, Unschedulable

FULL = Unschedulable(2, (ReasonCount(Reason.INSUFFICIENT_DEVICE_MEMORY, 2),))
SHORT = QuotaExceeded("nvidia", "devices", 2, 1, 2, 0)


def test_every_code_has_one_text() -> None:
    assert set(TEXT) == set(Code)


def test_waits_render_as_the_stored_reasons_did() -> None:
    assert render(NotAdmitted((SHORT, NoNodeFits(FULL, "unlisted")))) == (
        "nvidia: devices quota: 2 used + 1 asked > 2 nominal + 0 borrowable; "
        "unlisted: 0/2 nodes fit: 2 insufficient device memory"
    )
    memory = QuotaCeiling("A100", "device_memory_mib", 80 * 1024, 40 * 1024, 512)
    never = render(Inadmissible((memory,)))
    assert never.startswith(INADMISSIBLE)
    assert never == (
        "inadmissible: A100: device memory quota: 80Gi asked > 40Gi nominal + 512Mi borrowable "
        "at most"
    )
    assert render(WaitingForVictims(NotAdmitted((SHORT,)), (3, 7))).endswith(
        "; waiting for preempted job(s) [3, 7] to stop"
    )
    assert render(NeverFits("no node has 9 cards")) == (
        "unschedulable: nothing in the pool can hold it (no node has 9 cards)"
    )
    assert render(NoUsableFlavor()) == "no flavour of this queue has devices the request can use"
    assert render(CannotSchedule("boom")) == "cannot be scheduled: boom"


def test_preemptions_render_with_their_figures() -> None:
    cause = NoNodeFits(FULL)
    assert render(PreemptingLowerPriority(cause, 2)) == (
        "0/2 nodes fit: 2 insufficient device memory; preempting 2 lower-priority job(s)"
    )
    assert render(Reclaiming(cause, ("a", "b"), 3)).endswith(
        "; reclaiming quota lent to a, b: preempting 3 job(s)"
    )
    assert render(PreemptedByPriority(5, 9, 1)) == "preempted by job 5 (priority 9 > 1)"
    assert render(PreemptedByReclaim(5, "lend")) == (
        "preempted by job 5: queue lend reclaims the quota it lent"
    )


def test_a_pods_refusals_render_for_the_extender() -> None:
    misfit = ContainerDoesNotFit("main", FULL)
    assert render(misfit) == "container main: insufficient device memory"
    assert render(OnNode("n1", misfit)) == "n1: container main: insufficient device memory"
    assert render(OnNode("n1", NotInPool())) == "n1: node has no device xpupool manages"
    assert render(NamespaceQuota("team", "nvidia.com/gpumem", 3000, 4000, 2000)) == (
        "quota of namespace team: nvidia.com/gpumem 3000 of 4000 MiB held, the pod asks 2000"
    )
    cores = NamespaceQuota("team", "nvidia.com/gpucores", 150, 200, 100, cores_per_card=100)
    assert render(cores).endswith("150 of 200 (100 a card) held, the pod asks 100")
    assert (
        render(FieldNeverFits("devices.count", "no node has 9")) == "devices.count: no node has 9"
    )


def test_a_gangs_refusals_render_for_the_extender() -> None:
    assert render(GangBindTimeout("ns/g", 7, 8, 0.5)) == (
        "gang ns/g: 7 of 8 members reached bind within 0.5s; every place released"
    )
    assert render(GangTooFewFit("ns/g", 1, 3, FULL)) == (
        "gang ns/g: 1 of 3 fit (0/2 nodes fit: 2 insufficient device memory)"
    )
    assert render(GangNoFreePlace("ns/g")) == "gang ns/g: no free place of the group on these nodes"
    assert render(GangPlaceElsewhere("ns/g", "a")) == "gang ns/g: this pod's place is on a"
    assert render(GangAnnotationFailed("ns/g", "ns/p", "409")) == (
        "gang ns/g: annotating ns/p failed: 409"
    )
