"""Re-cutting a partitioned card (admin only): ``PUT /v1/nodes/NODE/cards/UUID/layout``,
``xpupool node recut``. The plane's operation (``server/plane/card_recut.py``) checks, stores and
audits it; this module turns its answer into the API's view."""

from __future__ import annotations

from xpupool.catalog.partition_cards import layout_words
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.plane import card_recut as cr
from xpupool.server.schemas.card_layouts import CardEventView, CardLayoutIn, CardLayoutView

ASKED_BY_ADMIN = "asked by the admin"


def view(found: cr.CardLayout) -> CardLayoutView:
    return CardLayoutView(
        node=found.node,
        card=found.card,
        model=found.model,
        current=layout_words(found.current),
        busy=layout_words(found.busy),
        wanted=None if found.wanted is None else layout_words(found.wanted),
        why=found.why,
        asked_at=found.asked_at,
        job=found.job,
        events=[CardEventView(at=e.at, event=e.event, detail=e.detail) for e in found.events],
        failures=found.failures,
        resting_until=found.resting_until,
    )


def recut(
    plane: ControlPlane, node: str, card: str, body: CardLayoutIn, who: Principal | None
) -> CardLayoutView:
    return view(cr.recut(plane, node, card, body.layout, body.why or ASKED_BY_ADMIN, who))


def card_layout(plane: ControlPlane, node: str, card: str) -> CardLayoutView:
    return view(cr.card_layout(plane, node, card))
