"""Taints and tolerations in Kubernetes' shapes and with its rules (issue 42, part 3): matching as
``Toleration.ToleratesTaint``, validation as ``apis/core/validation``, the text forms of
``kubectl taint`` and of the spec's ``tolerate=``, and a change as ``kubectl taint`` makes it."""

from __future__ import annotations

import pytest

from xpupool.model import Node
from xpupool.model.errors import Conflict, RequestError
from xpupool.model.request_model import request_from_dict
from xpupool.model.taint import (
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    change_taints,
    format_toleration,
    parse_taint,
    parse_toleration,
    read_taint,
)

NS, PNS, NE = TaintEffect.NO_SCHEDULE, TaintEffect.PREFER_NO_SCHEDULE, TaintEffect.NO_EXECUTE
EXISTS, EQUAL = TolerationOperator.EXISTS, TolerationOperator.EQUAL
GPU = Taint("gpu", "true", NS)


# (toleration, taint, tolerated): the cases of k8s.io/api/core/v1 toleration_test.go, and ours
@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("gpu", EQUAL, "true", NS), GPU, True),
        (Toleration("gpu", EQUAL, "false", NS), GPU, False),  # Equal: the value matters
        (Toleration("gpu", EQUAL, "", NS), GPU, False),
        (Toleration("gpu", EQUAL, "", NS), Taint("gpu", "", NS), True),
        (Toleration("gpu", EXISTS, "", NS), GPU, True),  # Exists: any value
        (Toleration("gpu", EXISTS, "", None), GPU, True),  # no effect: every effect
        (Toleration("gpu", EXISTS, "", PNS), GPU, False),  # another effect
        (Toleration("gpu", EQUAL, "true", None), Taint("gpu", "true", PNS), True),
        (Toleration("other", EXISTS, "", None), GPU, False),  # another key
        (Toleration("", EXISTS, "", None), GPU, True),  # empty key with Exists: everything
        (Toleration("", EXISTS, "", None), Taint("x", "y", NE), True),
        (Toleration("", EXISTS, "", PNS), GPU, False),  # ... of that effect only
        (Toleration("", EXISTS, "", NS), GPU, True),
    ],
)
def test_toleration_matches_as_kubernetes_does(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert toleration.tolerates(taint) is expected


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Toleration("", EQUAL, "", None), "operator"),  # an empty key needs Exists
        (lambda: Toleration("gpu", EXISTS, "true", None), "value"),  # Exists takes no value
        (lambda: Toleration("gpu", "In", "", None), "operator"),  # type: ignore[arg-type]
        (lambda: Toleration("-gpu", EXISTS, "", None), "key"),
        (lambda: Toleration("gpu", EQUAL, "a" * 64, None), "value"),
        (lambda: Taint("", "", NS), "key"),
        (lambda: Taint("gpu/", "", NS), "key"),
        (lambda: Taint("Example.com/gpu", "", NS), "key"),  # a DNS prefix is lower case
        (lambda: Taint("gpu", "a b", NS), "value"),
        (lambda: Taint("gpu", "", "NoSchedul"), "effect"),  # type: ignore[arg-type]
    ],
)
def test_kubernetes_validation_names_the_field(make: object, field: str) -> None:
    with pytest.raises(RequestError) as caught:
        make()  # type: ignore[operator]
    assert caught.value.field == field


def test_valid_keys_and_values() -> None:
    for key in ("gpu", "nvidia.com/gpu", "a", "A_b.c-d", "example.com/x" + "y" * 61):
        assert Taint(key, "v", NS).key == key
    assert Taint("k", "a" * 63, NS).value == "a" * 63


@pytest.mark.parametrize(
    ("text", "taint"),
    [
        ("gpu=true:NoSchedule", GPU),
        ("gpu:PreferNoSchedule", Taint("gpu", "", PNS)),
        ("nvidia.com/gpu=present:NoSchedule", Taint("nvidia.com/gpu", "present", NS)),
    ],
)
def test_taint_text_is_kubectls(text: str, taint: Taint) -> None:
    assert parse_taint("t", text) == taint
    assert str(taint) == text


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ("gpu=true", "t", "effect is required"),
        ("gpu:NoExecute", "t.effect", "never evicts"),
        ({"key": "gpu", "effect": "NoExecute"}, "t.effect", "never evicts"),
        ({"key": "gpu"}, "t.effect", "required"),
        ({"key": "gpu", "effect": "NoSchedule", "timeAdded": "x"}, "t.timeAdded", "unknown key"),
        ("gpu=a=b:NoSchedule", "t.value", "letters"),
        (5, "t", "expected KEY[=VALUE]:EFFECT"),
    ],
)
def test_declared_taints_are_refused_with_the_field(data: object, field: str, words: str) -> None:
    with pytest.raises(RequestError) as caught:
        read_taint("t", data)
    assert caught.value.field == field and words in caught.value.reason, caught.value


def test_no_execute_is_a_valid_record_for_a_node_read_from_kubernetes() -> None:
    # the model takes Node.spec.taints as Kubernetes has them; only xpupool's edges refuse it
    node = Node("n", 1000, 1024, taints=(Taint("x", "", NE),))
    assert node.taints[0].keeps_off


def test_a_node_has_one_taint_per_key_and_effect() -> None:
    Node("n", 1000, 1024, taints=(GPU, Taint("gpu", "true", PNS)))  # another effect: fine
    with pytest.raises(RequestError) as caught:
        Node("n", 1000, 1024, taints=(GPU, Taint("gpu", "false", NS)))
    assert caught.value.field == "taints[1]"


@pytest.mark.parametrize(
    ("text", "toleration"),
    [
        ("gpu", Toleration("gpu", EXISTS)),
        ("gpu=true", Toleration("gpu", EQUAL, "true")),
        ("gpu=", Toleration("gpu", EQUAL, "")),
        ("gpu:NoSchedule", Toleration("gpu", EXISTS, "", NS)),
        ("gpu=true:PreferNoSchedule", Toleration("gpu", EQUAL, "true", PNS)),
        ("*", Toleration("", EXISTS)),
        ("*:NoSchedule", Toleration("", EXISTS, "", NS)),
    ],
)
def test_toleration_text_round_trips(text: str, toleration: Toleration) -> None:
    assert parse_toleration("t", text) == toleration
    assert format_toleration(toleration) == text


def test_tolerations_in_json_are_kubernetes_objects() -> None:
    req = request_from_dict(
        {
            "cpu": "1",
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"operator": "Exists"},
                {"key": "spot"},  # operator defaults to Equal, as in Kubernetes
                "infra:PreferNoSchedule",  # an item may be the spec's text
            ],
        }
    )
    assert set(req.tolerations) == {
        Toleration("gpu", EQUAL, "true", NS),
        Toleration("", EXISTS),
        Toleration("spot", EQUAL, ""),
        Toleration("infra", EXISTS, "", PNS),
    }
    assert request_from_dict("cpu=1 tolerate=gpu=true:NoSchedule tolerate=* tolerate=spot= "
                             "tolerate=infra:PreferNoSchedule") == req  # fmt: skip


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"tolerations": [{"operator": "Equal"}]}, "tolerations[0].operator"),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]},
            "tolerations[0].value",
        ),
        ({"tolerations": [{"key": "gpu", "operator": "exists"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"key": "gpu", "effect": "NoExecute"}]}, "tolerations[0].effect"),
        (
            {"tolerations": [{"key": "gpu", "tolerationSeconds": 5}]},
            "tolerations[0].tolerationSeconds",
        ),
        ({"tolerations": [{"key": "gpu"}, {"key": "gpu"}]}, "tolerations[1]"),
        ({"tolerations": ["gpu:NoExecute"]}, "tolerations[0].effect"),
        ({"tolerations": [{"key": "bad key"}]}, "tolerations[0].key"),
        ("cpu=1 tolerate=gpu:NoExecute", "tolerations[0].effect"),
    ],
)
def test_bad_tolerations_name_the_field(form: object, field: str) -> None:
    with pytest.raises(RequestError) as caught:
        request_from_dict(form)
    assert caught.value.field == field, caught.value


# ----------------------------------------------------------------------- kubectl taint's change
SPOT = Taint("spot", "", PNS)


def test_a_change_adds_after_the_others_and_removes_by_key_and_effect() -> None:
    infra = Taint("infra", "x", NS)
    assert change_taints("n", (GPU, SPOT), add=[infra]) == (GPU, SPOT, infra)
    assert change_taints("n", (GPU, SPOT), remove=[("gpu", NS)]) == (SPOT,)
    both = (GPU, Taint("gpu", "true", PNS), SPOT)
    assert change_taints("n", both, remove=[("gpu", None)]) == (SPOT,)  # 'gpu-': every effect


def test_a_change_that_cannot_apply_changes_nothing() -> None:
    with pytest.raises(RequestError) as caught:  # kubectl: taint "gpu:PreferNoSchedule" not found
        change_taints("n", (GPU,), remove=[("gpu", PNS)])
    assert caught.value.field == "remove[0]"
    with pytest.raises(RequestError) as caught:
        change_taints("n", (GPU,), add=[Taint("gpu", "x", NS)], remove=[("gpu", None)])
    assert caught.value.field == "add[0]"
    with pytest.raises(RequestError) as caught:
        change_taints("n", (), add=[GPU, Taint("gpu", "x", NS)])
    assert caught.value.field == "add[1]"
    with pytest.raises(Conflict):  # kubectl: already has gpu taint(s) ... --overwrite is false
        change_taints("n", (GPU,), add=[Taint("gpu", "false", NS)])


def test_overwrite_replaces_the_value_in_place() -> None:
    changed = change_taints("n", (GPU, SPOT), add=[Taint("gpu", "no", NS)], overwrite=True)
    assert changed == (Taint("gpu", "no", NS), SPOT)
