"""Building request bodies from the command line and YAML files: the flags override the file,
``--`` keeps the job's own argv apart, and a typo is one error naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from xpupool.cli import main
from xpupool.client import cli_jobs
from xpupool.client.cli_admin import build_queue
from xpupool.client.cli_jobs import build_job
from xpupool.model.errors import RequestError
from xpupool.model.spec import parse_spec
from xpupool.server.schemas.jobs import Job, RetryCause


def test_spec_words_join_and_flags_override_the_file(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "name: from-file\nrequest: {devices: {count: 1}}\nenv: {A: '1'}\npriority: 3\n"
    )
    body = build_job(
        ("A100", "mem=20Gi"), ["python", "-o", "x"], str(job_file), {"name": "cli"}, {"B": "2"}
    )
    # the words replace the file's request and are read by the request model before sending
    assert body.spec is None and body.request is not None and body.request_field == "spec"
    assert body.request.to_request() == parse_spec("A100 mem=20Gi")
    assert body.name == "cli" and body.priority == 3
    assert body.env == {"A": "1", "B": "2"}
    assert body.command == ["python", "-o", "x"]


def test_a_typo_in_the_job_file_names_file_and_field(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("nmae: oops\n")
    with pytest.raises(RequestError) as err:
        build_job((), None, str(job_file), {}, {})
    assert err.value.field == f"{job_file}: nmae"


def test_queue_flags_parse_quotas_and_borrowing() -> None:
    body = build_queue(
        None, "research", "lab", "gpu", ("A100:devices=4+2", "*:device_memory_mib=81920")
    )
    assert [(q.flavor, q.resource.value, q.nominal, q.borrowing_limit) for q in body.quotas] == [
        ("A100", "devices", 4, 2),
        ("*", "device_memory_mib", 81920, None),
    ]


def test_borrowing_without_cohort_is_refused_before_sending() -> None:
    with pytest.raises(RequestError) as err:
        build_queue(None, "research", "lab", None, ("A100:devices=4+2",))
    assert "borrowing_limit" in err.value.reason


@pytest.mark.parametrize("quota", ["A100=4", "A100:devices", "A100:devices=four"])
def test_a_malformed_quota_flag_is_named(quota: str) -> None:
    with pytest.raises(RequestError) as err:
        build_queue(None, "q", "t", None, (quota,))
    assert err.value.field == "--quota"


def test_a_bad_env_pair_fails_before_any_request() -> None:
    result = CliRunner().invoke(
        main, ["submit", "A100", "--env", "NOEQUALS", "--url", "http://127.0.0.1:1"]
    )
    assert result.exit_code == 1
    assert "--env" in result.output and "cannot reach" not in result.output


class _FakeJobs:
    """Answers ``job(id)`` from a script of states: the seam ``wait_for`` polls through."""

    def __init__(self, states: list[str]) -> None:
        self.states = states

    def job(self, job_id: int) -> Job:
        return _job(job_id, self.states.pop(0))


def _job(job_id: int, state: str) -> Job:
    return Job.model_validate(
        {
            "id": job_id,
            "name": "j",
            "tenant": "t",
            "queue": "t",
            "state": state,
            "reason": "r",
            "priority": 0,
            "request": {},
            "command": [],
            "image": None,
            "env": {},
            "on_node_lost": "requeue",
            "created_at": 0.0,
            "updated_at": 0.0,
        }
    )


@pytest.mark.parametrize(
    ("until", "states", "final"),
    [
        ("scheduled", ["pending", "admitted", "scheduled", "running"], "scheduled"),
        ("finished", ["scheduled", "running", "failed"], "failed"),
        ("scheduled", ["cancelled"], "cancelled"),
    ],
)
def test_wait_stops_at_the_first_target_state(
    monkeypatch: pytest.MonkeyPatch, until: str, states: list[str], final: str
) -> None:
    monkeypatch.setattr(cli_jobs, "WAIT_POLL_S", 0.0)
    done = cli_jobs.wait_for(_FakeJobs(states), _job(1, "pending"), until, 5.0)  # type: ignore[arg-type]
    assert done.state.value == final


def test_wait_times_out_naming_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_jobs, "WAIT_POLL_S", 0.0)
    with pytest.raises(RequestError) as err:
        cli_jobs.wait_for(_FakeJobs(["pending"] * 1000), _job(1, "pending"), "scheduled", 0.0)  # type: ignore[arg-type]
    assert err.value.field == "--timeout" and "still pending" in err.value.reason


def test_a_job_file_gives_the_request_as_the_compact_string(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("request: 'A100:2 mem=20Gi'\ncommand: [x]\n")
    body = build_job((), None, str(job_file), {}, {})
    assert body.request is not None and body.request.to_request() == parse_spec("A100:2 mem=20Gi")
    job_file.write_text("request: 'A100 mem=24Gx'\ncommand: [x]\n")
    with pytest.raises(RequestError) as err:
        build_job((), None, str(job_file), {}, {})
    assert (err.value.field, err.value.value) == (f"{job_file}: request.devices.memory", "24Gx")


def test_submit_takes_retries_and_a_max_runtime(tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text("max_retries: 2\nretry_on: [exit_nonzero]\nmax_runtime_s: 120\n")
    body = build_job((), ["./train"], str(job_file), {}, {})
    assert body.max_retries == 2 and body.retry_on == [RetryCause.EXIT_NONZERO]
    assert body.max_runtime_s == 120
    result = CliRunner().invoke(
        main, ["submit", "--max-runtime", "soon", "--url", "http://127.0.0.1:9", "--", "true"]
    )
    assert result.exit_code != 0 and "--max-runtime" in result.output
    result = CliRunner().invoke(
        main, ["submit", "--retry-on", "exit_zero", "--url", "http://127.0.0.1:9", "--", "true"]
    )
    assert result.exit_code != 0 and "retry_on" in result.output
