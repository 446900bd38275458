"""Make ``tests/factories.py`` importable as ``factories`` from every test folder, and mark each
test by the folder it lives in (tests/markers.py, issue 44 part 9), so that ``make test-fast`` can
leave out everything that starts servers, browsers or clusters without each module saying so; and
the real PostgreSQL the store's tests run on (``postgres``, ``pg_url``, ``store_url``:
tests/postgres.py). Hypothesis's timing checks are off for every property (a property's own
``settings`` still apply): on a two-core machine running other work, input generation "too slow"
and per-example deadlines fail properties that are correct; what a property checks is its
assertion, never its speed."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from markers import folder_marker
from postgres import Postgres, store_param
from postgres import start as start_postgres

settings.register_profile("xpupool", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("xpupool")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = folder_marker(Path(item.path))
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """One real PostgreSQL for the session (tests/postgres.py), stopped at its end; a skip where
    it is missing, a failure where it is required (``XPUPOOL_REQUIRE_POSTGRES=1``)."""
    pg = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def pg_url(postgres: Postgres) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL: its SQLAlchemy URL; dropped after
    the test, with whatever connections it left open."""
    url = postgres.fresh_database()
    yield url
    postgres.drop_database(url)


@pytest.fixture(params=[store_param("sqlite"), store_param("postgresql")])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's URL, once on a SQLite file and once on a fresh PostgreSQL database: the tests
    of the store run on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return str(request.getfixturevalue("pg_url"))
