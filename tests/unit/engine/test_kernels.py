"""The compiled loops' own contracts (``engine/fragmentation/kernels.py``); what they compute is
checked against NumPy and real placements in ``test_fragmentation.py`` and ``test_lookahead.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from xpupool.engine.fragmentation import kernels, settled


def test_compiled_settle_rounds_as_numpy_does() -> None:
    """The compiled loops settle fragments themselves; they must round exactly as ``settled``
    (NumPy's ``round``), halves and float noise included, or equal fragments would part."""
    rng = np.random.default_rng(7)
    weights = rng.random((2000, 9))
    values = np.concatenate(
        [
            (rng.integers(0, 8000, (2000, 9)) * weights).sum(axis=1),
            rng.integers(0, 10**9, 500) / 10**6 + 5e-7,  # exact halves of the last digit kept
            np.array([0.0, -0.0, 1e-13, -1e-13, 2.5e-6, 3.5e-6, 1234.5678905]),
        ]
    )
    compiled = np.array([kernels._settle(float(v)) for v in values])
    assert np.array_equal(compiled, settled(values))


@pytest.mark.slow
def test_the_pressures_demand_per_unit_is_numpys_to_the_bit() -> None:
    """``pressure_per_unit`` replaces a NumPy expression in the device pressure; placements
    compare pressures, so it must give the same bits: idle counts as integers or floats, groups
    that may use no class, idle that no group can use."""
    rng = np.random.default_rng(11)
    for _ in range(3000):
        c, g, j = (int(x) for x in rng.integers(1, (12, 60, 6)))
        idle = rng.integers(0, rng.choice([2, 1000, 10**7]), (c, j))
        usable = idle if rng.random() < 0.5 else idle.astype(np.float64)
        groups = (rng.random((c, g)) < rng.choice([0.0, 0.3, 1.0])).astype(np.float64)
        column = rng.integers(0, j, g)
        share = rng.random(g)
        share /= share.sum()
        floats = usable.astype(np.float64)
        group_idle = (groups * floats[:, column]).sum(axis=0)
        want = share * float(floats[:, 0].sum()) / np.maximum(group_idle, 1.0)
        got = kernels.pressure_per_unit(usable, groups, column, share)
        assert np.array_equal(got, want)


@pytest.mark.slow
def test_the_displaced_demand_is_numpys_to_the_bit() -> None:
    """``pressure_displaced`` replaces the device pressure's NumPy expression for nodes of one
    class each: ``need * clip(rho - min rho, 0, 1)`` over the nodes' classes (-1 reads the last,
    0), nothing when they are of one class or one pressure, and the per-card path when a node has
    cards of several classes (-2)."""
    rng = np.random.default_rng(5)
    for _ in range(3000):
        classes = int(rng.integers(1, 6))
        rho = np.append(rng.random(classes) * rng.choice([0.5, 3.0]), 0.0)
        if rng.random() < 0.2:
            rho[:-1] = rho[0]  # every class alike
        node_class = rng.integers(-2 if rng.random() < 0.2 else -1, classes, 40)
        nodes = rng.choice(40, int(rng.integers(1, 40)), replace=False)
        need = int(rng.integers(1, 1001))
        out = np.empty(nodes.size)
        found = kernels.pressure_displaced(nodes, node_class, rho, need, out)
        picked = node_class[nodes]
        if (picked < -1).any():
            assert found == kernels.DISPLACED_MIXED
            continue
        per = rho[picked]
        if picked.min() == picked.max() or per.max() <= per.min():
            assert found == kernels.DISPLACED_NONE
            continue
        assert found == kernels.DISPLACED_FILLED
        assert np.array_equal(out, np.clip(per - per.min(), 0.0, 1.0) * float(need))


WARM_THEN_PLACE = textwrap.dedent(
    """
    import json
    from xpupool.engine import ClusterState, Engine
    from xpupool.engine.fragmentation import TargetWorkload, kernels
    from xpupool.model import DeviceRequest, Request
    from factories import T4, gpu_node

    kernels.warm()
    nodes = [gpu_node(f"a{i}", count=4, group_size=2) for i in range(3)]
    nodes += [gpu_node(f"t{i}", model=T4, memory_mib=15360, count=2) for i in range(2)]
    share = Request("s", 2000, 0, DeviceRequest(count=1, core_permille=300))
    mib = Request("m", 1000, 0, DeviceRequest(count=1, memory_mib=6000, core_permille=100))
    typed = Request("t", 1000, 0, DeviceRequest(count=1, core_permille=500, models=("T4",)))
    pair = Request("p", 4000, 0, DeviceRequest(count=2))
    cpu = Request("c", 2000, 0)
    stream = [share, mib, typed, pair, cpu] * 4
    workload = TargetWorkload.from_requests(stream)
    engine = Engine(ClusterState(nodes, seed=1), "xpupool", seed=1, workload=workload)
    for req in stream:
        engine.place(req)
    jitted = {
        "refresh": kernels._refresh_jit,
        "one_card_after": kernels._one_card_after_jit,
        "node_after": kernels._node_after_jit,
        "best_deltas": kernels._best_deltas_jit,
        "knapsack": kernels._knapsack_jit,
        "pressure_counts": kernels._pressure_counts_jit,
        "per_unit": kernels._per_unit_jit,
        "displaced": kernels._displaced_jit,
    }
    print(json.dumps({name: len(d.signatures) for name, d in jitted.items()}))
    """
)


@pytest.mark.slow
def test_warm_compiles_what_the_engine_calls() -> None:
    """``warm`` must compile each loop for exactly the argument types the engine passes: else the
    first real request compiles a second version, the stall ``warm`` exists to avoid. In a fresh
    process: warm, then place one-card (compute and MiB), typed, two-card and CPU-only requests
    with the lookahead on and shares priced; each loop has still one compiled version."""
    tests = str(Path(__file__).resolve().parents[2])  # where ``factories`` is
    out = subprocess.run(
        [sys.executable, "-c", WARM_THEN_PLACE],
        capture_output=True,
        text=True,
        check=True,
        # ``factories`` first, then the package under test where PYTHONPATH names it (a checkout
        # beside an editable install of another one).
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
        },
        timeout=120,
    )
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts == {
        "refresh": 1,
        "one_card_after": 1,
        "node_after": 1,
        "best_deltas": 1,
        "knapsack": 1,
        "pressure_counts": 1,
        "per_unit": 2,  # the plain nodes' integer counts, and the float form with others
        "displaced": 1,
    }


@pytest.mark.slow
def test_a_read_only_install_compiles_without_a_cache() -> None:
    """Installed read-only (a container's root filesystem) with no writable cache folder, Numba
    refuses ``cache=True`` when the module is imported; the engine must still import and run,
    compiling in the process and saying so once. Run for real: the package's folder bind-mounted
    read-only in a private mount namespace, HOME and XDG_CACHE_HOME unwritable."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private read-only mount")
    package = Path(kernels.__file__).resolve().parents[3]  # the folder holding ``xpupool``
    script = (
        "import logging; logging.basicConfig(); from xpupool.engine import compiled; "
        "from xpupool.engine.fragmentation import kernels; "
        "print(kernels._settle(1.23456789), len(compiled._uncached))"
    )
    mount = f"mount --bind {package} {package} && mount -o remount,bind,ro {package}"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{mount} && touch {package}/.ro; rm -f {package}/.ro"],
        capture_output=True,
        text=True,
    )
    if "Read-only" not in probe.stderr:
        pytest.skip(f"no private read-only mount here: {probe.stderr.strip()[:200]}")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env |= {"HOME": "/proc/no-home", "XDG_CACHE_HOME": "/proc/no-cache"}
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", f'{mount} && exec "$0" -c "$1"', sys.executable, script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    settled_value, uncached = out.stdout.split()
    assert float(settled_value) == 1.234568
    assert int(uncached) > 0  # the fallback ran: without it the import raises RuntimeError
    assert out.stderr.count("no writable folder for Numba's cache") == 1
