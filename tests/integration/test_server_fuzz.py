"""Schema fuzzing (issue #5): schemathesis generates inputs from /openapi.json for every operation,
valid and invalid ones, and sends them to the app in-process (ASGI) with the admin token; no input
may produce a 5xx. Only the ``not_a_server_error`` check runs: 4xx for nonsense is the point.
Bounded to a few dozen examples per operation so that the file runs in well under a minute.

The operations are driven from one test (not ``schema.parametrize``), so that the app and its
plane are built in a fixture rather than at import time; a failure lists every operation that
gave a 5xx, with hypothesis' smallest example for each.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from server_proc import CLUSTER_MIXED

from xpupool.probes.cluster_file import load_cluster
from xpupool.server.app import create_app
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.tenants import TenantIn
from xpupool.server.services import fleet, tenants

EXAMPLES = {GenerationMode.POSITIVE: 25, GenerationMode.NEGATIVE: 15}


def test_no_input_gives_a_5xx(tmp_path: Path) -> None:
    plane = ControlPlane(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    token = tenants.ensure_admin_token(plane)
    assert token is not None
    fleet.register_many(plane, load_cluster(CLUSTER_MIXED), source="cluster")
    # something for ids and names to hit: a tenant with a job (fuzzed ids are mostly unknown)
    tenants.create_tenant(plane, TenantIn(name="t"))
    app = create_app(plane, background=False)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    for operation in operations:
        for mode, n in EXAMPLES.items():

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=n,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def check(case: schemathesis.Case) -> None:
                case.call_and_validate(headers=headers, checks=[not_a_server_error])

            try:
                check()
            except Unsatisfiable:
                pass  # no invalid input exists (an operation without parameters or body)
            except Exception as exc:  # collect every operation's failure, then report them all
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    plane.db.dispose()
    assert not failures, "\n\n".join(failures)
