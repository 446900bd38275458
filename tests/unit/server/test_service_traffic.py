"""The proxy's counts (``server/service_traffic.py``): in flight per service and per endpoint,
the last minute's rate and p99, and the Prometheus series; on a clock the test moves."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_traffic import (
    REPORT_FRESH_S,
    ProxyTraffic,
    ReportError,
    TrafficCollector,
)

A = Endpoint(job_id=1, replica=0, host="10.0.0.1", port=8000)
B = Endpoint(job_id=1, replica=1, host="10.0.0.2", port=8000)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_in_flight_follows_each_request_to_the_endpoint_that_answers_it() -> None:
    traffic = ProxyTraffic(Clock())
    traffic.started("t", "s", A)
    traffic.started("t", "s", A)
    assert traffic.in_flight("t", "s") == 2 and traffic.in_flight_at(A) == 2
    traffic.moved(A, B)  # A refused the connection: tried on B
    assert traffic.in_flight_at(A) == 1 and traffic.in_flight_at(B) == 1
    traffic.finished("t", "s", B, 200, 0.01)
    traffic.finished("t", "s", A, 499, 0.5)
    assert traffic.in_flight("t", "s") == 0
    assert traffic.in_flight_at(A) == traffic.in_flight_at(B) == 0
    assert traffic.in_flight("t", "other") == 0 and traffic.in_flight("u", "s") == 0


def test_rate_and_p99_are_over_the_last_minute() -> None:
    clock = Clock()
    traffic = ProxyTraffic(clock)
    assert traffic.rate("t", "s") == (0.0, None)
    for i in range(100):  # 99 fast ones, one slow: the p99 is a fast one's bucket
        clock.now = 1000.0 + i * 0.5
        traffic.started("t", "s", A)
        traffic.finished("t", "s", A, 200, 0.002 if i else 1.0)
    rate, p99 = traffic.rate("t", "s")
    assert rate == 100 / 60
    assert p99 is not None and 2.0 <= p99 <= 2.2  # buckets about 10 % wide
    for _ in range(2):  # two more slow ones: now the 99th percentile is slow
        traffic.started("t", "s", A)
        traffic.finished("t", "s", A, 200, 1.0)
    assert (traffic.rate("t", "s")[1] or 0) >= 1000
    clock.now += 61  # a minute later with no request: nothing in the window
    assert traffic.rate("t", "s") == (0.0, None)


def test_the_metrics_are_the_counts() -> None:
    traffic = ProxyTraffic(Clock())
    for status in (200, 200, 502):
        traffic.started("t", "s", A)
        traffic.finished("t", "s", A, status, 0.003)
    traffic.started("t", "s", A)
    registry = CollectorRegistry()
    registry.register(TrafficCollector(lambda: traffic))
    text = generate_latest(registry).decode()
    assert 'xpupool_service_requests_total{code="200",service="s",tenant="t"} 2.0' in text
    assert 'xpupool_service_requests_total{code="502",service="s",tenant="t"} 1.0' in text
    assert 'xpupool_service_request_seconds_bucket{le="0.005",service="s",tenant="t"} 3.0' in text
    assert 'xpupool_service_request_seconds_bucket{le="0.0025",service="s",tenant="t"} 0.0' in text
    assert 'xpupool_service_in_flight{service="s",tenant="t"} 1.0' in text


def test_a_websocket_is_counted_but_not_timed() -> None:
    traffic = ProxyTraffic(Clock())
    traffic.started("t", "s", A)
    traffic.finished("t", "s", A, 101, None)
    assert traffic.in_flight("t", "s") == 0 and traffic.rate("t", "s") == (0.0, None)
    [(_, svc)] = traffic.services()
    assert svc.codes == {101: 1} and svc.seconds_count == 0


def test_a_proxy_process_report_adds_to_the_planes_counts_until_it_goes_stale() -> None:
    """What the proxy process counted reaches the plane's (the controller scales on it) through
    its report, as JSON; a reporter silent for REPORT_FRESH_S counts no more."""
    clock = Clock()
    worker, plane = ProxyTraffic(clock), ProxyTraffic(clock)
    worker.started("t", "s", A)
    worker.started("t", "s", B)
    worker.finished("t", "s", B, 200, 0.004)
    plane.started("t", "s", A)
    plane.take("w1", json.loads(json.dumps(worker.report())))
    assert plane.in_flight("t", "s") == 2 and plane.in_flight_at(A) == 2
    assert plane.in_flight_at(B) == 0
    rate, p99 = plane.rate("t", "s")
    assert rate == 1 / 60 and p99 is not None and 4 <= p99 < 5
    plane.take("w1", ProxyTraffic(clock).report())  # its latest report replaces the last
    assert plane.in_flight("t", "s") == 1
    plane.take("w2", json.loads(json.dumps(worker.report())))
    clock.now += REPORT_FRESH_S + 1
    assert plane.in_flight("t", "s") == 1 and plane.in_flight_at(A) == 1


def _metrics(traffic: ProxyTraffic) -> str:
    registry = CollectorRegistry()
    registry.register(TrafficCollector(lambda: traffic))
    return generate_latest(registry).decode()


def test_a_proxy_process_totals_add_to_the_metrics_once_each() -> None:
    """The proxy process's answers count in /metrics: what grew since its last report is added;
    the same report taken twice adds nothing; a process started again (its counts went down)
    adds all it says; one gone keeps what it added (a counter never goes down)."""
    clock = Clock()
    worker, plane = ProxyTraffic(clock), ProxyTraffic(clock)
    plane.started("t", "s", A)
    plane.finished("t", "s", A, 200, 0.003)
    for status in (200, 502):
        worker.started("t", "s", A)
        worker.finished("t", "s", A, status, 0.003)
    worker.started("t", "s", B)
    plane.take("w1", json.loads(json.dumps(worker.report())))
    plane.take("w1", json.loads(json.dumps(worker.report())))  # taken twice: counted once
    text = _metrics(plane)
    assert 'xpupool_service_requests_total{code="200",service="s",tenant="t"} 2.0' in text
    assert 'xpupool_service_requests_total{code="502",service="s",tenant="t"} 1.0' in text
    assert 'xpupool_service_request_seconds_bucket{le="0.005",service="s",tenant="t"} 3.0' in text
    assert 'xpupool_service_request_seconds_count{service="s",tenant="t"} 3.0' in text
    assert 'xpupool_service_in_flight{service="s",tenant="t"} 1.0' in text  # the worker's
    worker.finished("t", "s", B, 200, 0.003)
    plane.take("w1", worker.report())
    assert 'requests_total{code="200",service="s",tenant="t"} 3.0' in _metrics(plane)
    again = ProxyTraffic(clock)  # w1 started again: its counts start from nothing
    again.started("t", "s", A)
    again.finished("t", "s", A, 200, 0.003)
    plane.take("w1", again.report())
    clock.now += REPORT_FRESH_S + 1  # and went away
    text = _metrics(plane)
    assert 'requests_total{code="200",service="s",tenant="t"} 4.0' in text
    assert 'xpupool_service_in_flight{service="s",tenant="t"} 0.0' in text


def test_a_report_that_breaks_the_format_is_refused_whole() -> None:
    plane = ProxyTraffic(Clock())
    good = ProxyTraffic(Clock())
    good.started("t", "s", A)
    good.finished("t", "s", A, 200, 0.003)
    well = good.report()
    [row] = well["services"]  # type: ignore[misc]
    totals = row[5]
    for bad in (
        None,
        {"services": []},
        {"services": [["t", "s", "many", 0, []]], "endpoints": []},
        {"services": [], "endpoints": [[1, 0, "h"]]},
        {"services": [row[:5]], "endpoints": []},  # no totals
        {"services": [[*row[:5], {**totals, "codes": [[200, -1]]}]], "endpoints": []},
        {"services": [[*row[:5], {**totals, "codes": [[99, 1]]}]], "endpoints": []},
        {"services": [[*row[:5], {**totals, "buckets": [1]}]], "endpoints": []},
        {"services": [[*row[:5], {**totals, "sum": float("inf")}]], "endpoints": []},
        {"services": [[*row[:5], {**totals, "count": 1.5}]], "endpoints": []},
        {"services": [["t", "s", -1, *row[3:]]], "endpoints": []},
        {"services": [["t", "s", 0, 1, [[10**6, 1]], totals]], "endpoints": []},
        {"services": [["", *row[1:]]], "endpoints": []},
        {"services": [row, row], "endpoints": []},
        {"services": [row], "endpoints": [[1, 0, "h", 70_000, 1]]},
        {"services": [row] * 10_001, "endpoints": []},
    ):
        with pytest.raises(ReportError):
            plane.take("w", bad)
    assert plane.in_flight("t", "s") == 0 and plane.services() == []
    plane.take("w", well)
    assert 'requests_total{code="200",service="s",tenant="t"} 1.0' in _metrics(plane)


def test_a_report_of_services_that_do_not_exist_adds_nothing() -> None:
    """The plane passes the services that exist: a worker's counts of any other name (a deleted
    service, or names made up) keep no series."""
    worker, plane = ProxyTraffic(Clock()), ProxyTraffic(Clock())
    for name in ("s", "gone", "made-up"):
        worker.started("t", name, A)
        worker.finished("t", name, A, 200, 0.003)
    plane.take("w", worker.report(), known={("t", "s")})
    assert [key for key, _ in plane.services()] == [("t", "s")]
    assert plane.rate("t", "gone") == (0.0, None)


def test_a_deleted_services_counts_go_once_nothing_is_in_flight() -> None:
    """A tenant that makes and deletes services in a loop must not grow the plane's memory and
    /metrics for ever; a request still in flight keeps its service's counts until it ends."""
    traffic = ProxyTraffic(Clock())
    for name in ("kept", "gone", "busy"):
        traffic.started("t", name, A)
        traffic.finished("t", name, A, 200, 0.01)
    traffic.started("t", "busy", A)  # still in flight
    traffic.keep_only({("t", "kept")})
    assert [key for key, _ in traffic.services()] == [("t", "kept"), ("t", "busy")]
    registry = CollectorRegistry()
    registry.register(TrafficCollector(lambda: traffic))
    text = generate_latest(registry).decode()
    assert 'service="gone"' not in text and 'service="kept"' in text
    traffic.finished("t", "busy", A, 200, 0.01)
    traffic.keep_only({("t", "kept")})
    assert [key for key, _ in traffic.services()] == [("t", "kept")]
