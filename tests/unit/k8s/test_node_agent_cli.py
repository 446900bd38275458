"""``xpupool k8s agent``'s command line: bad input is one clear line naming the option, before
anything runs (the loop itself is tested in test_node_agent_loop.py and, as a process, in
tests/e2e/k8s/test_node_agent_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from xpupool.cli import main

FAKE = Path(__file__).parents[2] / "fixtures" / "agent" / "fake-a100x2.yaml"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["k8s", "agent", *args], env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ["Node_A", "-a", "a" * 254, "a..b", ""])
def test_a_node_name_that_kubernetes_refuses_is_refused(name: str) -> None:
    code, out = run(f"--node-name={name}", f"--fake={FAKE}")
    assert code == 2
    assert "--node-name" in out and "is not a Node name" in out


@pytest.mark.parametrize("listen", ["9400", "host:", ":9400", "h:0", "h:70000", "h:x"])
def test_a_bad_metrics_address_is_refused(listen: str) -> None:
    code, out = run("--node-name=gpu-a", f"--metrics={listen}")
    assert code == 2
    assert "--metrics" in out and "HOST:PORT" in out


def test_the_node_name_comes_from_the_downward_api_variable() -> None:
    code, out = run(f"--fake={FAKE}", env={"NODE_NAME": "Bad_Name"})
    assert code == 2 and "is not a Node name" in out


def test_without_a_kubeconfig_outside_a_pod_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out = run("--node-name=gpu-a", f"--fake={FAKE}")
    assert code == 1
    assert "cannot load the in-cluster service account" in out


@pytest.mark.parametrize(
    ("text", "why"), [("clusters: [", "while parsing"), ("a: 1\n", "missing 'clusters'")]
)
def test_a_broken_kubeconfig_is_one_line(tmp_path: Path, text: str, why: str) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    code, out = run("--node-name=gpu-a", f"--kubeconfig={bad}")
    assert code == 1
    assert out.startswith(f"Error: cannot load {bad}: ") and why in out
    assert out.count("\n") == 1


def test_hami_register_is_taken_and_goes_on_to_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The flag is wired (what it writes: test_hami_register.py and the agent's e2e test)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out = run("--node-name=gpu-a", "--hami-register", f"--fake={FAKE}")
    assert code == 1
    assert "cannot load the in-cluster service account" in out
