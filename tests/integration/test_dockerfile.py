"""The Dockerfile, checked as far as a machine without a container engine or base images can:
every instruction and flag is one Docker knows, stages referenced exist, the final stage runs the
`xpupool` entry point as a non-root user on a Python slim base, each COPY source is in the build
context that .dockerignore leaves, and the package installs the way the Dockerfile says: a wheel
built from that context alone, installed into a fresh venv from a local wheel directory with
--no-index, whose `xpupool` command starts and finds the package's data files.

Not checked here: the image build itself (no registry for python:*-slim here) and the
dependencies' wheels (installing them would download numpy, scipy, numba, ...; the venv borrows
the test environment's copies instead). Building the xpupool wheel uses pip's build isolation,
so hatchling comes from the package index as in ``make``'s own install.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

# Dockerfile reference (docs.docker.com/reference/dockerfile): every instruction, and the flags
# each one takes (BuildKit's, which `# syntax=docker/dockerfile:1` selects).
INSTRUCTION_FLAGS: dict[str, frozenset[str]] = {
    "FROM": frozenset({"platform"}),
    "RUN": frozenset({"mount", "network", "security"}),
    "CMD": frozenset(),
    "LABEL": frozenset(),
    "EXPOSE": frozenset(),
    "ENV": frozenset(),
    "ADD": frozenset({"chown", "chmod", "link", "keep-git-dir", "checksum", "exclude"}),
    "COPY": frozenset({"from", "chown", "chmod", "link", "parents", "exclude"}),
    "ENTRYPOINT": frozenset(),
    "VOLUME": frozenset(),
    "USER": frozenset(),
    "WORKDIR": frozenset(),
    "ARG": frozenset(),
    "ONBUILD": frozenset(),
    "STOPSIGNAL": frozenset(),
    "HEALTHCHECK": frozenset({"interval", "timeout", "start-period", "start-interval", "retries"}),
    "SHELL": frozenset(),
}


@dataclass(frozen=True)
class Instruction:
    line: int
    name: str
    flags: dict[str, str]
    rest: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their ``--flag=value`` options; comments dropped, ``\\``-continued
    lines joined. Raises ``ValueError`` naming the line of anything unknown."""
    out: list[Instruction] = []
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if not pending:
            start = no
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical, pending = pending + line, ""
        word, _, rest = logical.partition(" ")
        name = word.upper()
        if name not in INSTRUCTION_FLAGS:
            raise ValueError(f"Dockerfile line {start}: unknown instruction {word!r}")
        flags: dict[str, str] = {}
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            key, _, value = flag[2:].partition("=")
            if key not in INSTRUCTION_FLAGS[name]:
                raise ValueError(f"Dockerfile line {start}: {name} has no flag --{key}")
            flags[key] = value
            rest = rest.strip()
        out.append(Instruction(start, name, flags, rest))
    if pending:
        raise ValueError("Dockerfile ends inside a continued line")
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The instructions of each stage, in order (global ARGs before the first FROM dropped)."""
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.name == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's ``patterns`` exclude ``path`` (relative, ``/``-separated): the last
    matching pattern wins, ``!`` re-includes, a pattern matching a parent folder matches what is
    under it, ``**`` spans folders (moby/patternmatcher's rules)."""
    parts = path.split("/")
    result = False
    for pat in patterns:
        neg = pat.startswith("!")
        body = pat[1:] if neg else pat
        body = body.strip("/")
        regex = re.escape(body).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        for i in range(1, len(parts) + 1):
            if re.fullmatch(regex, "/".join(parts[:i])):
                result = not neg
                break
    return result


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def build_context(dest: Path) -> list[str]:
    """Copy what Docker would send as the build context into ``dest``; the relative paths."""
    patterns = dockerignore_patterns()
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    sent = sorted(p for p in tracked if (ROOT / p).is_file() and not ignored(p, patterns))
    for rel in sent:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return sent


# -- the file itself --------------------------------------------------------------------------


def test_every_instruction_is_known_and_the_image_runs_xpupool_unprivileged() -> None:
    instructions = parse_dockerfile(DOCKERFILE.read_text())
    all_stages = stages(instructions)
    assert len(all_stages) >= 1
    names = {s[0].rest.split()[-1] for s in all_stages if " as " in s[0].rest.lower()}
    # every --from / from= names an earlier stage
    for ins in instructions:
        refs = [ins.flags.get("from", "")]
        refs += re.findall(r"(?:^|,)from=([^,\s]+)", ins.flags.get("mount", ""))
        for ref in filter(None, refs):
            assert ref in names, f"line {ins.line}: no stage {ref!r}"

    final = all_stages[-1]
    assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-slim(-\w+)?", final[0].rest), final[0].rest
    users = [i for i in final if i.name == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid = users[-1].rest.split(":")[0]
    assert uid not in ("0", "root")
    (entry,) = [i for i in final if i.name == "ENTRYPOINT"]
    argv = json.loads(entry.rest)  # exec form: no shell between the signal and xpupool
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[0] in scripts
    # The runtime stage installs from local wheels only.
    install = " ".join(i.rest for i in final if i.name == "RUN")
    assert "--no-index" in install
    assert "--find-links" in install


def test_parser_refuses_what_docker_refuses() -> None:
    """The checks above can fail: unknown instructions and flags are named with their line."""
    with pytest.raises(ValueError, match="line 2: unknown instruction 'COPPY'"):
        parse_dockerfile("FROM python:3.11-slim\nCOPPY . /src\n")
    with pytest.raises(ValueError, match="line 1: COPY has no flag --owner"):
        parse_dockerfile("COPY --owner=1 . /src\n")


def test_dockerignore_rules() -> None:
    pats = ["*", "!src/", "**/__pycache__"]
    assert ignored("tests/unit/x.py", pats)
    assert not ignored("src/xpupool/cli.py", pats)
    assert ignored("src/xpupool/__pycache__/cli.cpython-311.pyc", pats)


# -- the install it describes -----------------------------------------------------------------


def test_package_installs_from_the_context_into_a_venv(tmp_path: Path) -> None:
    ctx = tmp_path / "context"
    sent = build_context(ctx)
    # Each COPY source of the build stages is in the context.
    for ins in parse_dockerfile(DOCKERFILE.read_text()):
        if ins.name == "COPY" and "from" not in ins.flags:
            *sources, _dest = shlex.split(ins.rest)
            for src in sources:
                assert any(p == src or p.startswith(src.rstrip("/") + "/") for p in sent), src
    assert not any(p.startswith(("tests/", ".venv/", "bench/")) for p in sent)

    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    subprocess.run(
        [*pip_wheel, "--wheel-dir", str(wheels), str(ctx)],
        check=True,
        timeout=300,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    pip_install = [str(py), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    subprocess.run(
        [*pip_install, "--find-links", str(wheels), "xpupool"],
        check=True,
        timeout=300,
    )
    # The dependencies come from this test environment (appended after the venv's own
    # site-packages, whose xpupool therefore wins over the editable one of this checkout).
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    # As in the image: no PYTHONPATH (a test run may point it at this checkout's src/).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [str(py), "-c", "import xpupool, pathlib; print(pathlib.Path(xpupool.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    installed = Path(where)
    assert installed.is_relative_to(site), where
    # Every data file of the package made it into the wheel.
    package = ROOT / "src" / "xpupool"
    data = [
        p.relative_to(package)
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert data, "the package has no data files? the check would be empty"
    for rel in data:
        assert (installed / rel).is_file(), f"{rel} missing from the installed package"

    out = subprocess.run(
        [str(venv / "bin" / "xpupool"), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout
