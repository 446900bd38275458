"""A real PostgreSQL for the tests: Debian's ``initdb`` and ``pg_ctl`` run as the ``postgres``
user (PostgreSQL refuses to run as root) on a cluster in a temporary folder, listening on a free
port of 127.0.0.1 only, trusting local connections (nothing outside the machine reaches it).

One server per test session (:func:`start`), one fresh database per test (:meth:`Postgres.
fresh_database`: ``CREATE DATABASE`` copies ``template0``-made ``xpupool_template``, which is
fast), stopped at the session's end. A missing PostgreSQL is a skip with the reason on a
developer's machine and a FAILURE where the tests must run: ``XPUPOOL_REQUIRE_POSTGRES=1`` or
``CI=1`` (``.ci/run`` sets the first after installing the ``postgresql`` package).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TEMPLATE = "xpupool_template"
USER = "postgres"


def required() -> bool:
    return (
        os.environ.get("CI") in ("1", "true") or os.environ.get("XPUPOOL_REQUIRE_POSTGRES") == "1"
    )


def unavailable(reason: str) -> None:
    """Fail (CI, ``XPUPOOL_REQUIRE_POSTGRES=1``) or skip (a developer's machine) with ``reason``."""
    print(f"postgresql tests: {reason}", file=sys.stderr)
    if required():
        pytest.fail(f"PostgreSQL tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def store_param(store: str) -> Any:
    """``store`` as a test parameter: PostgreSQL's marked ``slow`` (a server process per
    session, a database per test), so ``make test-fast`` runs the SQLite one only."""
    return pytest.param(store, marks=pytest.mark.slow) if store == "postgresql" else store


def bin_dir() -> Path | None:
    """The newest installed ``/usr/lib/postgresql/<major>/bin`` with ``pg_ctl``, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parents[1].name) if Path(p).parents[1].name.isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    """A running cluster: its folder, port and the ``pg_ctl`` that stops it."""

    bin: Path
    root: Path
    port: int
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` (psycopg 3), as ``xpupool up --db`` takes it."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with ``psql`` as the superuser; its output (tuples only)."""
        done = subprocess.run(
            [
                str(self.bin / "psql"),
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                database,
                "-c",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql {statement!r}: {done.stderr.strip()}")
        return done.stdout.strip()

    def fresh_database(self) -> str:
        """A new empty database's URL; each test gets its own, so nothing leaks between them."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url``, ending the sessions still on it."""
        name = url.rsplit("/", 1)[1]
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        _as_postgres(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _as_postgres(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` as the ``postgres`` user when we are root (``runuser``), as ourselves otherwise."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", USER, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stdout}{done.stderr}".strip())
    return done


def start(root: Path) -> Postgres:
    """initdb a cluster in ``root`` (handed to the ``postgres`` user), start it on a free port
    of 127.0.0.1 and make the template database; calls :func:`unavailable` when PostgreSQL is
    missing or cannot run here."""
    found = bin_dir()
    if found is None:
        unavailable("no /usr/lib/postgresql/*/bin/pg_ctl: install Debian's postgresql package")
    assert found is not None
    if os.geteuid() == 0:
        try:
            import pwd

            pw = pwd.getpwnam(USER)
        except KeyError:
            unavailable(f"no {USER} user to run PostgreSQL as (it refuses to run as root)")
        root.mkdir(parents=True, exist_ok=True)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        # the postgres user must reach the folder: every parent searchable
        for parent in root.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)
    pg = Postgres(found, root, free_port())
    _as_postgres(
        [
            str(found / "initdb"),
            "-D",
            str(pg.data),
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={pg.port} -c unix_socket_directories='{root}' "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    started = _as_postgres(
        [
            str(found / "pg_ctl"),
            "-D",
            str(pg.data),
            "-l",
            str(root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=False,
    )
    if started.returncode != 0:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        pg.stop()
        raise RuntimeError(f"pg_ctl start failed: {started.stdout}{started.stderr}{log}")
    pg.sql(f"CREATE DATABASE {TEMPLATE} TEMPLATE template0")
    return pg
