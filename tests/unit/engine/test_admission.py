"""Admission: flavour assignment, quota with cohort borrowing, exact charging, DRF order."""

from __future__ import annotations

import pytest

from xpupool.engine.cycle.admission import (
    UNLISTED,
    Admission,
    Admitted,
    QueueSpec,
    Quota,
    Refusal,
    Resource,
    Unlisted,
)
from xpupool.engine.outcomes import (
    Inadmissible,
    NoNodeFits,
    NotAdmitted,
    NoUsableFlavor,
    QuotaCeiling,
    QuotaExceeded,
    render,
)
from xpupool.engine.reasons import Reason
from xpupool.model import DeviceRequest, NotFound, Request

from factories import ASCEND_910B3, T4, engine_for, gpu_node

DEV = Resource.DEVICES


def cards(count: int = 1, priority: int = 0, **kwargs: object) -> Request:
    devices = DeviceRequest(count=count, **kwargs)  # type: ignore[arg-type]
    return Request("j", 1000, 1024, devices, priority=priority)


@pytest.mark.slow
def test_quota_caps_devices_and_release_returns_the_charge() -> None:
    engine = engine_for(gpu_node("a", count=4))
    admission = Admission(engine, [QueueSpec("q", "t", (Quota("nvidia", DEV, 2),))])
    first = admission.admit(cards(1), "q")
    assert isinstance(first, Admitted) and first.flavor == "nvidia"
    refused = admission.admit(cards(2), "q")
    assert isinstance(refused, Refusal)
    assert refused.outcome == NotAdmitted((QuotaExceeded("nvidia", DEV, 1, 2, 2, 0),))
    admission.release(first.placement.allocations[0])
    assert admission.usage["q"][("nvidia", DEV)] == 0
    assert isinstance(admission.admit(cards(2), "q"), Admitted)


def test_a_refusal_writes_memory_and_compute_as_requests_do() -> None:
    """Device memory in MiB/GiB and compute in % of a card, not MiB counts and thousandths."""
    engine = engine_for(gpu_node("a", count=4))
    quotas = (
        Quota("nvidia", Resource.CORES_PERMILLE, 1500),
        Quota("nvidia", Resource.DEVICE_MEMORY_MIB, 40 * 1024),
    )
    admission = Admission(engine, [QueueSpec("q", "t", quotas)])
    assert isinstance(admission.admit(cards(1, core_permille=500, memory_mib=1024), "q"), Admitted)
    refused = admission.admit(cards(2, core_permille=750, memory_mib=1024), "q")
    assert isinstance(refused, Refusal)
    assert (
        render(refused.outcome)
        == "nvidia: cores quota: 50% used + 150% asked > 150% nominal + 0% borrowable"
    )
    refused = admission.admit(cards(1, core_permille=100, memory_mib=40 * 1024), "q")
    assert isinstance(refused, Refusal)
    assert render(refused.outcome) == (
        "nvidia: device memory quota: 1Gi used + 40Gi asked > 40Gi nominal + 0Mi borrowable"
    )


def test_flavours_are_tried_in_order_and_placement_stays_inside() -> None:
    engine = engine_for(
        gpu_node("a100", count=1), gpu_node("t4", model=T4, memory_mib=15360, count=4)
    )
    spec = QueueSpec("q", "t", (Quota("A100", DEV, 1), Quota("nvidia", DEV, 4)))
    admission = Admission(engine, [spec])
    first = admission.admit(cards(1), "q")
    assert isinstance(first, Admitted) and first.flavor == "A100"
    assert first.placement.allocations[0].node == "a100"
    second = admission.admit(cards(1), "q")  # A100 quota is spent: the vendor-wide flavour
    assert isinstance(second, Admitted) and second.flavor == "nvidia"
    assert second.placement.allocations[0].node == "t4"


def test_cohort_borrowing_up_to_the_limit_and_never_lending_twice() -> None:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8))
    admission = Admission(
        engine,
        [
            QueueSpec("lend", "x", (Quota("nvidia", DEV, 4),), cohort="c"),
            QueueSpec("borrow", "y", (Quota("nvidia", DEV, 2, borrowing_limit=2),), cohort="c"),
            QueueSpec("free", "z", (Quota("nvidia", DEV, 0),), cohort="c"),
        ],
    )
    assert isinstance(admission.admit(cards(4), "borrow"), Admitted)  # 2 own + 2 of the lender's
    limit = admission.admit(cards(1), "borrow")
    assert isinstance(limit, Refusal)
    assert limit.outcome == NotAdmitted((QuotaExceeded("nvidia", DEV, 4, 1, 2, 2),))
    # Cohort nominal 6, used 4: "free" (nominal 0) may borrow the 2 left, and no more.
    assert isinstance(admission.admit(cards(2), "free"), Admitted)
    full = admission.admit(cards(1), "free")
    assert isinstance(full, Refusal)
    assert full.outcome == NotAdmitted((QuotaExceeded("nvidia", DEV, 2, 1, 0, 2),))
    # A lender's nominal quota is guaranteed even while lent out (reclaiming room from borrowers
    # is the cycle's preemption decision).
    assert isinstance(admission.admit(cards(1), "lend"), Admitted)


def test_memory_is_charged_at_the_real_card_size() -> None:
    engine = engine_for(gpu_node("a", count=2, group_size=0))
    spec = QueueSpec("q", "t", (Quota("nvidia", Resource.DEVICE_MEMORY_MIB, 40960),))
    admission = Admission(engine, [spec])
    half = admission.admit(cards(1, memory_permille=500), "q")
    assert isinstance(half, Admitted)
    assert admission.usage["q"][("nvidia", Resource.DEVICE_MEMORY_MIB)] == 40960
    assert isinstance(admission.admit(cards(1, memory_permille=500), "q"), Refusal)


def test_refused_when_no_flavour_has_usable_devices_or_queue_is_unknown() -> None:
    engine = engine_for(gpu_node("n", vendor="huawei", model=ASCEND_910B3, memory_mib=65536))
    spec = QueueSpec("q", "t", (Quota("nvidia", DEV, 8),), unlisted_flavors=Unlisted.DENY)
    admission = Admission(engine, [spec])
    refused = admission.admit(cards(1), "q")
    assert isinstance(refused, Refusal) and refused.outcome == NoUsableFlavor()
    with pytest.raises(NotFound):
        admission.admit(cards(1), "nope")


def test_full_flavour_is_explained_even_when_other_devices_are_free() -> None:
    engine = engine_for(
        gpu_node("a", count=1), gpu_node("n", vendor="huawei", model=ASCEND_910B3, memory_mib=65536)
    )
    spec = QueueSpec("q", "t", (Quota("nvidia", DEV, 8),), unlisted_flavors=Unlisted.DENY)
    admission = Admission(engine, [spec])
    assert isinstance(admission.admit(cards(1), "q"), Admitted)
    refused = admission.admit(cards(1), "q")
    assert isinstance(refused, Refusal) and isinstance(refused.outcome, NotAdmitted)
    (cause,) = refused.outcome.causes
    assert isinstance(cause, NoNodeFits) and cause.flavor == "nvidia"
    assert {(r.reason, r.count) for r in cause.why.reasons} == {
        (Reason.INSUFFICIENT_DEVICE_MEMORY, 1),
        (Reason.OUTSIDE_ASSIGNMENT, 1),
    }


def test_dominant_resource_fairness_orders_tenants_then_priority_then_age() -> None:
    engine = engine_for(gpu_node("a", count=8))
    queues = [
        QueueSpec("qa", "A", (Quota("*", DEV, 8),)),
        QueueSpec("qb", "B", (Quota("*", DEV, 8),)),
    ]
    admission = Admission(engine, queues)
    admission.admit(cards(4), "qa")  # A holds half the cards
    admission.admit(cards(1), "qb")  # B an eighth
    pending = [
        (cards(1, priority=9), "qa"),
        (cards(1, priority=0), "qb"),
        (cards(1, priority=5), "qb"),
        (cards(1, priority=5), "qb"),
    ]
    assert admission.order(pending) == [2, 3, 1, 0]
    assert admission.dominant_shares() == {"A": 0.5, "B": 0.125}


def one_card_queues(limit: int | None) -> Admission:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8))
    quota = Quota("nvidia", DEV, 4, borrowing_limit=limit)
    queues = [
        QueueSpec("q", "x", (quota,), cohort="c"),
        QueueSpec("idle", "y", (Quota("nvidia", DEV, 4),), cohort="c"),
    ]
    return Admission(engine, queues)


@pytest.mark.parametrize(("limit", "reached"), [(2, 6), (None, 8)])
@pytest.mark.slow
def test_borrowed_quota_is_counted_once(limit: int | None, reached: int) -> None:
    # nominal 4, the idle peer's 4 to borrow: the limit (2) or the cohort (8) is the bound
    admission = one_card_queues(limit)
    admitted = 0
    while isinstance(admission.admit(cards(1), "q"), Admitted):
        admitted += 1
    assert admitted == reached
    refused = admission.admit(cards(1), "q")
    assert isinstance(refused, Refusal)
    short = QuotaExceeded("nvidia", DEV, reached, 1, 4, reached - 4)
    assert refused.outcome == NotAdmitted((short,))


def test_a_new_quota_counts_the_work_admitted_before_it() -> None:
    engine = engine_for(gpu_node("a", count=8))
    before = Admission(engine, [QueueSpec("q", "t", ())])
    held = []
    for _ in range(5):
        outcome = before.admit(cards(1), "q")
        assert isinstance(outcome, Admitted) and outcome.flavor == "*"
        held.extend(outcome.placement.allocations)
    after = Admission(engine, [QueueSpec("q", "t", (Quota("A100", DEV, 2),))])
    flavors = {after.restore(a, "q", "*", in_engine=False) for a in held}
    assert flavors == {"A100"}
    assert after.usage["q"][("A100", DEV)] == 5
    assert isinstance(after.admit(cards(1), "q"), Refusal)  # 5 of 2 in use: over quota


def test_devices_no_quota_names_are_free_to_use_unless_denied() -> None:
    engine = engine_for(gpu_node("a", count=2), gpu_node("l", model=T4, memory_mib=15360))
    allow = Admission(engine, [QueueSpec("q", "t", (Quota("A100", DEV, 2),))])
    placed = allow.admit(cards(1, models=(T4,)), "q")
    assert isinstance(placed, Admitted) and placed.flavor == UNLISTED
    assert placed.placement.allocations[0].node == "l"
    assert allow.usage["q"][("A100", DEV)] == 0
    deny = QueueSpec("q", "t", (Quota("A100", DEV, 2),), unlisted_flavors=Unlisted.DENY)
    refused = Admission(engine, [deny]).admit(cards(1, models=(T4,)), "q")
    assert isinstance(refused, Refusal) and refused.outcome == NoUsableFlavor()


def test_fair_share_counts_what_shares_of_cards_really_hold() -> None:
    engine = engine_for(gpu_node("a", count=8))
    queues = [QueueSpec("qx", "x", ()), QueueSpec("qy", "y", ())]
    admission = Admission(engine, queues)
    for _ in range(3):  # x: three 1 GiB slices of a card
        assert isinstance(
            admission.admit(cards(1, memory_mib=1024, core_permille=10), "qx"), Admitted
        )
    for _ in range(2):  # y: two whole cards
        assert isinstance(admission.admit(cards(1), "qy"), Admitted)
    shares = admission.dominant_shares()
    assert shares["x"] < shares["y"]
    assert admission.order([(cards(1), "qy"), (cards(1), "qx")]) == [1, 0]


# ------------------------------------------------------------------ what no future can admit
def test_the_ceiling_is_nominal_plus_the_lesser_of_the_limit_and_the_others_nominal() -> None:
    """Issue 42 part 3: the bound a queue can ever reach, used or not by others now."""
    engine = engine_for(gpu_node("a", count=8))
    alone = QueueSpec("alone", "t", (Quota("nvidia", DEV, 2),))
    capped = QueueSpec("capped", "t", (Quota("nvidia", DEV, 2, 1),), cohort="c")
    open_ = QueueSpec("open", "u", (Quota("nvidia", DEV, 1),), cohort="c")
    lender = QueueSpec("lender", "v", (Quota("nvidia", DEV, 4),), cohort="c")
    admission = Admission(engine, [alone, capped, open_, lender])
    assert admission.ceiling(alone, alone.quotas[0]) == 2
    assert admission.ceiling(capped, capped.quotas[0]) == 2 + min(1, 1 + 4)
    assert admission.ceiling(open_, open_.quotas[0]) == 1 + (2 + 4)
    # what others use now does not move it
    assert isinstance(admission.admit(cards(4), "lender"), Admitted)
    assert admission.ceiling(open_, open_.quotas[0]) == 7


def test_a_request_above_every_usable_flavours_ceiling_is_inadmissible() -> None:
    engine = engine_for(gpu_node("a", count=8))
    admission = Admission(engine, [QueueSpec("q", "t", (Quota("nvidia", DEV, 2),))])
    never = admission.inadmissible(cards(4), "q")
    assert never == Inadmissible((QuotaCeiling("nvidia", DEV, 4, 2, 0),))
    assert render(never) == (
        "inadmissible: nvidia: devices quota: 4 asked > 2 nominal + 0 borrowable at most"
    )
    assert admission.inadmissible(cards(2), "q") is None
    assert isinstance(admission.admit(cards(2), "q"), Admitted)
    assert admission.inadmissible(cards(2), "q") is None  # waits for the first: not inadmissible


def test_devices_outside_the_quotas_or_another_flavour_keep_a_request_admissible() -> None:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8, model=T4))
    t4 = (Quota("T4", DEV, 8),)
    two = (Quota("A100", DEV, 2),)
    allow = Admission(engine, [QueueSpec("q", "t", two)])
    assert allow.inadmissible(cards(4), "q") is None  # the T4s are unlisted and allowed
    deny = Admission(engine, [QueueSpec("q", "t", two, unlisted_flavors=Unlisted.DENY)])
    assert deny.inadmissible(cards(4), "q") == Inadmissible((QuotaCeiling("A100", DEV, 4, 2, 0),))
    both = Admission(engine, [QueueSpec("q", "t", two + t4, unlisted_flavors=Unlisted.DENY)])
    assert both.inadmissible(cards(4), "q") is None  # the T4 flavour can hold it


def test_a_cordoned_flavour_still_counts_for_what_may_be_admitted_later() -> None:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8, model=T4))
    quotas = (Quota("A100", DEV, 2), Quota("T4", DEV, 8))
    admission = Admission(engine, [QueueSpec("q", "t", quotas, unlisted_flavors=Unlisted.DENY)])
    for j in range(8):  # every T4 cordoned (or unhealthy) now: a cordon ends
        engine.state.set_device_cordoned(f"b-gpu{j}", True)
    assert not (engine.pipeline.eligible(engine.pipeline.context(cards(4, models=("T4",))))).any()
    assert admission.inadmissible(cards(4), "q") is None


def test_a_quota_held_in_one_site_admits_only_there_and_a_fleet_wide_one_anywhere() -> None:
    """``A100@beijing`` is a flavour of beijing's A100s alone: its quota admits jobs there only,
    and once it is used the queue's next flavour (here, a fleet-wide one) is tried."""
    engine = engine_for(
        gpu_node("bj", count=2, site="beijing"), gpu_node("sh", count=2, site="shanghai")
    )
    spec = QueueSpec("q", "t", (Quota("A100@beijing", DEV, 1), Quota("A100", DEV, 1)))
    admission = Admission(engine, [spec])
    first = admission.admit(cards(1), "q")
    assert isinstance(first, Admitted) and first.flavor == "A100@beijing"
    assert first.placement.allocations[0].node == "bj"
    second = admission.admit(cards(1), "q")
    assert isinstance(second, Admitted) and second.flavor == "A100"
    refused = admission.admit(cards(1), "q")
    assert isinstance(refused, Refusal)
    assert refused.outcome == NotAdmitted(
        (QuotaExceeded("A100@beijing", DEV, 1, 1, 1, 0), QuotaExceeded("A100", DEV, 1, 1, 1, 0))
    )


def test_a_site_quota_never_admits_onto_another_sites_cards() -> None:
    """With ``unlisted_flavors: deny`` a queue holding quota only in shanghai waits for shanghai's
    cards even while beijing's are free."""
    engine = engine_for(
        gpu_node("bj", count=4, site="beijing"), gpu_node("sh", count=1, site="shanghai")
    )
    spec = QueueSpec("q", "t", (Quota("*@shanghai", DEV, 4),), unlisted_flavors=Unlisted.DENY)
    admission = Admission(engine, [spec])
    first = admission.admit(cards(1), "q")
    assert isinstance(first, Admitted) and first.placement.allocations[0].node == "sh"
    refused = admission.admit(cards(1), "q")
    assert isinstance(refused, Refusal) and refused.capacity_only
