"""The runner against real processes: output captured, exit codes reported, stops enforced."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import pytest
from agent_work import device, poll_until, settings, started, work

from xpupool.agent.runner import NO_RUNTIME, Runner, group_alive


def _state(runner: Runner, key: tuple[int, int] = (7, 0)) -> str:
    return runner.replicas[key].state


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.slow
def test_runs_captures_output_and_ships_it(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    code = "import os, sys; print('visible', os.environ['CUDA_VISIBLE_DEVICES']); sys.exit(3)"
    started(runner.start(work(_py(code), devices=[device(2, memory_mib=1024)])), runner)
    poll_until(lambda: _state(runner) != "running", runner)
    report = runner.reports()[0]
    assert (report.state, report.exit_code) == ("failed", 3)
    shipped: list[bytes] = []
    runner.ship_logs(lambda job, replica, chunk, offset, attempt: shipped.append(chunk))
    assert b"visible 2" in b"".join(shipped)
    runner.ship_logs(lambda *_: shipped.append(b"again"))
    assert b"again" not in shipped  # only new bytes
    runner.acknowledge([report])
    assert runner.replicas == {}
    assert runner.start(work(_py("pass"))) is None  # that allocation is done


@pytest.mark.slow
def test_success_and_rerun_under_a_new_allocation(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    started(runner.start(work(_py("print('hi')"))), runner)
    poll_until(lambda: _state(runner) == "succeeded", runner)
    runner.acknowledge(runner.reports())
    assert (
        started(runner.start(work(_py("pass"), allocation_id=2)), runner) is not None
    )  # requeued, placed again


@pytest.mark.slow
def test_start_is_idempotent(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    first = started(runner.start(work(_py("import time; time.sleep(5)"))), runner)
    assert first is not None
    assert runner.start(work(_py("import time; time.sleep(5)"))) is None
    runner.shutdown(timeout_s=5)


@pytest.mark.slow
def test_stop_sends_sigterm_and_reports_when_gone(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, grace_s=5.0, settings=settings(tmp_path))
    rep = started(
        runner.start(work(_py("import time; print('up', flush=True); time.sleep(60)"))), runner
    )
    assert rep is not None and rep.pid is not None
    poll_until(lambda: rep.log_path.read_bytes().startswith(b"up"), runner)
    runner.stop(7, 0)
    poll_until(lambda: _state(runner) == "stopped", runner, timeout_s=4.0)  # well before SIGKILL
    assert not group_alive(rep.pid)
    assert runner.reports()[0].reason == "stopped (killed by SIGTERM)"


@pytest.mark.slow
def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring', flush=True)\n"
        "time.sleep(60)\n"
    )
    runner = Runner("n1", tmp_path, grace_s=0.3, settings=settings(tmp_path))
    rep = started(runner.start(work(_py(code))), runner)
    assert rep is not None and rep.pid is not None
    poll_until(lambda: b"ignoring" in rep.log_path.read_bytes(), runner)
    runner.stop(7, 0)
    runner.poll()
    assert _state(runner) == "running"  # SIGTERM ignored: still there
    poll_until(lambda: _state(runner) == "stopped", runner)
    report = runner.reports()[0]
    assert report.exit_code == 128 + 9
    assert "SIGKILL" in report.reason


@pytest.mark.slow
def test_stop_waits_for_the_whole_group(tmp_path: Path) -> None:
    # the leader exits on SIGTERM, its child ignores it: stopped only after the SIGKILL
    code = (
        "import os, signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(1, flush=True); time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    runner = Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path))
    rep = started(runner.start(work(_py(code))), runner)
    assert rep is not None and rep.pid is not None
    poll_until(lambda: b"1" in rep.log_path.read_bytes(), runner)
    runner.stop(7, 0)
    time.sleep(0.2)
    runner.poll()
    assert rep.leader_done and _state(runner) == "running"
    poll_until(lambda: _state(runner) == "stopped", runner)
    assert not group_alive(rep.pid)


@pytest.mark.slow
def test_image_fails_clearly(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = started(runner.start(work(["python"], image="pytorch/pytorch:latest")), runner)
    assert rep is not None
    report = runner.reports()[0]
    assert (report.state, report.reason) == ("failed", NO_RUNTIME)
    assert NO_RUNTIME.encode() in rep.log_path.read_bytes()


@pytest.mark.slow
def test_missing_command_is_a_failure_with_its_reason(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = started(runner.start(work(["/nonexistent/xpupool-test-binary"])), runner)
    assert rep is not None
    poll_until(lambda: _state(runner) != "running", runner)
    assert runner.reports()[0].state == "failed"
    assert b"cannot" in rep.log_path.read_bytes()


def test_stop_of_an_unknown_replica_is_reported_stopped(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    runner.stop(3, 1)
    assert [(r.job_id, r.replica, r.state) for r in runner.reports()] == [(3, 1, "stopped")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
@pytest.mark.slow
def test_replica_outlives_its_agent_and_dies_with_its_supervisor(tmp_path: Path) -> None:
    # a stand-in agent starts a replica, prints its pid, then is SIGKILLed
    agent = (
        "import sys, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from agent_work import settings, started, work\n"
        "from xpupool.agent.runner import Runner\n"
        f"r = Runner('n1', Path({str(tmp_path)!r}), settings=settings(Path({str(tmp_path)!r})))\n"
        "rep = started(r.start(work([sys.executable, '-c', 'import time; time.sleep(60)'])), r)\n"
        "print(rep.pid, rep.status.supervisor_pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    import os
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True)
    pid = supervisor = 0
    try:
        assert proc.stdout is not None
        pid, supervisor = map(int, proc.stdout.readline().split())
        time.sleep(0.3)  # let the launcher exec
        assert group_alive(pid)
        proc.kill()
        proc.wait(5)
        time.sleep(0.5)
        assert group_alive(pid)  # its supervisor keeps it
        os.kill(supervisor, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group_alive(pid)  # but it dies with its supervisor
    finally:
        proc.kill()
        for p in (pid, supervisor):
            if p:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
