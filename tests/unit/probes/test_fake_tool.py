"""The fake vendor tool changes a fake-probe file's card as the real tool changes the card: what
``nvidia-smi mig`` destroys and creates, and ``npu-smi``'s vNPUs, is what the fake probe reads
next; a creation the geometry refuses fails (exit 1) and leaves the file as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.probes.fake import FakeProbe
from xpupool.probes.fake_tool import FILE_ENV, main

FAKE = """\
devices:
  - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, memory: 80Gi, uuid_prefix: GPU-a,
     partitions: [3g.40gb@0, 2g.20gb@4, 1g.10gb@6]}
  - {vendor: huawei, model: 910B3, memory: 64Gi, uuid_prefix: NPU-b,
     partitions: [vir05_1c_16g, vir10_3c_32g]}
"""


def _layout(path: Path, card: str) -> list[str]:
    return [
        f"{d.partition}@{d.partition_start}" if d.partition_start is not None else str(d.partition)
        for d in FakeProbe(path).discover()
        if d.partition_of == card
    ]


def test_mig_and_vnpu_recuts_change_what_the_probe_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text(FAKE)
    monkeypatch.setenv(FILE_ENV, str(path))
    assert main(["nvidia-smi", "mig", "-i", "0", "-lgi"]) == 0
    assert "|   0  MIG 2g.20gb   0   5   4:2   |" in capsys.readouterr().out
    assert main(["nvidia-smi", "mig", "-i", "0", "-gi", "5,7", "-dci"]) == 0
    assert main(["nvidia-smi", "mig", "-i", "0", "-gi", "5,7", "-dgi"]) == 0
    assert _layout(path, "GPU-a-0") == ["3g.40gb@0"]
    before = path.read_text()
    assert main(["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb:2", "-C"]) == 1
    assert "cannot start at slice 2" in capsys.readouterr().err
    assert path.read_text() == before
    assert main(["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb:4", "-C"]) == 0
    assert _layout(path, "GPU-a-0") == ["3g.40gb@0", "3g.40gb@4"]
    assert FakeProbe(path).chip_of("NPU-b-0") == (1, 0)
    assert main(["npu-smi", "info", "-t", "info-vnpu", "-i", "1", "-c", "0"]) == 0
    assert "| 117 | vir10_3c_32g |" in capsys.readouterr().out
    assert main(["npu-smi", "set", "-t", "destroy-vnpu", "-i", "1", "-c", "0", "-v", "116"]) == 0
    assert (
        main(["npu-smi", "set", "-t", "create-vnpu", "-i", "1", "-c", "0", "-f", "vir10_3c_32g"])
        == 0
    )
    assert _layout(path, "NPU-b-0") == ["vir10_3c_32g", "vir10_3c_32g"]
