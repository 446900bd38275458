"""What the job routes answer: the job as the OpenAPI schema declares it (the routes write it
themselves, without FastAPI validating it again), and a compact request string is read once."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, node, submit, tenant

from xpupool.model.request_model import RequestModel
from xpupool.server.schemas.jobs import Job


def _job_schema(server: Server, method: str, path: str, status: str) -> str:
    doc = server.client.app.openapi()  # type: ignore[attr-defined]
    content = doc["paths"][path][method]["responses"][status]["content"]
    ref: str = content["application/json"]["schema"]["$ref"]
    return ref.rsplit("/", 1)[-1]


@pytest.mark.slow
def test_submit_get_and_cancel_answer_the_job_their_schema_declares(server: Server) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    assert _job_schema(server, "post", "/v1/jobs", "201") == "Job"
    assert _job_schema(server, "get", "/v1/jobs/{job_id}", "200") == "Job"
    assert _job_schema(server, "post", "/v1/jobs/{job_id}/cancel", "200") == "Job"
    properties = set(server.client.app.openapi()["components"]["schemas"]["Job"]["properties"])  # type: ignore[attr-defined]
    answers: list[dict[str, Any]] = []
    r = server.client.post(
        "/v1/jobs", json={"spec": "A100:1", "command": ["true"]}, headers=server.as_(lab)
    )
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    answers.append(r.json())
    job_id = r.json()["id"]
    for r in (
        server.client.get(f"/v1/jobs/{job_id}", headers=server.as_(lab)),
        server.client.post(f"/v1/jobs/{job_id}/cancel", headers=server.as_(lab)),
    ):
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        answers.append(r.json())
    for body in answers:
        assert set(body) == properties
        assert Job.model_validate(body).model_dump(mode="json", by_alias=True) == body
    assert [a["state"] for a in answers] == ["pending", "pending", "cancelled"]


def test_a_compact_request_is_read_once(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    reads: list[str] = []
    real = RequestModel.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[RequestModel], data: object, **kw: Any) -> RequestModel:
        if isinstance(data, str):
            reads.append(data)
        return real(cls, data, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(RequestModel, "model_validate", classmethod(counted))
    job = submit(server, lab, "A100 mem=8Gi cores=25%")
    assert reads == ["A100 mem=8Gi cores=25%"]
    assert job["request"]["devices"]["cores"] == "25%"
