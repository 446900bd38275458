"""Hypothesis strategies for placement requests, shared by the JSON and compact-syntax tests.

The two forms differ only in which names they can carry (the compact syntax cannot express names
with spaces or names shaped like counts or sizes), so the strategies take the name alphabets as
arguments.
"""

from __future__ import annotations

from hypothesis import strategies as st

from xpupool.model import DevicePolicy, DeviceRequest, Request, Topology, parse_software_need
from xpupool.model.qos import QoS
from xpupool.model.stopping import IdleStop
from xpupool.model.taint import SUPPORTED_EFFECTS, Toleration, TolerationOperator
from xpupool.model.vendor import VENDOR_KEYS

versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}(\.RC[0-9])?", fullmatch=True)
needs = st.builds(
    lambda name, op, version: parse_software_need(f"{name}{op}{version}"),
    st.sampled_from(["cuda", "cann", "rocm", "torch", "pytorch"]),
    st.sampled_from([">=", "<=", "==", "!=", "~=", ">", "<", "="]),
    versions,
)


@st.composite
def device_requests(
    draw: st.DrawFn,
    models: st.SearchStrategy[str],
    uuids: st.SearchStrategy[str],
    exact_card_sizes: bool = False,
) -> DeviceRequest:
    """Any valid DeviceRequest; ``exact_card_sizes`` also draws min == max card bounds."""
    count = draw(st.integers(min_value=0, max_value=64))
    if count == 0:
        return DeviceRequest()
    memory = draw(
        st.one_of(
            st.just((None, None)),
            st.tuples(st.integers(1, 1 << 40), st.none()),
            st.tuples(st.none(), st.integers(1, 1000)),
        )
    )
    low = draw(st.none() | st.integers(1, 1 << 30))
    high = draw(st.none() | st.integers(low or 1, 1 << 30))
    if exact_card_sizes and draw(st.booleans()):
        high = low
    return DeviceRequest(
        count=count,
        memory_mib=memory[0],
        memory_permille=memory[1],
        core_permille=draw(st.none() | st.integers(1, 1000)),
        vendors=tuple(draw(st.lists(st.sampled_from(VENDOR_KEYS), max_size=3))),
        models=tuple(draw(st.lists(models, max_size=3))),
        exclude_models=tuple(draw(st.lists(models, max_size=3))),
        uuids=tuple(draw(st.lists(uuids, max_size=3))),
        exclude_uuids=tuple(draw(st.lists(uuids, max_size=3))),
        min_card_mib=low,
        max_card_mib=high,
        software=tuple(draw(st.lists(needs, max_size=3))),
        topology=draw(st.sampled_from(Topology)),
    )


sites = st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True)
labels = st.from_regex(r"[a-z][a-z0-9./_-]{0,10}", fullmatch=True)
label_values = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9=._-]{0,10}", fullmatch=True)
taint_keys = st.from_regex(
    r"([a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4})?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?",
    fullmatch=True,
)
taint_values = st.from_regex(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?)?", fullmatch=True)
effects = st.none() | st.sampled_from(SUPPORTED_EFFECTS)
tolerations = st.one_of(
    st.builds(
        Toleration,
        st.just("") | taint_keys,
        st.just(TolerationOperator.EXISTS),
        st.just(""),
        effects,
    ),
    st.builds(Toleration, taint_keys, st.just(TolerationOperator.EQUAL), taint_values, effects),
)


def requests(
    names: st.SearchStrategy[str],
    models: st.SearchStrategy[str],
    uuids: st.SearchStrategy[str],
    exact_card_sizes: bool = False,
) -> st.SearchStrategy[Request]:
    return st.builds(
        Request,
        name=st.just("") | names,
        cpu_milli=st.integers(0, 1 << 40),
        memory_mib=st.integers(0, 1 << 50),
        devices=device_requests(models, uuids, exact_card_sizes),
        replicas=st.integers(1, 10_000),
        gang=st.booleans(),
        span_sites=st.booleans(),
        priority=st.integers(-(1 << 31), (1 << 31) - 1),
        queue=names,
        node_policy=st.none() | names,
        device_policy=st.none() | st.sampled_from(DevicePolicy),
        sites=st.lists(sites, max_size=3).map(tuple),
        exclude_sites=st.lists(sites, max_size=2).map(tuple),
        node_selector=st.dictionaries(labels, label_values, max_size=3).map(
            lambda d: tuple(sorted(d.items()))
        ),
        preferred_site=st.none() | sites,
        tolerations=st.lists(tolerations, max_size=3, unique=True).map(tuple),
        data=st.none() | sites,  # a dataset's name follows a site's rule
        grace_s=st.none() | st.integers(1, 3600).map(float),
        checkpoint_signal=st.none() | st.sampled_from(("USR1", "USR2", "HUP")),
        min_run_s=st.none() | st.integers(1, 7 * 86400).map(float),
        idle_stop=st.none()
        | st.builds(
            IdleStop, st.integers(1, 100).map(float), st.integers(60, 7 * 86400).map(float)
        ),
        qos=st.sampled_from(QoS),
    )
