"""The client's records of the fleet (client/_views.py) mirror the server's wire types field for
field, so a field added to a schema and not to its record is seen here, not by a user whose table
lacks it; and a record reads what the server itself sends."""

from __future__ import annotations

from dataclasses import fields

import pytest
from pydantic import BaseModel

from xpupool.client import _views
from xpupool.server.schemas.agent_protocol import DeviceAssignment, DeviceMetrics, ReplicaAssignment
from xpupool.server.schemas.devices import Device
from xpupool.server.schemas.jobs import FINAL_STATES, Job, JobEvent, JobPhase
from xpupool.server.schemas.nodes import Node, Site, SiteDomain, TaintView
from xpupool.server.schemas.queues import Queue, QuotaResource, QuotaUsage

PAIRS: list[tuple[type, type[BaseModel]]] = [
    (_views.NodeView, Node),
    (_views.TaintView, TaintView),
    (_views.DeviceView, Device),
    (_views.DeviceMetricsView, DeviceMetrics),
    (_views.SiteView, Site),
    (_views.SiteDomainView, SiteDomain),
    (_views.QueueView, Queue),
    (_views.QuotaUsageView, QuotaUsage),
    (_views.JobView, Job),
    (_views.JobEventView, JobEvent),
    (_views.ReplicaAssignmentView, ReplicaAssignment),
    (_views.DeviceAssignmentView, DeviceAssignment),
]


@pytest.mark.parametrize(("record", "schema"), PAIRS, ids=[s.__name__ for _, s in PAIRS])
def test_each_record_has_the_fields_of_its_schema(record: type, schema: type[BaseModel]) -> None:
    names = {f.name for f in fields(record)} - {"raw"}
    assert names == set(schema.model_fields)


def test_the_enumerations_are_the_schemas() -> None:
    assert set(_views.QUOTA_RESOURCES) == {r.value for r in QuotaResource}
    assert tuple(p.value for p in JobPhase) == _views.JOB_STATES
    assert {p.value for p in FINAL_STATES} == _views.FINAL_JOB_STATES


def test_a_record_reads_the_servers_own_dump() -> None:
    node = Node(
        name="n", site="s", status="ready", schedulable=True, source="agent", cpu_milli=1,
        memory_mib=2, cpu_allocated_milli=0, memory_allocated_mib=0, labels={"a": "b"},
        arch="x86_64", os="linux", devices=1, devices_free=1, last_heartbeat=5,
        taints=[TaintView(key="k", effect="NoSchedule")],
    )  # fmt: skip
    dumped = node.model_dump(mode="json")
    view = _views.NodeView.read(dumped)
    assert view.raw == dumped
    assert {f.name: getattr(view, f.name) for f in fields(view) if f.name != "raw"} == {
        **dumped,
        "last_heartbeat": 5.0,
        "taints": (_views.TaintView("k", "", "NoSchedule"),),
    }
