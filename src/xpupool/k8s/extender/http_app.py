"""The extender's HTTP face: ``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (the verbs of
the scheduler configuration's ``urlPrefix``), ``GET /healthz`` and ``/readyz``; Prometheus metrics
on a port of their own.

A body over ``MAX_BODY_BYTES`` is answered 413 by the server's own body limit
(``server/body_limit.py``) before a verb runs: a declared length at once, a chunked body as soon as
what arrived passes the limit, the connection then closed rather than read to its end. A body that
is not the verb's wire type is answered 400 naming the field; a logical failure is HTTP 200 with
``Error`` set, as kube-scheduler expects. Metrics, and the probes again, are on a port of their
own, plain HTTP (:func:`serve_metrics`). The verbs run in worker threads: the engine is guarded by
the view's lock, and a bind's API calls do not hold it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from anyio import CapacityLimiter, to_thread
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from xpupool.agent.metrics import MetricsServer, bearer_only, serve_wsgi
from xpupool.k8s.extender.gang import MAX_GANG_SIZE
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import (
    MAX_BODY_BYTES,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriorityList,
    WireError,
    decode,
    encode,
)
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.server.body_limit import BodyLimit
from xpupool.server.stranded_gauges import stranded_gauges

VERBS: dict[str, type[BaseModel]] = {
    "filter": ExtenderArgs,
    "prioritize": ExtenderArgs,
    "bind": ExtenderBindingArgs,
    "preempt": ExtenderPreemptionArgs,
}


class ExtenderMetrics:
    """What an operator watches: calls and their latency per verb, refused and failed binds, and
    (once :meth:`watch` is given the view) the pool's size and its stranded capacity."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.calls = Counter(
            "xpupool_extender_calls",
            "Extender calls by verb and outcome (ok, error: Error set, bad_request)",
            ["verb", "outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "xpupool_extender_call_seconds",
            "Time to answer one extender call",
            ["verb"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
            registry=registry,
        )
        self.nodes = Gauge(
            "xpupool_extender_nodes", "Nodes of the pool in the view", registry=registry
        )
        self.pods = Gauge(
            "xpupool_extender_pods_charged",
            "Pods holding managed devices (bound or reserved)",
            registry=registry,
        )

    def watch(self, view: ClusterView) -> None:
        """Read the pool's figures from ``view`` at scrape time."""
        self.nodes.set_function(lambda: len(view.nodes()))
        self.pods.set_function(lambda: len(view.charges()))
        self.registry.register(StrandedCollector(view))


class StrandedCollector(Collector):
    """Per node, idle device capacity that no shape of the workload the extender's engine learned
    from the pods it placed can use now: the embedded server's gauges, by the same function
    (``server/stranded_gauges.py``); none until the engine has learned a workload."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def collect(self) -> list[Metric]:
        with self.view.engine_locked() as engine:
            return list(stranded_gauges(engine.live_nodes(), engine.stranded()))


BIND_THREADS = MAX_GANG_SIZE + 16
"""Binds run on threads of their own, this many at most: a gang member's bind waits for the rest
of its group (gang.py), so a gang of N holds N bind threads. On the 40 threads every other verb
shares, a gang over 40 never bound: its last members' filters and binds queued behind the
waiting binds until those timed out."""

SYNC_WAIT_S = 30.0
"""How long a verb waits for the view's first list before it answers ``Error``."""


def create_app(
    extender: Extender,
    synced: Callable[[float], bool],
    metrics: ExtenderMetrics | None = None,
    leading: Callable[[], bool] | None = None,
) -> ASGIApp:
    """The ASGI app serving ``extender``, behind the body limit; ``synced(timeout_s)`` says
    whether the view has listed the cluster (waiting up to ``timeout_s`` for it). With
    ``leading`` (leader election on), a replica that does not hold the Lease is not ready and
    answers every verb as a standby: no two replicas ever bind, and a Service in front sends
    calls to the leader only."""
    if metrics is not None:
        metrics.watch(extender.view)

    limiters: dict[str, CapacityLimiter] = {}  # made in the server's event loop, on first use

    def endpoint(verb: str) -> Callable[[Request], Any]:
        kind = VERBS[verb]
        handler = getattr(extender, verb)

        async def call(request: Request) -> Response:
            started = time.perf_counter()
            try:
                body = await request.body()
            except ClientDisconnect:  # gone, or cut off by the body limit (which answered 413)
                return _count(metrics, verb, "bad_request", started, _bad("no body"))
            try:
                args = decode(kind, body)
            except WireError as exc:
                return _count(metrics, verb, "bad_request", started, _bad(str(exc)))
            if leading is not None and not leading():
                result: BaseModel = _refused(verb, "this replica is a standby (not the leader)")
            elif not synced(0) and not await run_in_threadpool(synced, SYNC_WAIT_S):
                result = _refused(verb, "the extender has not listed the cluster yet")
            elif verb == "bind":
                if "bind" not in limiters:
                    limiters["bind"] = CapacityLimiter(BIND_THREADS)
                result = await to_thread.run_sync(handler, args, limiter=limiters["bind"])
            else:
                result = await run_in_threadpool(handler, args)
            failed = bool(getattr(result, "error", ""))
            response = Response(encode(result), media_type="application/json")
            return _count(metrics, verb, "error" if failed else "ok", started, response)

        return call

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        status, text = readiness(synced, leading)
        return PlainTextResponse(text, status_code=status)

    routes = [Route(f"/{verb}", endpoint(verb), methods=["POST"]) for verb in VERBS]
    routes += [Route("/healthz", healthz), Route("/readyz", readyz)]
    return BodyLimit(Starlette(routes=routes), MAX_BODY_BYTES, setting=BODY_SETTING)


BODY_SETTING = "the extender's limit: 5,000 full Node objects fit well under it"


def readiness(
    synced: Callable[[float], bool], leading: Callable[[], bool] | None
) -> tuple[int, str]:
    """``/readyz``'s status and text: 503 for a standby of leader election (a Service in front
    sends calls to the leader only) and until the view has listed the cluster, else 200."""
    if leading is not None and not leading():
        return 503, "standby: another replica holds the Lease"
    if synced(0):
        return 200, "ok"
    return 503, "the cluster view has not synced"


def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    ready: Callable[[], tuple[int, str]],
    token_file: Path | None = None,
) -> MetricsServer:
    """Prometheus metrics at ``http://host:port/metrics``, and ``/healthz`` and ``/readyz``
    (``ready()``'s answer) beside them, on a daemon thread until ``stop``. The probes are here
    as well as on the verbs' port because a kubelet's probe presents no client certificate:
    with ``--client-ca`` it could not reach them there; for the same reason only ``/metrics``
    needs ``token_file``'s bearer token (``--metrics-token-file``). Raises OSError if it cannot
    bind."""
    metrics = make_wsgi_app(registry)
    if token_file is not None:
        metrics = bearer_only(metrics, token_file)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/healthz", "/readyz"):
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        status, text = (200, "ok") if path == "/healthz" else ready()
        phrase = "OK" if status == 200 else "Service Unavailable"
        start_response(f"{status} {phrase}", [("Content-Type", "text/plain; charset=utf-8")])
        return [text.encode()]

    return serve_wsgi(app, host, port, "extender-metrics")


def _refused(verb: str, reason: str) -> BaseModel:
    why = f"xpupool: {reason}"
    if verb == "prioritize":  # HostPriorityList has no Error: every node 0
        return HostPriorityList([])
    if verb == "preempt":
        return ExtenderPreemptionResult(NodeNameToMetaVictims={})
    if verb == "bind":
        return ExtenderBindingResult(Error=why)
    return ExtenderFilterResult(Error=why)


def _bad(text: str) -> Response:
    return PlainTextResponse(text, status_code=400)


def _count(
    metrics: ExtenderMetrics | None, verb: str, outcome: str, started: float, response: Response
) -> Response:
    if metrics is not None:
        metrics.calls.labels(verb, outcome).inc()
        metrics.seconds.labels(verb).observe(time.perf_counter() - started)
    return response
