"""The site's pods as its watch told them, by key and by job (``k8s/site/seen_pods.py``): a
restart's reconciliation and a batch's earlier runs read a job's pods from it, so the index must
follow every change the watch brings, a job label rewritten included."""

from __future__ import annotations

from xpupool.k8s.site.pods import PodState
from xpupool.k8s.site.seen_pods import SeenPods


def state(job: int, attempt: int = 1, phase: str = "Running") -> PodState:
    return PodState(job, 0, attempt, phase, "n1", False, "", None)


def test_a_jobs_pods_follow_adds_changes_moves_and_deletions() -> None:
    seen = SeenPods()
    seen.put("ns/a", state(1))
    seen.put("ns/b", state(1, attempt=2))
    seen.put("ns/c", state(2))
    assert sorted(k for k, _ in seen.of_job(1)) == ["ns/a", "ns/b"]
    seen.put("ns/b", state(1, attempt=2, phase="Succeeded"))  # changed: still one entry
    assert [s.phase for k, s in seen.of_job(1) if k == "ns/b"] == ["Succeeded"]
    seen.put("ns/a", state(2))  # its job label rewritten: moved
    assert [k for k, _ in seen.of_job(1)] == ["ns/b"]
    assert sorted(k for k, _ in seen.of_job(2)) == ["ns/a", "ns/c"]
    assert seen.pop("ns/b") == state(1, attempt=2, phase="Succeeded")
    assert seen.of_job(1) == [] and seen.pop("ns/b") is None
    assert len(seen) == 2 and seen.get("ns/c") == state(2) and seen.get("ns/b") is None
