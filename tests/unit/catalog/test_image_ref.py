"""Image references split as Docker splits them (distribution/reference normalize.go): registry
only when the first part looks like a host, docker.io and library/ filled in, tags and digests."""

from __future__ import annotations

import pytest

from xpupool.catalog.image_ref import MAX_REFERENCE, ImageRefError, parse_image_ref

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("reference", "repository", "tag", "digest"),
    [
        ("ubuntu", "docker.io/library/ubuntu", None, None),
        ("ubuntu:22.04", "docker.io/library/ubuntu", "22.04", None),
        ("library/ubuntu:22.04", "docker.io/library/ubuntu", "22.04", None),
        ("docker.io/ubuntu", "docker.io/library/ubuntu", None, None),
        ("index.docker.io/library/busybox", "docker.io/library/busybox", None, None),
        (
            "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
            "docker.io/pytorch/pytorch",
            "2.4.0-cuda12.4-cudnn9-runtime",
            None,
        ),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch", "24.05-py3", None),
        ("localhost:5000/team/train:1", "localhost:5000/team/train", "1", None),
        ("localhost/train", "localhost/train", None, None),
        ("registry.example:8443/a/b/c:v1", "registry.example:8443/a/b/c", "v1", None),
        (f"pytorch/pytorch@{DIGEST}", "docker.io/pytorch/pytorch", None, DIGEST),
        (f"pytorch/pytorch:2.4.0@{DIGEST}", "docker.io/pytorch/pytorch", "2.4.0", DIGEST),
        (
            "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:1.0.RC2-800I-A2-aarch64",
            "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie",
            "1.0.RC2-800I-A2-aarch64",
            None,
        ),
        ("REG.Example/x:1", "reg.example/x", "1", None),  # hosts are case-insensitive
    ],
)
def test_references_normalise(
    reference: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_image_ref(reference)
    assert (ref.repository, ref.tag, ref.digest) == (repository, tag, digest)


@pytest.mark.parametrize(
    "reference",
    [
        "",
        " ubuntu",
        "ubuntu ",
        "Ubuntu",  # repository names are lowercase
        "a b",
        "ubuntu:",
        "ubuntu:-bad",
        "ubuntu:" + "x" * 129,  # a tag has at most 128 characters
        "ubuntu@sha256:short",
        "bad_host:99x/a",
        "a//b",
        "x" * (MAX_REFERENCE + 1),
        "ubuntu\n",
        "ubuntu:1\x00",
    ],
)
def test_garbage_is_an_error_with_a_reason(reference: str) -> None:
    with pytest.raises(ImageRefError) as info:
        parse_image_ref(reference)
    assert info.value.reason
