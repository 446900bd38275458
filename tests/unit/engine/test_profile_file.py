"""The profile file: what it builds, how it reaches the engine, and every refusal naming its field."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from xpupool.engine import BUILTIN_PROFILES, ClusterState, Engine
from xpupool.engine.fragmentation.workload_model import WorkloadArgs
from xpupool.engine.profile_file import load_profile_file, parse_profiles
from xpupool.engine.scorers.xpupool import FragmentationArgs, LookaheadArgs
from xpupool.model import Request
from xpupool.model.errors import RequestError
from xpupool.model.request import DevicePolicy

from factories import devices, engine_for, gpu_node

EXAMPLE = """
apiVersion: xpupool/v1
kind: SchedulerConfiguration
profiles:
  - name: train-pack
    devicePolicy: spread
    plugins:
      filter: {disabled: [{name: DeviceUuid}]}
      score: {enabled: [{name: binpack, weight: 2}, {name: topology}]}
  - name: xpupool-calm
    base: xpupool
    plugins:
      postScore: {disabled: [{name: lookahead}]}
      score: {disabled: [{name: spare-cpu}]}
    pluginConfig:
      - name: fragmentation
        args: {steps: 25}
"""


def test_example_builds_profiles(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(EXAMPLE)
    profiles = load_profile_file(path)
    assert list(profiles) == ["train-pack", "xpupool-calm"]
    pack = profiles["train-pack"]
    assert pack.scorers == (("binpack", 2.0), ("topology", 1.0))
    assert pack.device_policy is DevicePolicy.SPREAD
    assert pack.disabled_filters == frozenset({"DeviceUuid"})
    calm = profiles["xpupool-calm"]
    assert [name for name, _ in calm.scorers] == [
        "fragmentation",
        "packing",
        "fullest-card",
        "contention",
        "site",  # the base's preferences too
        "taint-toleration",
        "cpu-only",
    ]
    assert calm.post == ()
    assert calm.args_of("fragmentation") == FragmentationArgs(steps=25)


def test_disabled_filter_is_per_profile() -> None:
    # A UUID no node has: refused by a profile that checks UUIDs, placed by one that does not,
    # in either order on one engine (the cached eligible mask is per set of static filters).
    profiles = parse_profiles(yaml.safe_load(EXAMPLE))
    state = engine_for(gpu_node("a", count=2)).state
    engine = Engine(state, "binpack", profiles={**BUILTIN_PROFILES, **profiles})
    ghost = devices(1, uuids=("nowhere",))
    assert not engine.place(ghost).ok
    loose = engine.place(_with_policy(ghost, "train-pack"))
    assert loose.ok and loose.allocations[0].node == "a"
    assert not engine.place(ghost).ok


def test_unknown_profile_in_file_is_refused_by_the_engine() -> None:
    engine = engine_for(gpu_node("a"))
    with pytest.raises(RequestError) as exc:
        engine.place(_with_policy(devices(1), "train-pack"))
    assert exc.value.field == "node_policy"


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("profiles: []", "profiles"),
        ("profile: []", "profile"),
        ("kind: Other\nprofiles: [{name: a}]", "kind"),
        ("profiles: [{name: A b}]", "profiles[0].name"),
        ("profiles: [{name: binpack}]", "profiles[0].name"),
        ("profiles: [{name: a}, {name: a}]", "profiles[1].name"),
        ("profiles: [{name: a, base: nope}]", "profiles[0].base"),
        ("profiles: [{name: a, devicePolicy: pack}]", "profiles[0].devicePolicy"),
        ("profiles: [{name: a, plugin: {}}]", "profiles[0].plugin"),
        (
            "profiles: [{name: a, plugins: {score: {enabled: [{name: binpack}, {name: x}]}}}]",
            "profiles[0].plugins.score.enabled[1].name",
        ),
        (
            "profiles: [{name: a, plugins: {score: {enabled: [{name: binpack}, {name: binpack}]}}}]",
            "profiles[0].plugins.score.enabled[1].name",
        ),
        (
            "profiles: [{name: a, plugins: {score: {enabled: [{name: binpack, weight: 0}]}}}]",
            "profiles[0].plugins.score.enabled[0].weight",
        ),
        (
            "profiles: [{name: a, plugins: {score: {enabled: [{name: binpack, weight: x}]}}}]",
            "profiles[0].plugins.score.enabled[0].weight",
        ),
        (
            "profiles: [{name: a, plugins: {filter: {disabled: [{name: DeviceMemory}]}}}]",
            "profiles[0].plugins.filter.disabled[0].name",
        ),
        (
            "profiles: [{name: a, plugins: {filter: {disabled: [{name: Nope}]}}}]",
            "profiles[0].plugins.filter.disabled[0].name",
        ),
        (
            "profiles: [{name: a, pluginConfig: [{name: xpupool, args: {}}]}]",
            "profiles[0].pluginConfig[0].name",
        ),
        (
            "profiles: [{name: a, base: binpack, pluginConfig: [{name: binpack, args: {}}]}]",
            "profiles[0].pluginConfig[0].name",
        ),
        (
            "profiles: [{name: a, base: xpupool,"
            " pluginConfig: [{name: fragmentation, args: {x: 1}}]}]",
            "profiles[0].pluginConfig[0].args.x",
        ),
        (
            "profiles: [{name: a, base: xpupool,"
            " pluginConfig: [{name: lookahead, args: {look_slack: true}}]}]",
            "profiles[0].pluginConfig[0].args.look_slack",
        ),
        (
            "profiles: [{name: a, base: xpupool, pluginConfig: [{name: lookahead, args: {}},"
            " {name: lookahead, args: {}}]}]",
            "profiles[0].pluginConfig[1].name",
        ),
        (
            "profiles: [{name: a, base: xpupool, pluginConfig: [{name: xpupool, args: {}}]}]",
            "profiles[0].pluginConfig[0].name",
        ),
        (
            "profiles: [{name: a, plugins: {score: {enabled: [{name: xpupool}]}}}]",
            "profiles[0].plugins.score.enabled[0].name",
        ),
        (
            "profiles: [{name: a, plugins: {postScore: {enabled: [{name: binpack}]}}}]",
            "profiles[0].plugins.postScore.enabled[0].name",
        ),
        (
            "profiles: [{name: a, base: xpupool,"
            " plugins: {postScore: {enabled: [{name: lookahead}]}}}]",
            "profiles[0].plugins.postScore.enabled[0].name",
        ),
        (
            "profiles: [{name: a, base: binpack, pluginConfig: [{name: workload, args: {}}]}]",
            "profiles[0].pluginConfig[0].name",
        ),
    ],
)
def test_mistakes_are_refused_naming_the_field(document: str, field: str) -> None:
    with pytest.raises(RequestError) as exc:
        parse_profiles(yaml.safe_load(document))
    assert exc.value.field == field


def test_capacity_filter_refusal_says_why() -> None:
    doc = "profiles: [{name: a, plugins: {filter: {disabled: [{name: NodeCpu}]}}}]"
    with pytest.raises(RequestError) as exc:
        parse_profiles(yaml.safe_load(doc))
    assert "capacity filter cannot be disabled" in exc.value.reason


def test_unreadable_or_broken_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as exc:
        load_profile_file(tmp_path / "missing.yaml")
    assert exc.value.field == "profile file"
    broken = tmp_path / "broken.yaml"
    broken.write_text("profiles: [")
    with pytest.raises(RequestError) as exc:
        load_profile_file(broken)
    assert exc.value.field == "profile file"


def test_base_and_disabled_star_replace_the_scorers() -> None:
    doc = (
        "profiles: [{name: a, base: binpack,"
        " plugins: {score: {disabled: [{name: '*'}], enabled: [{name: spread}]}}}]"
    )
    profile = parse_profiles(yaml.safe_load(doc))["a"]
    assert profile.scorers == (("spread", 1.0),)
    assert profile.device_policy is DevicePolicy.BINPACK
    engine = Engine(ClusterState([gpu_node("a"), gpu_node("b")]), profile)
    engine.place(devices(1, uuids=("a-gpu0",)))
    assert engine.place(devices(1)).allocations[0].node == "b"


def _with_policy(req: Request, policy: str) -> Request:
    return replace(req, node_policy=policy)


def test_xpupool_constants_are_plugin_arguments() -> None:
    doc = (
        "profiles: [{name: a, base: xpupool, pluginConfig: ["
        "{name: fragmentation, args: {steps: 25}},"
        " {name: lookahead, args: {look_slack: 2, candidates: 3}},"
        " {name: workload, args: {window: 500, cpu_bound: 0.5}}]}]"
    )
    profile = parse_profiles(yaml.safe_load(doc))["a"]
    assert profile.args_of("fragmentation") == FragmentationArgs(steps=25)
    assert profile.args_of("lookahead") == LookaheadArgs(look_slack=2.0, candidates=3)
    assert profile.args_of("workload") == WorkloadArgs(window=500, cpu_bound=0.5)
    engine = Engine(ClusterState([gpu_node("a")]), profile)
    assert engine.place(devices(1)).ok
    scorer = engine._weighted(engine.profile)[0][0]
    assert scorer.args == FragmentationArgs(steps=25)  # type: ignore[attr-defined]
    model = engine._model(engine.profile)
    assert model.args.window == 500 and [r.name for r in model.seen] == ["job"]


def test_a_builtin_profile_named_as_a_scorer_says_to_use_base() -> None:
    with pytest.raises(RequestError) as exc:
        parse_profiles(
            yaml.safe_load("profiles: [{name: a, plugins: {score: {enabled: [{name: xpupool}]}}}]")
        )
    assert "use base: xpupool" in exc.value.reason and "fragmentation" in exc.value.reason


@pytest.mark.parametrize(
    ("plugin", "args", "field"),
    [
        ("fragmentation", "{steps: 0}", ""),
        ("workload", "{window: 1.5}", ".window"),
        ("lookahead", "{look_slack: -1}", ""),
    ],
)
def test_bad_xpupool_arguments_are_refused(plugin: str, args: str, field: str) -> None:
    doc = (
        f"profiles: [{{name: a, base: xpupool, pluginConfig: [{{name: {plugin}, args: {args}}}]}}]"
    )
    with pytest.raises(RequestError) as exc:
        parse_profiles(yaml.safe_load(doc))
    assert exc.value.field == "profiles[0].pluginConfig[0].args" + field
