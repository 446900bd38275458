"""Getting an image job's image onto the host before its container runs: a step of its own.

A separate ``<runtime> pull`` (rather than ``run --pull``) is what lets the job's log show the
pull as it goes (``pulling IMAGE``, the engine's own progress lines, ``pulled IMAGE in N s``),
bounds it by the agent's pull timeout, and tells a failed pull from a failed container: the
container's ``run`` then gets ``--pull=never`` and never pulls again behind the agent's back.

The pull policy is Kubernetes' (``if-not-present``, the default: pulled only when the engine
lacks the image; ``always``; ``never``: the image must already be there). A failed pull is one
:class:`LaunchError` whose reason starts with Kubernetes' words (``ErrImagePull``,
``ErrImageNeverPull``) and says which of :data:`PULL_FAILURES` it was, classified from the
engine's stderr (:func:`classify`): the attempt fails once, and the job's own retry policy (not
this module) decides whether it runs again, so nothing here retries for ever.

Registry credentials are the job's pull secret where it names one (a tenant's registry auth
file, written for the pull only: agent/launch/secret_files.py), else the engine's own (its auth
file, ``REGISTRY_AUTH_FILE`` in the agent's environment).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, get_args

from xpupool.agent.launch.spec import (
    LaunchError,
    LaunchStoppedError,
    Step,
    StopAsked,
    never,
    no_step,
)
from xpupool.server.schemas.agent_protocol import PullPolicy

PULL_POLICIES: tuple[str, ...] = get_args(PullPolicy)
EXISTS_TIMEOUT_S = 30.0
STDERR_KEPT = 20  # lines of the engine's stderr kept to classify a failure
STOP_POLL_S = 0.2  # how often a pull looks whether its replica was stopped meanwhile

PullFailure = Literal[
    "image not found", "unauthorised", "registry unreachable", "timed out", "failed"
]
PULL_FAILURES: tuple[str, ...] = get_args(PullFailure)

# what the engines (podman, docker) print for each failure, lower-cased; the first match wins
_SIGNS: tuple[tuple[PullFailure, tuple[str, ...]], ...] = (
    (
        "unauthorised",
        (
            "unauthorized",
            "authentication required",
            "access denied",
            "denied:",
            "401 unauthorized",
            "403 forbidden",
        ),
    ),
    (
        "image not found",
        ("manifest unknown", "name unknown", "not found", "does not exist", "no such image"),
    ),
    (
        "registry unreachable",
        (
            "connection refused",
            "no such host",
            "network is unreachable",
            "no route to host",
            "i/o timeout",
            "connection reset",
            "tls handshake",
            "server gave http response to https client",
            "pinging container registry",
            "dial tcp",
        ),
    ),
)


def classify(stderr: str) -> PullFailure:
    """Which failure the engine's ``stderr`` of a failed pull says it was."""
    text = stderr.lower()
    for failure, signs in _SIGNS:
        if any(sign in text for sign in signs):
            return failure
    return "failed"


def failure_reason(image: str, failure: PullFailure, detail: str) -> str:
    """The attempt's reason: Kubernetes' word, the class, the image, the engine's last line."""
    detail = detail.strip().splitlines()[-1][:300] if detail.strip() else ""
    return f"ErrImagePull: {failure}: {image}" + (f" ({detail})" if detail else "")


Log = Callable[[str], None]


def image_present(
    base: Sequence[str],
    image: str,
    env: dict[str, str] | None = None,
    timeout_s: float = EXISTS_TIMEOUT_S,
) -> bool:
    """``<runtime> image inspect IMAGE`` (both engines have it; podman's ``image exists`` is
    podman's only) exits 0."""
    try:
        done = subprocess.run(
            [*base, "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def auth_args(
    base: Sequence[str], authfile: str, env: dict[str, str] | None
) -> tuple[list[str], dict[str, str] | None]:
    """The pull's options and environment for the registry auth file ``authfile`` ("" = none):
    podman's ``--authfile FILE``; docker reads ``config.json`` of the directory ``DOCKER_CONFIG``."""
    if not authfile:
        return [], env
    if Path(base[0]).name == "docker":
        return [], {
            **(env if env is not None else os.environ),
            "DOCKER_CONFIG": str(Path(authfile).parent),
        }
    return ["--authfile", authfile], env


def pull(
    base: Sequence[str],
    image: str,
    timeout_s: float,
    log: Log,
    env: dict[str, str] | None = None,
    authfile: str = "",
    stop_asked: StopAsked = never,
    step: Step = no_step,
) -> str:
    """``<runtime> pull IMAGE`` with each line of its output given to ``log`` as it comes (the
    engine's progress: ``Copying blob ...``) and the layers copied so far to ``step`` (the job's
    events); killed after ``timeout_s``, or as soon as ``stop_asked()`` says the replica is
    stopped (a cancel must not wait out a long pull: :class:`LaunchStoppedError`). Returns the
    summary line (``pulled IMAGE in N s, K layers``); raises LaunchError with the classified
    reason."""
    log(
        f"pulling {image} (timeout {timeout_s:g} s)"
        + (", with its pull secret" if authfile else "")
    )
    step(f"pulling {image}")
    options, env = auth_args(base, authfile, env)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [*base, "pull", *options, image],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    except OSError as exc:
        raise LaunchError(failure_reason(image, "failed", str(exc))) from None
    kept: list[str] = []
    layers = [0]

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if not line:
                continue
            if line.startswith("Copying blob"):
                layers[0] += 1
                step(f"pulling {image}: {layers[0]} layers copied")
            kept.append(line)
            del kept[:-STDERR_KEPT]
            log(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = start + timeout_s
    code = proc.poll()
    while code is None:
        if stop_asked() or time.monotonic() >= deadline:
            proc.kill()
            proc.wait()
            reader.join(5.0)
            if time.monotonic() < deadline:
                log(f"pull of {image} given up: the replica was stopped")
                raise LaunchStoppedError(f"stopped while its image {image} was pulled")
            why = f"no image after {timeout_s:g} s"
            raise LaunchError(failure_reason(image, "timed out", why))
        try:
            code = proc.wait(timeout=min(STOP_POLL_S, max(deadline - time.monotonic(), 0.0)))
        except subprocess.TimeoutExpired:
            code = None
    reader.join(5.0)
    elapsed = time.monotonic() - start
    if code != 0:
        text = "\n".join(kept)
        raise LaunchError(failure_reason(image, classify(text), text))
    return f"pulled {image} in {elapsed:.1f} s, {layers[0]} layers"


def ensure_image(
    base: Sequence[str],
    image: str,
    policy: str,
    timeout_s: float,
    log: Log,
    env: dict[str, str] | None = None,
    authfile: str = "",
    stop_asked: StopAsked = never,
    step: Step = no_step,
) -> str:
    """The image on this host under ``policy``; returns what was done, for the job's events
    (``image present``, or :func:`pull`'s summary). Raises LaunchError (the attempt's reason)."""
    if policy not in PULL_POLICIES:
        raise LaunchError(f"pull policy {policy!r}: not one of {', '.join(PULL_POLICIES)}")
    if policy != "always" and image_present(base, image, env):
        return "image present"
    if policy == "never":
        reason = f"ErrImageNeverPull: image not present: {image} (pull policy never)"
        log(reason)
        raise LaunchError(reason)
    return pull(base, image, timeout_s, log, env, authfile, stop_asked, step)
