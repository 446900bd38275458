"""A trace task becomes a request through the request model, as every front's requests do."""

from __future__ import annotations

import pytest

from xpupool.model.request_model import RequestModel
from xpupool.sim.alibaba import TraceTask, to_request


@pytest.mark.parametrize(
    ("task", "form"),
    [
        (TraceTask("cpu", 4000, 8192, 0, 0, ()), {"cpu": "4", "memory": "8Gi"}),
        (
            TraceTask("slice", 500, 0, 1, 125, ("T4", "P100")),
            {"cpu": "500m", "devices": {"count": 1, "cores": "12.5%", "models": ["T4", "P100"]}},
        ),
        (TraceTask("whole", 0, 0, 4, 1000, ()), {"devices": {"count": 4}}),
    ],
)
def test_a_task_is_the_request_its_json_form_reads_to(
    task: TraceTask, form: dict[str, object]
) -> None:
    assert to_request(task) == RequestModel.model_validate({"name": task.name, **form}).to_request()


def test_tasks_of_one_shape_differ_only_in_name() -> None:
    a = to_request(TraceTask("a", 1000, 0, 1, 500, ("V100M16",)))
    b = to_request(TraceTask("b", 1000, 0, 1, 500, ("V100M16",)))
    assert (a.name, b.name) == ("a", "b") and a.devices is b.devices
