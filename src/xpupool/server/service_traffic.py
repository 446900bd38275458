"""What the service proxy saw: requests in flight per service and per endpoint (the controller
scales and drains on them), requests per second and p99 latency over the last minute (``xpupool
services``), and the Prometheus series of ``/metrics`` (:class:`TrafficCollector`).

The proxy's own process (``up --proxy-port``) counts its own requests and sends
:meth:`ProxyTraffic.report` with each snapshot poll (``front/proxy_source.py``); the plane adds
the latest report of each such reporter (:meth:`ProxyTraffic.take`) to what it counted itself, so
the controller sees its requests one poll interval late at most, and a reporter silent for
:data:`REPORT_FRESH_S` (gone) no more. A report also carries the reporter's totals since it started
(answers by status, latency histogram); the plane adds what grew since that reporter's previous
report to its own totals, so
``/metrics`` counts every request whichever process answered it, a report taken twice counts
once, and a lost one is made up by the next. A report is untrusted input: every field is
checked and bounded before any of it is taken (:class:`ReportError`).

Everything is counted on the proxy's event loop, one thread, so no lock: the scrape and the
controller read plain integers another thread may be moving, which is as good as a scrape gets.
The minute is a ring of per-second buckets, each with a coarse latency histogram (log-spaced,
about 10 % wide), so a p99 costs one merge of 60 small arrays, not a sort of every request.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from xpupool.server.service_endpoints import Endpoint, Traffic

WINDOW_S = 60  # the minute rate() and p99 are over
REPORT_FRESH_S = 2.0  # a reporter's report older than this is dropped (it is gone)
TOTALS_KEEP_S = 600.0  # a reporter's last totals are kept this long after its last report
MAX_WORKERS = 256  # reporters whose last totals are kept (the oldest go first)
MAX_REPORTED = 10_000  # services, and endpoints, one report may name
MAX_COUNT = 1 << 53  # a count past this is no proxy's
MAX_NAME = 255  # a tenant's, service's or host's name, characters
_RATIO = 1.1  # one latency bucket's upper bound over its lower one
_FLOOR_MS = 0.05  # latencies below this share the first bucket
_BINS = int(math.log(120_000 / _FLOOR_MS) / math.log(_RATIO)) + 2  # up to two minutes, then one
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
Key = tuple[str, str]  # (tenant, service)


def _bin(ms: float) -> int:
    if ms <= _FLOOR_MS:
        return 0
    return min(int(math.log(ms / _FLOOR_MS) / math.log(_RATIO)) + 1, _BINS - 1)


def _bin_upper_ms(i: int) -> float:
    return _FLOOR_MS * _RATIO**i


@dataclass(slots=True)
class _Second:
    at: int = -1  # which whole second (monotonic) this bucket holds
    count: int = 0
    bins: Counter[int] = field(default_factory=Counter)


@dataclass(slots=True)
class _Service:
    """One service's counts: the ring of the last minute and the totals since start."""

    in_flight: int = 0
    ring: list[_Second] = field(default_factory=lambda: [_Second() for _ in range(WINDOW_S)])
    codes: Counter[int] = field(default_factory=Counter)  # status -> answers since start
    buckets: list[int] = field(default_factory=lambda: [0] * len(SECONDS_BUCKETS))
    seconds_sum: float = 0.0
    seconds_count: int = 0

    def totals(self) -> _Totals:
        return _Totals(
            Counter(self.codes), tuple(self.buckets), self.seconds_sum, self.seconds_count
        )

    def add(self, grown: _Totals) -> None:
        self.codes.update(grown.codes)
        self.buckets = [a + b for a, b in zip(self.buckets, grown.buckets, strict=True)]
        self.seconds_sum += grown.seconds_sum
        self.seconds_count += grown.seconds_count


@dataclass(frozen=True, slots=True)
class _Totals:
    """A proxy's totals for one service since it started: answers by status, the latency
    histogram's buckets (:data:`SECONDS_BUCKETS`, not cumulative), their sum and count."""

    codes: Counter[int]
    buckets: tuple[int, ...]
    seconds_sum: float
    seconds_count: int

    def wire(self) -> dict[str, object]:
        return {
            "codes": sorted(self.codes.items()),
            "buckets": list(self.buckets),
            "sum": self.seconds_sum,
            "count": self.seconds_count,
        }

    def since(self, last: _Totals | None) -> _Totals:
        """What was counted after ``last`` (the same reporter's previous totals); all of these
        when a count went down (the reporter started again under the same name)."""
        if last is None or (
            any(self.codes[c] < n for c, n in last.codes.items())
            or any(a < b for a, b in zip(self.buckets, last.buckets, strict=True))
            or self.seconds_count < last.seconds_count
            or self.seconds_sum < last.seconds_sum
        ):
            return self
        return _Totals(
            self.codes - last.codes,
            tuple(a - b for a, b in zip(self.buckets, last.buckets, strict=True)),
            self.seconds_sum - last.seconds_sum,
            self.seconds_count - last.seconds_count,
        )


@dataclass(frozen=True, slots=True)
class _Report:
    """What one proxy process counted, as it last said (:meth:`ProxyTraffic.report`)."""

    at: float
    in_flight: dict[Key, int]
    minute: dict[Key, tuple[int, Counter[int]]]  # requests in the last minute, latency bins
    endpoints: Counter[Endpoint]
    totals: dict[Key, _Totals]


class ReportError(ValueError):
    """A reporter's report that breaks its format (nothing of it is taken)."""


class ProxyTraffic(Traffic):
    """The proxy's counts; ``monotonic``: the clock seconds are bucketed by."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self._services: dict[Key, _Service] = {}
        self._endpoints: Counter[Endpoint] = Counter()
        self._reports: dict[str, _Report] = {}  # reporter -> its last report
        self._totals: dict[str, tuple[float, dict[Key, _Totals]]] = {}  # reporter -> when, totals

    # ------------------------------------------------------------------ the proxy process
    def report(self) -> dict[str, object]:
        """This proxy's counts as JSON, for the plane (:meth:`take`)."""
        services = []
        for (tenant, service), svc in self._services.items():
            total, bins = self._minute(svc)
            totals = svc.totals().wire()
            services.append([tenant, service, svc.in_flight, total, sorted(bins.items()), totals])
        endpoints = [[e.job_id, e.replica, e.host, e.port, n] for e, n in self._endpoints.items()]
        return {"services": services, "endpoints": endpoints}

    def take(self, worker: str, report: object, known: Container[Key] | None = None) -> None:
        """Keep ``worker``'s ``report`` in place of its last, and add to the totals what grew
        since its last; :class:`ReportError`, with nothing taken, when it breaks the format of
        :meth:`report` or its bounds. ``known``: the services that exist; what the report says
        of others (deleted, or never created) is left out, so a reporter cannot make the plane
        keep series for any number of names."""
        try:
            taken = _parse(report)
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"traffic report: {exc}") from None
        in_flight, minute, endpoints, totals = taken
        if known is not None:
            in_flight = {k: v for k, v in in_flight.items() if k in known}
            minute = {k: v for k, v in minute.items() if k in known}
            totals = {k: v for k, v in totals.items() if k in known}
        now = self.monotonic()
        self._reports[worker] = _Report(now, in_flight, minute, endpoints, totals)
        for gone in [w for w, r in self._reports.items() if now - r.at > REPORT_FRESH_S]:
            del self._reports[gone]
        _, last = self._totals.pop(worker, (now, {}))
        for key, grown in totals.items():
            self._of(*key).add(grown.since(last.get(key)))
        self._totals[worker] = (now, totals)  # the newest last: the oldest are first to go
        for gone in [w for w, (at, _) in self._totals.items() if now - at > TOTALS_KEEP_S]:
            del self._totals[gone]
        while len(self._totals) > MAX_WORKERS:
            del self._totals[next(iter(self._totals))]

    def _fresh(self) -> list[_Report]:
        now = self.monotonic()
        return [r for r in self._reports.values() if now - r.at <= REPORT_FRESH_S]

    def _of(self, tenant: str, service: str) -> _Service:
        found = self._services.get((tenant, service))
        if found is None:
            found = self._services[(tenant, service)] = _Service()
        return found

    # ------------------------------------------------------------------ the proxy's side
    def started(self, tenant: str, service: str, endpoint: Endpoint | None) -> None:
        """A request is being forwarded (``endpoint`` None: not yet placed on one)."""
        self._of(tenant, service).in_flight += 1
        if endpoint is not None:
            self._endpoints[endpoint] += 1

    def moved(self, old: Endpoint | None, new: Endpoint | None) -> None:
        """The request in flight left ``old`` for ``new`` (a retry after a refused connection)."""
        if old is not None:
            self._endpoint_done(old)
        if new is not None:
            self._endpoints[new] += 1

    def finished(
        self,
        tenant: str,
        service: str,
        endpoint: Endpoint | None,
        status: int,
        seconds: float | None,
    ) -> None:
        """The request's answer was sent in full, or the client went away (``status`` as sent,
        499 when it went away before an answer started). ``seconds`` None: not a latency (a
        websocket, open as long as its two sides like), counted but not timed."""
        svc = self._of(tenant, service)
        svc.in_flight -= 1
        if endpoint is not None:
            self._endpoint_done(endpoint)
        svc.codes[status] += 1
        if seconds is None:
            return
        svc.seconds_sum += seconds
        svc.seconds_count += 1
        for i, bound in enumerate(SECONDS_BUCKETS):
            if seconds <= bound:
                svc.buckets[i] += 1
                break
        now = int(self.monotonic())
        second = svc.ring[now % WINDOW_S]
        if second.at != now:
            second.at, second.count = now, 0
            second.bins.clear()
        second.count += 1
        second.bins[_bin(seconds * 1000.0)] += 1

    def _endpoint_done(self, endpoint: Endpoint) -> None:
        left = self._endpoints[endpoint] - 1
        if left > 0:
            self._endpoints[endpoint] = left
        else:
            del self._endpoints[endpoint]

    # ------------------------------------------------------------------ Traffic
    def in_flight(self, tenant: str, service: str) -> int:
        found = self._services.get((tenant, service))
        workers = sum(r.in_flight.get((tenant, service), 0) for r in self._fresh())
        return workers + (0 if found is None else found.in_flight)

    def in_flight_at(self, endpoint: Endpoint) -> int:
        return self._endpoints.get(endpoint, 0) + sum(
            r.endpoints.get(endpoint, 0) for r in self._fresh()
        )

    def _minute(self, svc: _Service) -> tuple[int, Counter[int]]:
        now = int(self.monotonic())
        seconds = [s for s in svc.ring if now - WINDOW_S < s.at <= now]
        merged: Counter[int] = Counter()
        for s in seconds:
            merged.update(s.bins)
        return sum(s.count for s in seconds), merged

    def rate(self, tenant: str, service: str) -> tuple[float, float | None]:
        found = self._services.get((tenant, service))
        total, merged = (0, Counter[int]()) if found is None else self._minute(found)
        for r in self._fresh():
            count, bins = r.minute.get((tenant, service), (0, Counter[int]()))
            total += count
            merged.update(bins)
        if total == 0:
            return 0.0, None
        rank = math.ceil(total * 0.99)
        seen = 0
        for i in sorted(merged):
            seen += merged[i]
            if seen >= rank:
                return total / WINDOW_S, round(_bin_upper_ms(i), 3)
        return total / WINDOW_S, None  # not reached: the bins hold ``total`` requests

    def services(self) -> list[tuple[Key, _Service]]:
        return list(self._services.items())

    def keep_only(self, known: Container[Key]) -> None:
        """Counts of deleted services (not in ``known``, nothing in flight) go: a tenant that
        makes and deletes services in a loop must not grow the plane's memory and ``/metrics``
        for ever. A worker's last totals stay, so that a service made again under the name
        counts only what grows after."""
        for key in [
            k for k, svc in self._services.items() if k not in known and svc.in_flight <= 0
        ]:
            del self._services[key]


class TrafficCollector(Collector):
    """The proxy's series on ``/metrics``, read from the plane's traffic at scrape time."""

    def __init__(self, traffic: Callable[[], Traffic]) -> None:
        self.traffic = traffic

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        traffic = self.traffic()
        if not isinstance(traffic, ProxyTraffic):
            return
        labels = ["tenant", "service"]
        total = CounterMetricFamily(
            "xpupool_service_requests",
            "Requests the service proxy answered, by service and status (499: the client went "
            "away first).",
            labels=[*labels, "code"],
        )
        seconds = HistogramMetricFamily(
            "xpupool_service_request_seconds",
            "From a proxied request's arrival to its answer's last byte.",
            labels=labels,
        )
        flight = GaugeMetricFamily(
            "xpupool_service_in_flight",
            "Requests forwarded to the service and not yet answered in full.",
            labels=labels,
        )
        for (tenant, service), svc in traffic.services():
            for code, n in sorted(svc.codes.items()):
                total.add_metric([tenant, service, str(code)], n)
            cumulative, running = [], 0
            for bound, n in zip(SECONDS_BUCKETS, svc.buckets, strict=True):
                running += n
                cumulative.append((str(bound), running))
            cumulative.append(("+Inf", svc.seconds_count))
            seconds.add_metric([tenant, service], cumulative, svc.seconds_sum)
            flight.add_metric([tenant, service], traffic.in_flight(tenant, service))
        yield total
        yield seconds
        yield flight


Parsed = tuple[
    dict[Key, int], dict[Key, tuple[int, Counter[int]]], Counter[Endpoint], dict[Key, _Totals]
]


def _parse(report: object) -> Parsed:
    """A worker's report (:meth:`ProxyTraffic.report`) read whole, or an exception naming what
    breaks it; nothing is kept from a report that breaks it."""
    assert isinstance(report, dict), "not an object"
    services, reported = report["services"], report["endpoints"]
    assert isinstance(services, list) and len(services) <= MAX_REPORTED, "services: a list"
    assert isinstance(reported, list) and len(reported) <= MAX_REPORTED, "endpoints: a list"
    in_flight: dict[Key, int] = {}
    minute: dict[Key, tuple[int, Counter[int]]] = {}
    totals: dict[Key, _Totals] = {}
    for tenant, service, flying, total, bins, grown in services:
        key = (_name(tenant), _name(service))
        assert key not in in_flight, f"service {key} twice"
        assert isinstance(bins, list) and len(bins) <= _BINS, "bins: a list"
        in_flight[key] = _count(flying)
        minute[key] = (_count(total), Counter({_index(i, _BINS): _count(n) for i, n in bins}))
        totals[key] = _totals(grown)
    endpoints: Counter[Endpoint] = Counter()
    for job_id, replica, host, port, n in reported:
        endpoint = Endpoint(_count(job_id), _count(replica), _name(host), _index(port, 65_536))
        endpoints[endpoint] = _count(n)
    return in_flight, minute, endpoints, totals


def _totals(grown: object) -> _Totals:
    assert isinstance(grown, dict) and set(grown) == {"codes", "buckets", "sum", "count"}, (
        "totals: an object of codes, buckets, sum and count"
    )
    codes, buckets, seconds = grown["codes"], grown["buckets"], grown["sum"]
    assert isinstance(codes, list) and len(codes) <= 500, "codes: a list"
    assert isinstance(buckets, list) and len(buckets) == len(SECONDS_BUCKETS), "buckets: a list"
    assert type(seconds) in (int, float) and 0 <= seconds < math.inf, "sum: seconds"
    return _Totals(
        Counter({_index(c, 600, 100): _count(n) for c, n in codes}),
        tuple(_count(n) for n in buckets),
        float(seconds),
        _count(grown["count"]),
    )


def _count(value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{value!r} is not a count")
    return value


def _index(value: object, end: int, start: int = 0) -> int:
    if type(value) is not int or not start <= value < end:
        raise ValueError(f"{value!r} is not in {start}..{end - 1}")
    return value


def _name(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise ValueError(f"{value!r} is not a name")
    return value
