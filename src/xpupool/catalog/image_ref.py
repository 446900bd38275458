"""Split a container image reference into registry, repository, tag and digest, as Docker does.

``pytorch/pytorch:2.4.0`` and ``docker.io/pytorch/pytorch:2.4.0`` name the same image, and
``ubuntu`` is ``docker.io/library/ubuntu``; rules match the normalised name so one rule covers
every spelling. The grammar is distribution/reference's (``reference.go`` and ``normalize.go``
of github.com/distribution/reference): the first path part is a registry when it holds a '.' or
a ':' or is ``localhost``; a tag is ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``; a digest follows '@'.
Parsing is pure and bounded (references over 512 characters are refused), so a hostile string
costs at most one bounded regex match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_REFERENCE = 512
DEFAULT_REGISTRY = "docker.io"
# distribution/reference: path components are lowercase alphanumerics joined by separators.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)


class ImageRefError(ValueError):
    """Not an image reference; ``reason`` says what is wrong."""

    def __init__(self, reference: str, reason: str) -> None:
        self.reference = reference
        self.reason = reason
        super().__init__(f"{reference[:80]!r}: {reason}")


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed reference. ``repository`` is normalised (``docker.io/library/ubuntu``); ``tag``
    is None when the reference gives none (Docker then pulls ``latest``); ``digest`` pins the
    content (``sha256:...``) and says nothing about versions."""

    registry: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}"


def parse_image_ref(reference: str) -> ImageRef:
    """Parse ``reference``; raises :class:`ImageRefError` when it is not one.

    The first part is taken as a registry only when it looks like a host (a '.', a ':' port or
    ``localhost``), so ``pytorch/pytorch`` is Docker Hub's; ``index.docker.io`` reads as
    ``docker.io``, and a one-part Docker Hub path gets ``library/``.
    """
    if not isinstance(reference, str):
        raise ImageRefError(repr(reference), "expected text")
    if len(reference) > MAX_REFERENCE:
        raise ImageRefError(reference, f"longer than {MAX_REFERENCE} characters")
    text = reference.strip()
    if not text or text != reference:
        raise ImageRefError(reference, "empty, or with leading or trailing whitespace")
    registry, rest = _split_registry(text)
    match = _REFERENCE.fullmatch(rest)
    if match is None:
        raise ImageRefError(
            reference,
            "expected [registry[:port]/]name[:tag][@digest] with a lowercase name",
        )
    path = match.group("path")
    if registry == "index.docker.io":
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    return ImageRef(registry, path, match.group("tag"), match.group("digest"))


def _split_registry(text: str) -> tuple[str, str]:
    """(registry, the rest): the first '/'-part when it names a host, else docker.io."""
    first, slash, rest = text.partition("/")
    if slash and (first == "localhost" or "." in first or ":" in first.split("@")[0]):
        if re.fullmatch(_REGISTRY, first) is None:
            raise ImageRefError(text, f"registry {first!r} is not a host[:port]")
        return first.lower(), rest
    return DEFAULT_REGISTRY, text
