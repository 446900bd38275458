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


def test_an_http_workers_report_adds_to_the_planes_counts_until_it_goes_stale() -> None:
    """What a worker's proxy counted reaches the plane's (the controller scales on it) through
    its report, as JSON; a worker silent for REPORT_FRESH_S counts no more."""
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


def test_a_report_that_breaks_the_format_is_refused_whole() -> None:
    plane = ProxyTraffic(Clock())
    for bad in (
        None,
        {"services": []},
        {"services": [["t", "s", "many", 0, []]], "endpoints": []},
        {"services": [], "endpoints": [[1, 0, "h"]]},
    ):
        with pytest.raises(ReportError):
            plane.take("w", bad)
    assert plane.in_flight("t", "s") == 0
