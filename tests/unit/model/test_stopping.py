"""How a job asks to be stopped: durations and the checkpoint signal, refused naming the field."""

from __future__ import annotations

import signal

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.request_model import RequestModel
from xpupool.model.spec import format_spec, parse_spec
from xpupool.model.stopping import (
    format_duration,
    parse_checkpoint_signal,
    parse_duration,
    signal_number,
)


def test_durations_read_as_written_and_write_back_shortest() -> None:
    assert parse_duration("grace", "30s", 3600) == 30.0
    assert parse_duration("grace", 45, 3600) == 45.0
    assert parse_duration("min_run", "1.5h", 86400) == 5400.0
    assert [format_duration(s) for s in (30.0, 600.0, 5400.0, 0.5)] == ["30s", "10m", "90m", "0.5s"]


@pytest.mark.parametrize("value", ["0s", "2h", "30", "soon", True, -1])
def test_a_bad_grace_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(RequestError) as caught:
        parse_duration("grace", value, 3600)
    assert caught.value.field == "grace"


def test_checkpoint_signals_are_the_catchable_ones_but_term() -> None:
    assert parse_checkpoint_signal("checkpoint_signal", "sigusr1") == "USR1"
    assert signal_number("USR1") == int(signal.SIGUSR1)
    for bad in ("KILL", "STOP", "TERM", "USR3", ""):
        with pytest.raises(RequestError) as caught:
            parse_checkpoint_signal("checkpoint_signal", bad)
        assert caught.value.field == "checkpoint_signal"


def test_both_forms_carry_the_keys_into_the_one_request() -> None:
    req = parse_spec("A100 grace=30s checkpoint-signal=USR1 min-run=10m")
    assert (req.grace_s, req.checkpoint_signal, req.min_run_s) == (30.0, "USR1", 600.0)
    assert format_spec(req) == "A100 grace=30s checkpoint-signal=USR1 min-run=10m"
    body = {"grace": 30, "checkpoint_signal": "SIGUSR1", "min_run": "10m"}
    model = RequestModel.model_validate(body)
    assert model.to_request().checkpoint_signal == "USR1"
    assert model.dump() == {"grace": "30s", "checkpoint_signal": "USR1", "min_run": "10m"}
