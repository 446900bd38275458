"""``xpupool k8s extender``'s TLS options: an incomplete set is one clear line naming the options,
before anything runs (serving with them is tests/e2e/k8s/test_extender_tls_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from xpupool.cli import main


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("--tls-cert",), "give --tls-cert and --tls-key together"),
        (("--tls-key",), "give --tls-cert and --tls-key together"),
        (("--client-ca",), "--client-ca needs --tls-cert and --tls-key"),
    ],
)
def test_tls_options_that_do_not_make_a_whole_are_refused(
    tmp_path: Path, given: tuple[str, ...], said: str
) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("not read before the check")
    args = [a for option in given for a in (option, str(pem))]
    result = CliRunner().invoke(main, ["k8s", "extender", "--kubeconfig", str(pem), *args])
    assert result.exit_code == 2, result.output
    assert said in result.output
