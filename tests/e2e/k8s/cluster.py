"""A real Kubernetes control plane as plain local processes, for tests that must prove the
Kubernetes front against upstream code rather than against fixtures we wrote.

    with StubExtender(admit={"gpu-a"}) as ext, K8sCluster(tmp, extender_url=ext.url) as kc:
        kc.api.post("/api/v1/nodes", json=node)

``K8sCluster`` starts etcd, kube-apiserver and kube-scheduler (the binaries ``tools/k8s/build.sh``
builds), all on 127.0.0.1 with ports picked at runtime, and stops them on exit, also when the start
itself fails. kube-controller-manager runs only where a test asks for it (``controller_manager``,
with the controllers of ``CONTROLLERS``): tests create Nodes themselves, and the admission plugins
that rely on controllers are off either way (ServiceAccount: pods would wait for the ``default``
ServiceAccount; TaintNodesByCondition: no node lifecycle controller lifts the not-ready taint it
adds to new Nodes, so no pod would ever schedule). Each process runs in its own session so a
teardown kill reaches its whole group and nothing else. A start that fails or times out raises
``K8sStartError`` with the tail of that component's log.

Binaries come from ``$XPUPOOL_K8S_BIN`` or the cache directory ``build.sh --print-bin-dir``
names. When one is missing, ``find_binaries`` raises ``K8sBinariesMissingError``; fixtures turn that
into a test failure (never a skip), so CI cannot pass without the real control plane.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[3]
BUILD_SH = ROOT / "tools" / "k8s" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
CONTROLLER_MANAGER = "kube-controller-manager"
# The controllers K8sCluster(controller_manager=True) runs: what the plane's Kubernetes site relies
# on (Deployments to ReplicaSets to Pods, EndpointSlices of Services, owner-reference garbage
# collection, a deleted namespace emptied) and the ServiceAccount controller, which makes each
# namespace's "default" ServiceAccount. Nothing else (no node lifecycle: tests own their Nodes).
CONTROLLERS = (
    "deployment",
    "replicaset",
    "endpointslice",
    "garbagecollector",
    "namespace",
    "serviceaccount",
)
HAMI_BINARY = "hami-scheduler"  # HAMi's scheduler, from `tools/k8s/build.sh --hami` only
# xpupool's interop checker compiled inside HAMi's module (tools/hami-check), from --hami-check
HAMI_CHECK_BINARY = "xpupool-hami-check"
SCHEDULER_NAME = "xpupool-scheduler"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
TOKEN = "xpupool-test-token"  # static bearer token of a system:masters user


class K8sBinariesMissingError(RuntimeError):
    """The control-plane binaries are not built: run tools/k8s/build.sh."""


class K8sStartError(RuntimeError):
    """A component exited or did not become ready; the message ends with its log tail."""


def free_port() -> int:
    """A port free on 127.0.0.1 right now (another process may take it before we bind it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bin_dir() -> Path:
    """``$XPUPOOL_K8S_BIN``, else the versioned cache directory that build.sh fills."""
    env_dir = os.environ.get("XPUPOOL_K8S_BIN")
    if env_dir:
        return Path(env_dir)
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--print-bin-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def find_binaries(names: Sequence[str] = BINARIES) -> dict[str, Path]:
    """Paths of the named binaries (and of ``kwok-stages.yaml``, in ``../share``, with kwok).

    Raises ``K8sBinariesMissingError`` naming what is absent and the command that builds it.
    """
    d = bin_dir()
    paths = {name: d / name for name in names}
    missing = [name for name, p in paths.items() if not os.access(p, os.X_OK)]
    if "kwok" in names:
        paths["kwok-stages"] = d.parent / "share" / "kwok-stages.yaml"
        if not paths["kwok-stages"].is_file():
            missing.append(str(paths["kwok-stages"]))
    if missing:
        builds = []
        if set(missing) - {HAMI_BINARY, HAMI_CHECK_BINARY}:
            builds.append("tools/k8s/build.sh (or make test-k8s)")
        if HAMI_CHECK_BINARY in missing:
            builds.append("XPUPOOL_HAMI_GIT=<a HAMi clone> tools/k8s/build.sh --hami-check")
        elif HAMI_BINARY in missing:
            builds.append("tools/k8s/build.sh --hami (or make hami-bin; see docs/benchmarks.md)")
        build = " and ".join(builds)
        raise K8sBinariesMissingError(
            f"Kubernetes binaries missing in {d}: {', '.join(missing)}. "
            f"Run {build} first, or point XPUPOOL_K8S_BIN at them."
        )
    return paths


def require_binaries(names: Sequence[str] = BINARIES) -> dict[str, Path]:
    """:func:`find_binaries` for a test: a missing binary fails it, never skips it."""
    import pytest

    try:
        return find_binaries(names)
    except K8sBinariesMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a component log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Component:
    """One running binary: its process (leader of its own session) and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to the whole process group, SIGKILL to what is left after ``grace_s``."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        # Also when the leader exited: children of its group may linger.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@dataclass
class Extender:
    """The ``extenders`` entry of the scheduler configuration (upstream v1 field names)."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str | None = "prioritize"  # None: not a prioritizer (HAMi's config)
    bind_verb: str = "bind"
    preempt_verb: str | None = None
    weight: int = 1
    http_timeout: str = "5s"
    ignorable: bool = False
    managed_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    tls_config: dict[str, str] | None = None  # ExtenderTLSConfig (certFile, keyFile, caFile)

    def to_config(self) -> dict[str, object]:
        verbs: dict[str, object] = {}
        if self.preempt_verb is not None:
            verbs["preemptVerb"] = self.preempt_verb
        if self.prioritize_verb is not None:
            verbs["prioritizeVerb"] = self.prioritize_verb
        if self.tls_config is not None:
            verbs["tlsConfig"] = self.tls_config
        return {
            **verbs,
            "urlPrefix": self.url_prefix,
            "filterVerb": self.filter_verb,
            "bindVerb": self.bind_verb,
            "weight": self.weight,
            "enableHTTPS": self.tls_config is not None,
            "nodeCacheCapable": True,
            "httpTimeout": self.http_timeout,
            "ignorable": self.ignorable,
            "managedResources": [
                {"name": r, "ignoredByScheduler": True} for r in self.managed_resources
            ],
        }


class K8sCluster:
    """etcd + kube-apiserver + kube-scheduler (one profile, at most one extender) on 127.0.0.1.

    ``workdir`` (default: a fresh temp dir, removed on stop) holds certificates, the kubeconfig,
    configs, etcd data and one ``<component>.log`` each. ``api`` is an httpx client already
    authenticated as a cluster admin; ``kubeconfig`` works with kubectl. ``extender_url`` is a
    shorthand for ``extender=Extender(url_prefix=extender_url)``. With ``kwok=True`` a standalone
    kwok controller also runs and plays kubelet for Nodes annotated ``kwok.x-k8s.io/node: fake``
    (bound pods go Running), driven by the upstream "fast" stages that build.sh keeps in
    ``<cache>/share/kwok-stages.yaml``. With ``scheduler=False`` no kube-scheduler runs (tests of
    the API alone: admission policies, the node agent, watches, leases); ``apiserver_args`` are
    added to kube-apiserver's flags. With ``controller_manager=True`` kube-controller-manager
    runs the controllers of ``CONTROLLERS`` (or the names given instead) against the same
    apiserver, signing with the ServiceAccount key the apiserver verifies.
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        extender_url: str | None = None,
        extender: Extender | None = None,
        scheduler_name: str = SCHEDULER_NAME,
        kwok: bool = False,
        scheduler: bool = True,
        apiserver_args: Sequence[str] = (),
        controller_manager: bool | Sequence[str] = False,
        start_timeout_s: float = 90.0,
        etcd: tuple[str, str] | None = None,
    ) -> None:
        if extender is None and extender_url is not None:
            extender = Extender(url_prefix=extender_url)
        self.extender = extender
        self.scheduler_name = scheduler_name
        self.kwok = kwok
        self.scheduler = scheduler
        self.apiserver_args = tuple(apiserver_args)
        self.controllers: tuple[str, ...] = (
            ()
            if controller_manager is False
            else CONTROLLERS
            if controller_manager is True
            else tuple(controller_manager)
        )
        self.start_timeout_s = start_timeout_s
        # (url, key prefix): another cluster's etcd, under a prefix of this one's own (several
        # control planes on one etcd, as issue 51's sites); None: an etcd of its own
        self.etcd = etcd
        self.etcd_url = ""
        self.workdir = workdir
        self.components: list[Component] = []
        self.api_url = ""
        self._own_workdir = False
        self._api: httpx.Client | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> K8sCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> K8sCluster:
        """Start all components in order and wait for each; on any failure stop what started."""
        names: tuple[str, ...] = BINARIES if self.scheduler else ("etcd", "kube-apiserver")
        if self.controllers:
            names = (*names, CONTROLLER_MANAGER)
        bins = find_binaries((*names, "kwok") if self.kwok else names)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="xpupool-k8s-"))
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            if self.etcd is None:
                self.etcd_url = self._start_etcd(bins["etcd"])
            else:
                self.etcd_url = self.etcd[0]
            self._start_apiserver(bins["kube-apiserver"], self.etcd_url)
            if self.controllers:
                self._start_controller_manager(bins[CONTROLLER_MANAGER])
            if self.scheduler:
                self._start_scheduler(bins["kube-scheduler"])
            if self.kwok:
                self._start_kwok(bins["kwok"], bins["kwok-stages"])
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop components in reverse order and remove the temp dir (if we made it)."""
        if self._api is not None:
            self._api.close()
            self._api = None
        while self.components:
            self.components.pop().stop()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
            self._own_workdir = False

    # -- accessors ---------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        assert self.workdir is not None, "cluster not started"
        return self.workdir

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def api(self) -> httpx.Client:
        """An admin client for the apiserver (self-signed serving cert, so no verification)."""
        if self._api is None:
            self._api = make_api_client(self.api_url)
        return self._api

    def log(self, name: str) -> str:
        return log_tail(self.dir / f"{name}.log", lines=10_000)

    # -- identities --------------------------------------------------------------------------

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POST ``obj`` as the admin; raises ``AssertionError`` with the apiserver's answer."""
        r = self.api.post(path, json=obj)
        assert r.status_code == 201, f"POST {path}: HTTP {r.status_code}: {r.text[-1000:]}"
        return dict(r.json())

    def service_account(self, namespace: str, name: str) -> None:
        """The namespace (if new) and a ServiceAccount in it. Only the named ServiceAccount:
        its controller runs only with ``controller_manager``, and then makes ``default`` alone."""
        if self.api.get(f"/api/v1/namespaces/{namespace}").status_code == 404:
            self.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"metadata": {"name": name, "namespace": namespace}},
        )

    def token(
        self, namespace: str, name: str, *, node: str | None = None, expiration_s: int = 3600
    ) -> str:
        """A ServiceAccount token from the TokenRequest API; with ``node``, bound to that Node
        (``boundObjectRef`` kind Node, KEP-4193, GA in 1.33), so the apiserver puts the node's
        name in the user's extra ``authentication.kubernetes.io/node-name`` and refuses the
        token once the Node is gone. Signed with the ``sa.key`` the apiserver was started with."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_s}
        if node is not None:
            got = self.api.get(f"/api/v1/nodes/{node}")
            assert got.status_code == 200, f"node {node}: HTTP {got.status_code}: {got.text}"
            uid = got.json()["metadata"]["uid"]
            spec["boundObjectRef"] = {"kind": "Node", "apiVersion": "v1", "name": node, "uid": uid}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        out = self.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        return str(out["status"]["token"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's v3 JSON gateway),
        as kube-apiserver's own compactor does every ``--etcd-compaction-interval``; a watch
        from an older resourceVersion then gets ``410 Gone`` where etcd serves it (with the
        apiserver's watch cache off). Returns the revision compacted to."""
        with httpx.Client(base_url=self.etcd_url, timeout=10.0) as etcd:
            head = etcd.post("/v3/kv/range", json={"key": "AA=="})  # key "\0": only the header
            head.raise_for_status()
            revision = int(head.json()["header"]["revision"])
            done = etcd.post(
                "/v3/kv/compaction", json={"revision": str(revision), "physical": True}
            )
            done.raise_for_status()
        return revision

    @contextmanager
    def apiserver_down(self) -> Iterator[None]:
        """kube-apiserver stopped for the ``with`` block, then started again with the same
        command line (the same port, certificates and etcd, whose data stays), so every
        client's kubeconfig finds it again; the block ends once its ``/readyz`` answers 200."""
        (i, old), *_ = ((i, c) for i, c in enumerate(self.components) if c.name == "kube-apiserver")
        old.stop()
        if self._api is not None:  # its pooled connections went with the old process
            self._api.close()
            self._api = None
        try:
            yield
        finally:
            comp = self._spawn(old.name, [str(a) for a in old.proc.args])  # type: ignore[union-attr]
            self.components.remove(comp)  # in its place: stop() stops it after its clients
            self.components[i] = comp
            self._wait(comp, f"{self.api_url}/readyz", headers={"Authorization": f"Bearer {TOKEN}"})

    # -- components --------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> Component:
        log = self.dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        comp = Component(name, proc, log)
        self.components.append(comp)
        return comp

    def _wait(self, comp: Component, url: str, headers: dict[str, str] | None = None) -> None:
        """Poll ``url`` until it answers 200; raise with the log tail if the process dies."""
        deadline = time.monotonic() + self.start_timeout_s
        last = "no answer yet"
        with httpx.Client(verify=False, timeout=2.0, headers=headers) as client:
            while time.monotonic() < deadline:
                if not comp.alive():
                    raise K8sStartError(
                        f"{comp.name} exited with code {comp.proc.returncode} before it was "
                        f"ready; the end of its log:\n{log_tail(comp.log)}"
                    )
                try:
                    r = client.get(url)
                    if r.status_code == 200:
                        return
                    last = f"HTTP {r.status_code}: {r.text[-500:]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                time.sleep(0.2)
        raise K8sStartError(
            f"{comp.name} not ready at {url} after {self.start_timeout_s:.0f}s (last: {last}); "
            f"the end of its log:\n{log_tail(comp.log)}"
        )

    def _start_etcd(self, binary: Path) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        comp = self._spawn(
            "etcd",
            [
                str(binary),
                "--name=n0",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=n0={peer_url}",
                "--unsafe-no-fsync",  # test data; fsync would dominate on shared CI disks
                "--log-level=warn",
            ],
        )
        self._wait(comp, f"{client_url}/health")
        return client_url

    def _start_apiserver(self, binary: Path, etcd_url: str) -> None:
        d = self.dir
        (d / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        # Required since 1.20 even though no ServiceAccount tokens are issued here.
        subprocess.run(
            ["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
            check=True,
            capture_output=True,
        )
        port = free_port()
        self.api_url = f"https://127.0.0.1:{port}"
        comp = self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={etcd_url}",
                *([] if self.etcd is None else [f"--etcd-prefix={self.etcd[1]}"]),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={d / 'pki'}",  # self-signed serving cert generated here
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                # Without kube-controller-manager nothing creates the default ServiceAccount,
                # and with it no node lifecycle controller lifts the node.kubernetes.io/not-ready
                # taint TaintNodesByCondition puts on every Node at creation: off either way.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--endpoint-reconciler-type=none",
                # As kubeadm and kind run it: the default (false) refuses every privileged pod,
                # which the chart's node agent may ask for (agent.privileged).
                "--allow-privileged=true",
                *self.apiserver_args,
            ],
        )
        self._wait(comp, f"{self.api_url}/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
        write_kubeconfig(self.kubeconfig, self.api_url)
        # /readyz can pass a moment before the bootstrap controller creates "default".
        deadline = time.monotonic() + self.start_timeout_s
        while self.api.get("/api/v1/namespaces/default").status_code != 200:
            if time.monotonic() > deadline:
                raise K8sStartError(f"namespace default never appeared:\n{log_tail(comp.log)}")
            time.sleep(0.2)

    def _start_controller_manager(self, binary: Path) -> None:
        """kube-controller-manager with ``self.controllers``, as the admin (one client for all
        controllers: per-controller service-account credentials would need the ServiceAccount
        token controller and RBAC bootstrap for each), ready once ``/healthz`` answers 200."""
        port = free_port()
        comp = self._spawn(
            CONTROLLER_MANAGER,
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={self.dir / 'sa.key'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'pki-controller-manager'}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                # As the scheduler's 500/1000: the defaults (20/30) throttle a test's bursts.
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-gc-syncs=5",
                "--v=2",
            ],
        )
        self._wait(comp, f"https://127.0.0.1:{port}/healthz")

    def _start_scheduler(self, binary: Path) -> None:
        profile: dict[str, object] = {"schedulerName": self.scheduler_name}
        config: dict[str, object] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 500, "burst": 1000},
            "leaderElection": {"leaderElect": False},
            "percentageOfNodesToScore": 100,
            "profiles": [profile],
        }
        if self.extender is not None:
            config["extenders"] = [self.extender.to_config()]
        self.start_scheduler(config, binary=binary)

    def start_scheduler(
        self, config: dict[str, object], name: str = "kube-scheduler", binary: Path | None = None
    ) -> Component:
        """Start one more kube-scheduler with ``config`` (a KubeSchedulerConfiguration as a dict,
        written as ``<name>.json``) and wait until its ``/readyz`` answers 200; a config it refuses
        raises ``K8sStartError`` with its log tail. ``name`` names its log and must be unique. The
        config's ``clientConnection.kubeconfig`` is the caller's to set (``self.kubeconfig``)."""
        if binary is None:
            binary = find_binaries(("kube-scheduler",))["kube-scheduler"]
        path = self.dir / f"{name}.json"  # JSON is YAML; the scheduler reads either
        path.write_text(json.dumps(config, indent=2))
        port = free_port()
        comp = self._spawn(
            name,
            [
                str(binary),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / f'pki-{name}'}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--v=2",
            ],
        )
        self._wait(comp, f"https://127.0.0.1:{port}/readyz")
        return comp

    def _start_kwok(self, binary: Path, stages: Path) -> None:
        port = free_port()
        comp = self._spawn(
            "kwok",
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={stages}",  # v0.8.0 has no built-in stages
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{port}",  # healthz and metrics
            ],
        )
        self._wait(comp, f"http://127.0.0.1:{port}/healthz")


class ExtenderProcess:
    """``xpupool k8s extender`` as a real process (this interpreter, ``xpupool.cli``), serving on
    127.0.0.1:``port`` against the cluster of ``kubeconfig``. :meth:`start` returns once its
    ``/readyz`` answers 200, that is once its view has listed Nodes and Pods: Nodes created
    before the start are all in that first list. Output goes to ``log``.

    ``node_lock`` is ``--hami-node-lock``: off unless a test says otherwise, because nothing here
    runs HAMi's device plugin, which is what releases HAMi's node lock after each bind; the tests
    of the lock (and benchmarks that run a stand-in of the device plugin) pass ``auto``.

    ``client_tls`` (the CA that signed the extender's serving certificate, a client certificate
    and its key): the extender serves HTTPS (``extra`` gives its ``--tls-*`` options) and the
    readiness checks present that certificate."""

    def __init__(
        self,
        kubeconfig: Path,
        port: int,
        log: Path,
        extra: tuple[str, ...] = (),
        *,
        policy: str | None = None,
        node_lock: str = "off",
        client_tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        self.kubeconfig, self.port, self.log, self.policy = kubeconfig, port, log, policy
        self.extra = (*extra, "--hami-node-lock", node_lock)  # more command-line arguments
        self.metrics_port = free_port()
        self.client_tls = client_tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "http" if self.client_tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    def client(self) -> httpx.Client:
        """An httpx client for the verbs' port (with ``client_tls``'s CA and certificate)."""
        if self.client_tls is None:
            return httpx.Client(timeout=1)
        from tls_certs import Pair, client_context

        ca, cert, key = self.client_tls
        return httpx.Client(timeout=1, verify=client_context(ca, Pair(cert, key)))

    def start(self, timeout_s: float = 120.0, wait_ready: bool = True) -> ExtenderProcess:
        """Start it; return once it is ready (``wait_ready``) or at least answers /healthz (a
        standby of leader election is never ready)."""
        cmd = [sys.executable, "-c", "from xpupool.cli import main; main()", "k8s", "extender"]
        cmd += ["--kubeconfig", str(self.kubeconfig), "--listen", f"127.0.0.1:{self.port}"]
        cmd += ["--metrics", f"127.0.0.1:{self.metrics_port}", *self.extra]
        if self.policy is not None:
            cmd += ["--policy", self.policy]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise K8sStartError(f"extender exited:\n{log_tail(self.log)}")
            try:
                if self.ready() or (not wait_ready and self.healthy()):
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise K8sStartError(f"extender not ready in {timeout_s:.0f} s:\n{log_tail(self.log)}")

    def ready(self) -> bool:
        with self.client() as client:
            return client.get(f"{self.url}/readyz").status_code == 200

    def healthy(self) -> bool:
        with self.client() as client:
            return client.get(f"{self.url}/healthz").status_code == 200

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class HamiSchedulerProcess:
    """HAMi's scheduler (``hami-scheduler``, v2.10.0, from ``tools/k8s/build.sh --hami``) as a
    real process against the cluster of ``kubeconfig``: its extender on 127.0.0.1:``port``
    (``--http_bind``, plain HTTP: no ``--cert_file``), its metrics on another free port of
    127.0.0.1 (the default ``:9395`` binds every interface), ``device_config`` as its
    ``--device-config-file`` (required), the kubeconfig through ``KUBECONFIG`` (it has no flag,
    ``pkg/util/client/client.go``), its client at ``kube_qps``/``kube_burst`` (client-go's 5/10
    otherwise; every kube-scheduler here gets 500/1000). Its ``/readyz`` always answers 200
    (``routes/route.go``), so :meth:`start` waits instead until its metrics list ``cards``
    cards: its node cache has registered them all."""

    def __init__(
        self,
        kubeconfig: Path,
        port: int,
        log: Path,
        device_config: Path,
        *,
        kube_qps: int = 500,
        kube_burst: int = 1000,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig, self.port, self.log = kubeconfig, port, log
        self.device_config = device_config
        self.kube_qps, self.kube_burst, self.extra = kube_qps, kube_burst, extra
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, cards: int, timeout_s: float = 120.0) -> HamiSchedulerProcess:
        """Start it; return once its metrics list ``cards`` distinct cards (raises
        ``K8sStartError`` with its log tail when it exits or ``timeout_s`` passes first)."""
        binary = find_binaries((HAMI_BINARY,))[HAMI_BINARY]
        cmd = [
            str(binary),
            f"--http_bind=127.0.0.1:{self.port}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--device-config-file={self.device_config}",
            f"--kube-qps={self.kube_qps}",
            f"--kube-burst={self.kube_burst}",
            *self.extra,
        ]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise K8sStartError(f"hami-scheduler exited:\n{log_tail(self.log)}")
            with contextlib.suppress(httpx.TransportError):
                seen = self.cards_registered()
                if seen >= cards:
                    return self
            time.sleep(0.25)
        self.stop()
        raise K8sStartError(
            f"hami-scheduler listed {seen} of {cards} cards in {timeout_s:.0f} s:\n"
            f"{log_tail(self.log)}"
        )

    def cards_registered(self) -> int:
        """Distinct cards in its ``hami_gpu_memory_limit_bytes`` metric (its node cache)."""
        r = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        if r.status_code != 200:
            return 0
        uuids = set()
        for line in r.text.splitlines():
            if line.startswith("hami_gpu_memory_limit_bytes{") and 'device_uuid="' in line:
                uuids.add(line.split('device_uuid="', 1)[1].split('"', 1)[0])
        return len(uuids)

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 10 s."""
        if self.proc is not None:
            Component(HAMI_BINARY, self.proc, self.log).stop(grace_s=10)
        self.proc = None


@contextmanager
def extender_stack(
    log_dir: Path,
    port: int,
    extender: Extender,
    extra: tuple[str, ...] = (),
    prepare: Callable[[K8sCluster], None] | None = None,
    node_lock: str = "off",
    client_tls: tuple[Path, Path, Path] | None = None,
) -> Iterator[tuple[K8sCluster, ExtenderProcess]]:
    """A control plane whose kube-scheduler calls ``extender`` (served on 127.0.0.1:``port``),
    and ``xpupool k8s extender`` serving it (``extra`` arguments, ``node_lock`` and
    ``client_tls`` as :class:`ExtenderProcess`), started after ``prepare`` (CRDs the extender
    reads) ran; both torn down on leaving."""
    require_binaries(BINARIES)
    with K8sCluster(extender=extender) as kc:
        if prepare is not None:
            prepare(kc)
        log = log_dir / "extender.log"
        proc = ExtenderProcess(
            kc.kubeconfig, port, log, extra, node_lock=node_lock, client_tls=client_tls
        ).start()
        try:
            yield kc, proc
        finally:
            proc.stop()


def make_api_client(api_url: str, token: str = TOKEN) -> httpx.Client:
    """An httpx client for the test apiserver, authenticated with the static admin token."""
    return httpx.Client(
        base_url=api_url,
        verify=False,
        timeout=10.0,
        headers={"Authorization": f"Bearer {token}"},
    )


def write_kubeconfig(path: Path, api_url: str, token: str = TOKEN) -> None:
    """A token kubeconfig (as JSON, which every kubeconfig loader accepts)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": api_url, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
        "current-context": "local",
    }
    path.write_text(json.dumps(config, indent=2))
