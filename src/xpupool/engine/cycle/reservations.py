"""Reservations: cards held for a tenant or a named job in a time window, lent until it begins.

Slurm's advance reservations keep their nodes idle until the window opens; here the cards a
reservation holds work for others until then, so holding them costs little (issue 54 part 4).
A reservation picks its cards once, when it is made: where its shape would go on the empty pool
beside the reservations whose windows overlap it, so two overlapping reservations never hold the
same card and one the pool cannot hold beside the others is refused. Then, by the front's clock:

* before its window, its cards are lent: a job may be placed on them when it is preemptible (the
  front says which are) or when its declared run time ends before the window begins; any other
  job is kept off them (they are excluded from its request, as ``exclude_uuids`` would);
* when the window begins, the borrowers still on its cards are stopped (:meth:`Reservations.
  reclaims`), whatever their priority or minimum run time: they took the cards on that condition;
* inside the window, only jobs submitted into it (``reservation=NAME``, by its holder: the tenant
  or the job name it was made for) run on its cards, and they run only there;
* a job submitted into it waits for the window (:class:`ReservationAhead`), is refused once it
  has ended (:class:`ReservationClosed`: the front fails it), and one still running when it ends
  is stopped (:meth:`Reservations.overruns`): a reservation promises cards in a window, not
  beyond it, as Slurm's end its jobs;
* after the window its cards are anyone's.

The cycle calls :meth:`Reservations.constrain` in one place (``cycle.py``, before admission);
the fronts call :meth:`reclaims` and :meth:`overruns` at the window's edges and apply the stops.
No I/O, no clock of its own: the front's clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from xpupool.engine.cycle.work import PendingWork, RunningWork
from xpupool.engine.engine import Engine
from xpupool.engine.outcomes import (
    PreemptedByReservation,
    ReservationAhead,
    ReservationCause,
    ReservationClosed,
)
from xpupool.engine.txn import Transaction
from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.model.request import Request

MAX_NAME = 63
MAX_BARRED = 4096  # requests kept with reserved cards excluded (emptied when full)


@dataclass(frozen=True, slots=True)
class Reservation:
    """``shape`` (replicas x devices; its ``sites`` the site, if any) held for ``holder`` (a
    tenant, or a job name) from ``start_s`` until ``end_s``, in the front's clock (seconds)."""

    name: str
    holder: str
    shape: Request
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > MAX_NAME:
            raise RequestError("name", self.name, f"needs 1 to {MAX_NAME} characters")
        if not self.holder:
            raise RequestError("holder", self.holder, "name a tenant or a job")
        if self.shape.devices.count < 1:
            raise RequestError("cards", self.shape.devices.count, "reserve at least one card")
        if not self.end_s > self.start_s:
            raise RequestError("to", self.end_s, f"must be after the start ({self.start_s:g})")

    def overlaps(self, other: Reservation) -> bool:
        return self.start_s < other.end_s and other.start_s < self.end_s


@dataclass(frozen=True, slots=True)
class Terms:
    """What the book needs to know of a job: the reservation it was submitted into (None: none),
    its tenant and name (one of them must be the reservation's holder), whether it may be stopped
    when a window it borrows from begins, and its declared run time in seconds (None: unknown)."""

    reservation: str | None
    tenant: str
    name: str
    preemptible: bool
    max_run_s: float | None


@dataclass(frozen=True, slots=True)
class Within:
    """A pending job seen through its reservation terms: its request with the reserved cards it
    may not use excluded, or narrowed to its own reservation's cards."""

    job: PendingWork
    request: Request

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def priority(self) -> int:
        return self.job.priority

    @property
    def waiting_on(self) -> set[int]:
        return self.job.waiting_on


class Reservations:
    """The reservations of one pool and the cards each holds (by UUID: they outlive an engine
    rebuilt over the same pool).

    ``clock()`` is the front's time in seconds; ``terms(job_id)`` its :class:`Terms`. With
    ``lend`` False the cards are held idle until the window begins, as Slurm holds them (the
    simulator's reference for what lending saves)."""

    def __init__(
        self,
        clock: Callable[[], float],
        terms: Callable[[int], Terms],
        lend: bool = True,
    ) -> None:
        self.clock = clock
        self.terms = terms
        self.lend = lend
        self._held: dict[str, tuple[Reservation, tuple[str, ...]]] = {}
        self._barred: dict[tuple[Request, tuple[str, ...]], Request] = {}

    def __iter__(self) -> Iterator[Reservation]:
        return iter(r for r, _ in self._held.values())

    def __len__(self) -> int:
        return len(self._held)

    def get(self, name: str) -> Reservation | None:
        held = self._held.get(name)
        return None if held is None else held[0]

    def cards(self, name: str) -> tuple[str, ...]:
        """The UUIDs ``name`` holds, in the order they were picked."""
        held = self._held.get(name)
        if held is None:
            raise NotFound("reservation", name)
        return held[1]

    def add(self, reservation: Reservation, engine: Engine) -> tuple[str, ...]:
        """Hold cards of ``engine``'s pool for ``reservation`` and return their UUIDs; see
        :meth:`check` for the refusals."""
        cards = self.check(reservation, engine)
        self._held[reservation.name] = (reservation, cards)
        return cards

    def restore(self, reservation: Reservation, cards: tuple[str, ...]) -> None:
        """Hold ``cards`` for ``reservation`` as picked before (a front reading its store)."""
        self._held[reservation.name] = (reservation, cards)

    def check(self, reservation: Reservation, engine: Engine) -> tuple[str, ...]:
        """The cards :meth:`add` would hold for ``reservation``; changes nothing. Refused with a
        :class:`RequestError` naming the field: ``from`` in the past, ``cards`` when the pool,
        empty but for the reservations overlapping its window, cannot hold its shape; a
        :class:`Conflict` when the name is taken."""
        if reservation.name in self._held:
            raise Conflict(f"reservation {reservation.name!r} already exists")
        if reservation.start_s < self.clock():
            raise RequestError("from", reservation.start_s, "the window begins in the past")
        taken = tuple(
            uuid
            for other, uuids in self._held.values()
            if other.overlaps(reservation)
            for uuid in uuids
        )
        cards = _pick(engine, reservation.shape, taken)
        if cards is None:
            overlapping = sorted(o.name for o, _ in self._held.values() if o.overlaps(reservation))
            beside = f" beside {', '.join(overlapping)}" if overlapping else ""
            raise RequestError(
                "cards", reservation.shape.devices.count, f"the pool cannot hold it{beside}"
            )
        return cards

    def remove(self, name: str) -> Reservation:
        """Forget ``name``: its cards are anyone's from now on."""
        held = self._held.pop(name, None)
        if held is None:
            raise NotFound("reservation", name)
        return held[0]

    def lent_by(self, uuids: Iterable[str]) -> Reservation | None:
        """The reservation, its window still ahead, that lends any of ``uuids`` (the first made
        when several do); None when none is lent: what a front tells the borrower."""
        now = self.clock()
        wanted = set(uuids)
        for reservation, cards in self._held.values():
            if now < reservation.start_s and wanted.intersection(cards):
                return reservation
        return None

    def edges(self) -> list[float]:
        """Every window's start and end, sorted: the times a front must run a pass at."""
        return sorted({t for r, _ in self._held.values() for t in (r.start_s, r.end_s)})

    def constrain(self, job_id: int, req: Request) -> Request | ReservationCause:
        """``req`` as the job may be placed now (``req`` itself when no reservation touches it),
        or why it may not run now. See the module docstring for the rules."""
        now = self.clock()
        terms = self.terms(job_id)
        if terms.reservation is not None:
            return self._inside(terms, req, now)
        if req.devices.count == 0:  # no cards: a reservation holds cards, not CPU or memory
            return req
        barred: list[str] = []
        for reservation, uuids in self._held.values():
            if now >= reservation.end_s:
                continue
            if now < reservation.start_s and self.lend and _may_borrow(terms, now, reservation):
                continue
            barred.extend(uuids)
        if not barred:
            return req
        key = (req, tuple(barred))
        known = self._barred.get(key)
        if known is None:  # a request is validated when made: made once per shape and cards
            if len(self._barred) >= MAX_BARRED:
                self._barred.clear()
            devices = replace(req.devices, exclude_uuids=(*req.devices.exclude_uuids, *barred))
            known = self._barred[key] = replace(req, devices=devices)
        return known

    def _inside(self, terms: Terms, req: Request, now: float) -> Request | ReservationCause:
        name = terms.reservation
        assert name is not None
        held = self._held.get(name)
        if held is None:
            return ReservationClosed(name, "is unknown")
        reservation, uuids = held
        if reservation.holder not in (terms.tenant, terms.name):
            return ReservationClosed(name, f"is held for {reservation.holder}")
        if now >= reservation.end_s:
            return ReservationClosed(name, "has ended")
        if now < reservation.start_s:
            return ReservationAhead(name, reservation.start_s)
        if req.devices.count == 0:  # no cards to narrow: it runs in the window, anywhere
            return req
        own = req.devices.uuids
        cards = tuple(u for u in uuids if u in own) if own else uuids
        return replace(req, devices=replace(req.devices, uuids=cards))

    def reclaims(
        self, running: Mapping[int, RunningWork]
    ) -> list[tuple[RunningWork, PreemptedByReservation]]:
        """The running jobs to stop now because a window that has begun holds cards they
        borrowed (each once, with the first such reservation), in ``running``'s order."""
        now = self.clock()
        open_cards = {
            uuid: reservation.name
            for reservation, uuids in self._held.values()
            if reservation.start_s <= now < reservation.end_s
            for uuid in uuids
        }
        if not open_cards:
            return []
        stops: list[tuple[RunningWork, PreemptedByReservation]] = []
        for job in running.values():
            if job.stopping:
                continue
            own = self.terms(job.id).reservation
            for uuid in (u for a in job.allocations for u in a.device_uuids):
                name = open_cards.get(uuid)
                if name is not None and name != own:
                    stops.append((job, PreemptedByReservation(name)))
                    break
        return stops

    def overruns(
        self, running: Mapping[int, RunningWork]
    ) -> list[tuple[RunningWork, ReservationClosed]]:
        """The running jobs of reservations whose window has ended: they run only inside it."""
        now = self.clock()
        stops: list[tuple[RunningWork, ReservationClosed]] = []
        for job in running.values():
            name = self.terms(job.id).reservation
            if name is None or job.stopping:
                continue
            held = self._held.get(name)
            if held is None or now >= held[0].end_s:
                stops.append((job, ReservationClosed(name, "has ended")))
        return stops


def _pick(engine: Engine, shape: Request, taken: tuple[str, ...]) -> tuple[str, ...] | None:
    """The cards ``shape`` would take on ``engine``'s pool emptied, ``taken`` excluded; None when
    it does not fit. A what-if: every live allocation is given back, then put back."""
    state = engine.state
    devices = replace(shape.devices, exclude_uuids=(*shape.devices.exclude_uuids, *taken))
    with Transaction(state) as trial:  # rolled back on leaving
        for alloc_id in list(state.live):
            trial.release(alloc_id)
        placement = engine.place(replace(shape, devices=devices), txn=trial)
        if not placement.ok:
            return None
        return tuple(u for a in placement.allocations for u in a.device_uuids)


def _may_borrow(terms: Terms, now: float, reservation: Reservation) -> bool:
    """Before ``reservation``'s window: a preemptible job (stopped when it begins), or one whose
    declared run time ends before it begins."""
    if terms.preemptible:
        return True
    return terms.max_run_s is not None and now + terms.max_run_s <= reservation.start_s
