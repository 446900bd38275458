"""Reads of the usage rollups: ``GET /v1/usage`` and the month's CSV export (issue 52).

Answers come from the hourly, daily and monthly rollups (``storage/usage.py``), never from the
records, so a month of a fleet is one row per label set whatever the number of runs. A tenant
reads its own rows only; the admin every tenant's, ``pool`` included. Every bad parameter is a
:class:`RequestError` naming it (422).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import func, select

from xpupool.model.errors import RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.usage import UsageAnswer, UsageRow
from xpupool.server.storage.usage import LABELS, SUMS, usage_rollups
from xpupool.server.usage.buckets import month_start

MAX_BUCKETS = 5000
"""Buckets one answer may span (an hourly query over about 7 months)."""
CSV_COLUMNS = (
    "month",
    "tenant",
    "queue",
    "site",
    "model",
    "device_hours",
    "device_memory_gib_hours",
    "compute_unit_hours",
    "energy_kwh",
    "cost",
)
"""The export's header, in order (docs/usage.md); ``cost`` empty while no price table is set."""
_ANSWER_SUMS = ("device_seconds", "gib_seconds", "compute_unit_seconds", "energy_j")
_PRICED = (*SUMS, "cost")  # the rollups' cost: at the prices in force as each part was used
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def parse_by(text: str) -> list[str]:
    """``tenant,queue,site,model`` (any of them, any order, once each); empty: the total."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part not in LABELS:
            raise RequestError("by", text, f"unknown label {part!r}; use {', '.join(LABELS)}")
        if part in out:
            raise RequestError("by", text, f"{part!r} given twice")
        out.append(part)
    return out


def parse_time(field: str, text: str) -> float:
    """Unix seconds, or an ISO 8601 time or date (UTC when no zone is given)."""
    try:
        value = float(text)
    except ValueError:
        try:
            when = datetime.fromisoformat(text.strip())
        except ValueError:
            raise RequestError(
                field, text, "expected Unix seconds or an ISO time such as 2026-11-01T00:00:00Z"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        value = when.timestamp()
    if not math.isfinite(value) or not 0 <= value < 1e11:
        raise RequestError(field, text, "out of range")
    return value


def usage(
    plane: ControlPlane,
    who: Principal,
    by: str,
    start: str | None,
    end: str | None,
    step: str,
) -> UsageAnswer:
    """Sums per ``step`` bucket and per the ``by`` labels over [``start``, ``end``) (default:
    the last 30 days up to now)."""
    if step not in ("hour", "day", "month"):
        raise RequestError("step", step, "expected hour, day or month")
    labels = parse_by(by)
    to = plane.clock() if end is None else parse_time("to", end)
    frm = to - 30 * 86400.0 if start is None else parse_time("from", start)
    if not frm < to:
        raise RequestError("from", start, "must be before to")
    width = {"hour": 3600.0, "day": 86400.0, "month": 28 * 86400.0}[step]
    if (to - frm) / width > MAX_BUCKETS:
        raise RequestError("from", start, f"more than {MAX_BUCKETS} {step}s; ask coarser steps")
    frm = month_start(frm) if step == "month" else math.floor(frm / width) * width
    priced = plane.billing.priced(plane)
    rows = _read(plane, who, labels, step, frm, to, sums=_PRICED if priced else SUMS)
    answer = [
        UsageRow.model_validate(
            {"start": bucket, **dict(zip(labels, names, strict=True))}
            | dict(zip(_ANSWER_SUMS, sums[: len(SUMS)], strict=True))
            | ({"cost": sums[len(SUMS)]} if priced else {})
        )
        for bucket, names, sums in rows
    ]
    currency = plane.billing.prices(plane).currency if priced else None
    return UsageAnswer.model_validate(
        {"step": step, "by": labels, "from": frm, "to": to, "rows": answer, "currency": currency}
    )


Row = tuple[float, tuple[str, ...], list[float]]  # (bucket, labels asked for, sums)


def _read(
    plane: ControlPlane,
    who: Principal,
    labels: Sequence[str],
    step: str,
    frm: float,
    to: float,
    whole: bool = False,
    sums: Sequence[str] = SUMS,
) -> list[Row]:
    """Sums (the rollup columns ``sums``) of ``step`` rollups in [``frm``, ``to``) per bucket and
    ``labels`` (``whole``: over the whole range, the bucket given as ``frm``); a tenant's own
    rows only."""
    t = usage_rollups
    columns = [t.c[name] for name in labels]
    keys = columns if whole else [t.c.bucket, *columns]
    query = (
        select(*keys, *(func.sum(t.c[name]) for name in sums))
        .where(t.c.step == step, t.c.bucket >= frm, t.c.bucket < to)
        .group_by(*keys)
        .order_by(*keys)
    )
    if not who.is_admin:
        query = query.where(t.c.tenant == (who.tenant or ""))
    n = len(labels)
    with plane.db.connect() as conn:
        found = conn.execute(query).all()
    if whole:
        return [(frm, tuple(str(x) for x in r[:n]), [float(v) for v in r[n:]]) for r in found]
    return [
        (float(r[0]), tuple(str(x) for x in r[1 : 1 + n]), [float(v) for v in r[1 + n :]])
        for r in found
    ]


def export_csv(plane: ControlPlane, who: Principal, month: str) -> str:
    """The month's CSV: :data:`CSV_COLUMNS`, one row per tenant, queue, site and model, hours
    and kWh (decimal, 6 places), sorted; a tenant's export holds its own rows only."""
    found = _MONTH.match(month)
    if found is None or not 1 <= int(found.group(2)) <= 12 or int(found.group(1)) < 1970:
        raise RequestError("month", month, "expected YYYY-MM (1970 or later) such as 2026-11")
    frm = datetime(int(found.group(1)), int(found.group(2)), 1, tzinfo=UTC).timestamp()
    priced = plane.billing.priced(plane)
    read = _read(plane, who, LABELS, "month", frm, frm + 1, True, _PRICED if priced else SUMS)
    totals = {names: sums for _b, names, sums in read}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for key in sorted(totals):
        device_s, gib_s, cu_s, joules = totals[key][: len(SUMS)]
        hours = (device_s / 3600, gib_s / 3600, cu_s / 3600, joules / 3.6e6)
        cost = f"{totals[key][len(SUMS)]:.6f}" if priced else ""
        writer.writerow([month, *key, *(f"{v:.6f}" for v in hours), cost])
    return out.getvalue()
