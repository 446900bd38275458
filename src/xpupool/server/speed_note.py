"""What a job's admission event says about speed: the job's expected speed per card type and the
card type it was given (issue 55: "A100: 1.0x, 910B3: 0.7x (declared); on A100").

Only for jobs that carry speeds (``Request.speeds``); the text goes into the admission event's
reason, so ``xpupool events`` and the job's history show the choice next to what it was made from.
"""

from __future__ import annotations

from collections.abc import Sequence

from xpupool.catalog.throughput import CardSpeed, Source, describe
from xpupool.engine.engine import Engine
from xpupool.model import Allocation, Request


def speed_note(
    engine: Engine,
    req: Request,
    allocations: Sequence[Allocation],
    known: Sequence[CardSpeed] = (),
) -> str:
    """``"; speed V100: 1.0x, K80: 0.1x (declared); on V100 (1.0x)"``, or "" for a job without
    speeds. Speeds are ``known`` when the plane gave them (measured of the job's kind,
    ``server/throughput_knowledge.py``), else the job's own (``Source.DECLARED``)."""
    if not req.speeds:
        return ""
    best = max(s for _, s in req.speeds)
    rows = list(known) or sorted(
        (CardSpeed(m, s / best, Source.DECLARED) for m, s in req.speeds),
        key=lambda r: (-r.speed, r.model),
    )
    models = []
    for alloc in allocations:
        for share in alloc.devices:
            found = engine.device(share.uuid)
            if found is not None and found[1].model not in models:
                models.append(found[1].model)
    got = []
    for model in models:
        hit = next((r for r in rows if engine.catalog.matches(r.model, model)), None)
        got.append(f"{model} ({round(hit.speed, 2)}x)" if hit else model)
    return f"; speed {describe(rows)}; on {', '.join(got) or '-'}"
