"""pod_images.py through the extender's filter on a real ClusterView and engine: a container's
image asks for a driver that serves it (the same catalog rules as a job's --image), what the pod's
own annotation says wins, an image no rule knows adds nothing, and without the option (the
default: HAMi's register annotation carries no driver version) images are not read."""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.catalog.images import default_image_catalog
from xpupool.k8s.extender.pod_images import container_images
from xpupool.k8s.extender.verbs import Extender
from xpupool.k8s.extender.wire import ExtenderArgs
from xpupool.k8s.informers.cluster_view import ClusterView, NodeRecord
from xpupool.k8s.informers.watch import Event, EventType

from factories import gpu_node

CUDA124 = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"


def no_decoder(obj: dict[str, Any]) -> Any:
    raise AssertionError("not used: events are fed by hand")


def extender(*drivers: str, images: bool = True) -> Extender:
    view = ClusterView(no_decoder, no_decoder, profile="binpack")
    for i, driver in enumerate(drivers):
        node = gpu_node(f"n{i}", count=1, driver=driver)
        view.on_node(Event(EventType.ADDED, node.name, f"uid-{i}", NodeRecord(node, True)))
    catalog = default_image_catalog() if images else None
    return Extender(view, None, lambda n, d, a: {}, images=catalog)  # type: ignore[arg-type]


def pod(image: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"}
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": image,
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "c", "image": image, "resources": {"limits": limits}}]},
    }


def answer(ext: Extender, p: dict[str, Any], nodes: list[str]) -> tuple[list[str], str]:
    args = ExtenderArgs.model_validate({"Pod": p, "Nodes": None, "NodeNames": nodes})
    result = ext.filter(args)
    why = " ".join((result.failed_nodes or {}).values())
    why += " ".join((result.failed_and_unresolvable_nodes or {}).values())
    return list(result.node_names or []), why


def test_an_image_places_only_where_the_driver_serves_it() -> None:
    ext = extender("525.85.12", "550.54.15")
    assert answer(ext, pod(CUDA124), ["n0", "n1"])[0] == ["n1"]
    fits, why = answer(ext, pod(CUDA124), ["n0"])
    assert fits == []
    assert "driver 525.85.12 too old for cuda>=12.4: needs >= 550.54.14" in why, why


@pytest.mark.parametrize(
    ("image", "annotations"),
    [
        (CUDA124, {"xpupool.io/software": "cuda>=11.8"}),  # the pod's own need wins
        ("registry.example.com/team/trainer:v3", None),  # no rule knows it: nothing added
        ("pytorch/pytorch:latest", None),  # a tag that says no version
    ],
)
def test_what_the_pod_says_wins_and_unknown_images_add_nothing(
    image: str, annotations: dict[str, str] | None
) -> None:
    ext = extender("525.85.12")
    assert answer(ext, pod(image, annotations), ["n0"])[0] == ["n0"]


def test_images_are_not_read_unless_asked() -> None:
    ext = extender("525.85.12", images=False)
    assert answer(ext, pod(CUDA124), ["n0"])[0] == ["n0"]


def test_container_images_reads_init_containers_and_skips_garbage() -> None:
    p = {
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox:1"}],
            "containers": [
                {"name": "c", "image": CUDA124},
                {"name": "bad", "image": 7},
                "not a container",
                {"name": "long", "image": "x" * 2000},
            ],
        }
    }
    assert container_images(p) == {"init": "busybox:1", "c": CUDA124}
    assert container_images({"spec": None}) == {}
