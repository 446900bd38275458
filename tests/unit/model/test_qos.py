"""QoS classes at the edge: the request key in both forms, its default, the priority a class
implies, and the refusal of a guaranteed job that says it is preemptible (issue 54 part 5)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from xpupool.model.errors import RequestError
from xpupool.model.qos import BEST_EFFORT_PRIORITY, QoS
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict, request_to_dict
from xpupool.model.spec import format_spec, parse_spec
from xpupool.model.validation import error_path
from xpupool.server.schemas.jobs import JobIn


def test_a_request_without_a_class_is_burstable_and_writes_none() -> None:
    req = request_from_dict("A100 mem=20Gi")
    assert req.qos is QoS.BURSTABLE
    assert "qos" not in request_to_dict(req)
    assert "qos" not in format_spec(req)


@pytest.mark.parametrize("form", ["A100 mem=20Gi qos=guaranteed", {"qos": "guaranteed"}])
def test_guaranteed_is_read_from_both_forms_and_keeps_priority_zero(form: object) -> None:
    req = request_from_dict(form)
    assert (req.qos, req.priority) == (QoS.GUARANTEED, 0)


def test_best_effort_takes_the_lowest_priority_unless_one_is_given() -> None:
    assert request_from_dict("A100 qos=best-effort").priority == BEST_EFFORT_PRIORITY
    assert request_from_dict({"qos": "best-effort", "priority": 5}).priority == 5


@pytest.mark.parametrize("qos", list(QoS))
def test_each_class_round_trips_through_json_and_the_compact_form(qos: QoS) -> None:
    req = request_from_dict({"devices": {"count": 1, "memory": "10Gi"}, "qos": qos.value})
    assert request_from_dict(request_to_dict(req)) == req
    assert parse_spec(format_spec(req)) == req


@pytest.mark.parametrize("form", ["A100 qos=gold", {"qos": "Guaranteed"}, {"qos": 1}])
def test_an_unknown_class_is_refused_naming_qos(form: object) -> None:
    with pytest.raises(RequestError) as exc:
        request_from_dict(form)
    assert exc.value.field == "qos"


def test_the_engine_record_refuses_an_unknown_class() -> None:
    with pytest.raises(RequestError) as exc:
        Request("r", qos="gold")  # type: ignore[arg-type]
    assert exc.value.field == "qos"


def test_a_preemptible_guaranteed_job_is_refused_naming_both() -> None:
    body = {"request": {"qos": "guaranteed"}, "command": ["true"], "preemptible": True}
    with pytest.raises(ValidationError) as exc:
        JobIn.model_validate(body)
    (error,) = exc.value.errors()
    assert error_path(error) == "preemptible"
    assert "qos" in str(error["msg"])
    JobIn.model_validate(body | {"request": {"qos": "best-effort"}})
