"""The usage page's energy series: the answer by ``site,model`` summed over the other label, per
bucket, most energy first."""

from __future__ import annotations

import pytest

from xpupool.server.schemas.usage import UsageAnswer
from xpupool.server.web.energy_usage import energy_over_time


def _answer(rows: list[tuple[float, str, str, float]]) -> UsageAnswer:
    return UsageAnswer.model_validate(
        {
            "step": "day",
            "by": ["site", "model"],
            "from": 0.0,
            "to": 3 * 86400.0,
            "rows": [
                {"start": start, "site": site, "model": model, "energy_j": kwh * 3.6e6}
                | {"device_seconds": 1.0, "gib_seconds": 0.0, "compute_unit_seconds": 0.0}
                for start, site, model, kwh in rows
            ],
        }
    )


def test_each_site_and_model_sums_the_other_label_per_bucket() -> None:
    answer = _answer(
        [
            (0.0, "beijing", "A100", 2.0),
            (0.0, "beijing", "T4", 0.5),
            (86400.0, "beijing", "A100", 1.0),
            (86400.0, "shanghai", "T4", 4.0),
            (86400.0, "shanghai", "L20", 0.0),  # held, no energy figure: not listed
        ]
    )
    sites = energy_over_time(answer, "site")
    assert [(s.name, s.kwh) for s in sites] == [("shanghai", 4.0), ("beijing", 3.5)]
    assert sites[1].spark.low == pytest.approx(1.0) and sites[1].spark.high == pytest.approx(2.5)
    models = energy_over_time(answer, "model")
    assert [(m.name, m.kwh) for m in models] == [("T4", 4.5), ("A100", 3.0)]
    assert models[0].spark.last == pytest.approx(4.0)  # the later bucket is drawn last


def test_no_rows_no_series() -> None:
    assert energy_over_time(_answer([]), "site") == []
