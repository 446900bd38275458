"""The submit form in Chromium (issue 42): as you type it shows what a submission would refuse
(the server's verdict, not only the syntax), it takes an image, environment, priority and retries,
the job's page shows the environment back, and the catalog fieldset's legend sits on its border."""

from __future__ import annotations

import re
from typing import Any

from browser_kit import Pool, axe_violations, sign_in
from job_commands import JOB_PYTHON
from playwright.sync_api import expect
from server_proc import until


def test_the_form_says_as_you_type_what_a_submission_would_refuse(
    browser: Any, pool: Pool, axe_source: str
) -> None:
    """A well-formed request the pool could never hold, a priority above the queue's cap, an image
    no node of its cards can run: each is refused next to its field while typing, in the API's
    words."""
    team = pool.api("team")
    page = sign_in(browser, pool.url, pool.tokens["team"])
    page.goto("/submit")
    page.fill("#request", "L20:9")  # eight L20s a node: well-formed, never placeable
    api = team.post("/v1/jobs", json={"request": "L20:9", "command": ["true"]}).json()
    expect(page.locator("#request-error")).to_have_text(f"{api['field']}: {api['reason']}")
    assert "nothing in the pool can hold it" in api["reason"]
    assert page.get_attribute("#request", "aria-invalid") == "true"
    page.fill("#request", "L20:1")
    expect(page.locator("#request-error")).to_have_text("")
    assert page.get_attribute("#request", "aria-invalid") == "false"

    page.fill("#priority", "7")  # the tenant's queue takes priorities up to 0
    expect(page.locator("#priority-error")).to_contain_text("takes priorities up to 0")
    page.fill("#priority", "-1")
    expect(page.locator("#priority-error")).to_have_text("")

    page.fill("#image", "busybox:1")  # no node with L20s has a container runtime
    body = {"request": "L20:1", "image": "busybox:1", "priority": -1}
    api = team.post("/v1/jobs", json=body).json()
    assert api["field"] == "image", api
    expect(page.locator("#image-error")).to_have_text(f"image: {api['reason']}")
    assert axe_violations(page, axe_source) == []
    page.fill("#image", "")
    expect(page.locator("#image-error")).to_have_text("")
    before = len(team.get("/v1/jobs").json())
    page.fill("#name", "never-submitted")
    page.wait_for_timeout(500)  # the check after the last keystroke: it stores nothing
    assert len(team.get("/v1/jobs").json()) == before
    page.context.close()


def test_the_form_sends_image_env_priority_and_retries_and_the_job_shows_its_env(
    browser: Any, pool: Pool, axe_source: str
) -> None:
    team = pool.api("team")
    page = sign_in(browser, pool.url, pool.tokens["team"])
    page.goto("/submit")
    page.fill("#name", "env-job")
    page.fill("#request", "L20:1")
    page.fill(
        "#command",
        f"{JOB_PYTHON} -c \"import os; print('greeting:', os.environ['GREETING'], flush=True)\"",
    )
    page.fill("#env", "GREETING=hello from the form\nMODE=a=b")
    page.fill("#priority", "-2")
    page.fill("#max_retries", "1")
    page.fill("#retry_on", "exit_nonzero")
    page.click("#submit-job")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    job = team.get(f"/v1/jobs/{job_id}").json()
    assert job["env"] == {"GREETING": "hello from the form", "MODE": "a=b"}
    assert (job["priority"], job["max_retries"], job["retry_on"]) == (-2, 1, ["exit_nonzero"])
    env = page.locator("#job-env")
    expect(env.locator('tr[data-env="GREETING"] td')).to_have_text("hello from the form")
    expect(env.locator('tr[data-env="MODE"] td')).to_have_text("a=b")
    expect(page.locator("#log")).to_contain_text("greeting: hello from the form", timeout=30_000)
    assert axe_violations(page, axe_source) == []
    until(lambda: team.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded", "the job's end")
    page.context.close()


def test_the_catalog_legend_is_one_line_on_its_border(browser: Any, pool: Pool) -> None:
    """The fieldset's top border is drawn through the middle of its legend: a legend of two lines
    had one above the border and one below it, across the box's top. The legend is one line, inside
    the fieldset's width, and the explanation starts below it, inside the box."""
    page = sign_in(browser, pool.url, pool.tokens["team"])
    for width in (1200, 700):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto("/submit")
        box = page.evaluate(
            """() => {
              const legend = document.querySelector('form fieldset legend');
              const set = legend.closest('fieldset');
              const range = document.createRange();
              range.selectNodeContents(legend);
              const lines = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
              const l = legend.getBoundingClientRect(), f = set.getBoundingClientRect();
              const hint = document.getElementById('model-hint');
              const h = hint ? hint.getBoundingClientRect() : {top: 0, left: 0};
              return {lines: lines.size, l: [l.left, l.right, l.top, l.bottom],
                      f: [f.left, f.right], hint: [h.top, h.left]};
            }"""
        )
        assert box["lines"] == 1, (width, box)
        assert box["f"][0] < box["l"][0] and box["l"][1] < box["f"][1], (width, box)
        assert box["hint"][0] >= box["l"][3] and box["hint"][1] > box["f"][0], (width, box)
    page.context.close()
