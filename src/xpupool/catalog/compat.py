"""Can this device's driver run that software? Verdicts from the driver/runtime tables.

A request says ``cuda>=12.4``, ``cann>=8.0.RC1``, ``rocm==6.1`` or ``torch==2.4``; a device reports
its vendor, driver version and, sometimes, runtime versions (``nvidia-smi`` prints the newest CUDA
the driver serves). :meth:`CompatTable.check` turns those into a :class:`Verdict` using the tables in
``data/compat.yaml`` (NVIDIA's toolkit-driver table, AMD's user/kernel-space matrix, Ascend's
CANN-driver pairings, PyTorch's build matrix). It is pure and does no I/O, so the engine can call it
once per distinct (vendor, driver, runtimes) profile and cache the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, lru_cache
from importlib.resources import files
from itertools import pairwise
from pathlib import Path

from xpupool.catalog._data_file import Entry, read_yaml
from xpupool.model.request import SoftwareNeed
from xpupool.model.vendor import VENDOR_KEYS
from xpupool.model.version import Version, compare, parse_version

RUNTIMES: tuple[str, ...] = ("cuda", "rocm", "cann")


class Verdict(IntEnum):
    """Outcome of one software need on one device profile (stable codes; the engine maps them)."""

    OK = 0
    UNSUPPORTED = 1  # this vendor cannot run that software at all (CUDA on Ascend)
    DRIVER_TOO_OLD = 2  # a newer driver would run it
    DRIVER_TOO_NEW = 3  # an older driver would run it (ROCm's +/-2 window)
    DRIVER_UNKNOWN = 4  # the device reports no usable driver version, or the tables cannot say


# Best first: when several builds or versions could serve a need, the most hopeful verdict wins.
_PREFERENCE: dict[Verdict, int] = {
    Verdict.OK: 0,
    Verdict.DRIVER_TOO_OLD: 1,
    Verdict.DRIVER_TOO_NEW: 2,
    Verdict.DRIVER_UNKNOWN: 3,
    Verdict.UNSUPPORTED: 4,
}


def best_verdict(verdicts: list[Verdict]) -> Verdict:
    """The most hopeful verdict: OK > TOO_OLD > TOO_NEW > UNKNOWN > UNSUPPORTED (UNSUPPORTED if none)."""
    return min(verdicts, key=_PREFERENCE.__getitem__, default=Verdict.UNSUPPORTED)


def satisfies(version: Version, op: str, wanted: Version) -> bool:
    """``version op wanted``, where ``==``/``!=`` compare only as many components as ``wanted``
    gives: ``torch==2.4`` accepts 2.4.1, ``cuda==12.4`` accepts 12.4.1, ``cann==8.0.RC3`` only RC3."""
    if op in ("==", "!="):
        key = version.key + ((1, 0),) * max(0, len(wanted.key) - len(version.key))
        same = key[: len(wanted.key)] == wanted.key
        return same if op == "==" else not same
    return compare(version, op, wanted)


@dataclass(frozen=True, slots=True)
class DriverRange:
    """One runtime version and the drivers that run it: ``min_driver <= driver < max_driver``."""

    version: Version
    min_driver: Version
    max_driver: Version | None = None
    firmware: str = ""
    notes: str = ""

    def verdict(self, driver: Version) -> Verdict:
        if driver < self.min_driver:
            return Verdict.DRIVER_TOO_OLD
        if self.max_driver is not None and driver >= self.max_driver:
            return Verdict.DRIVER_TOO_NEW
        return Verdict.OK


@dataclass(frozen=True, slots=True)
class RuntimeTable:
    """Driver ranges of one runtime (cuda, rocm, cann), sorted by version; see compat.yaml."""

    name: str
    source: str
    vendors: frozenset[str]
    vendors_if_reported: frozenset[str]
    backward_compatible: bool
    reported_is_max: bool
    rows: tuple[DriverRange, ...]

    def row_for(self, version: Version) -> DriverRange | None:
        """The row with the greatest version <= ``version`` (12.7 -> 12.6.3), or None if older."""
        found = None
        for row in self.rows:
            if row.version <= version:
                found = row
        return found


@dataclass(frozen=True, slots=True)
class TorchBuild:
    runtime: str
    version: Version


class CompatTable:
    """The loaded tables; :meth:`check` answers one need for one device profile, without I/O."""

    def __init__(
        self,
        runtimes: Mapping[str, RuntimeTable],
        torch: tuple[tuple[Version, tuple[TorchBuild, ...]], ...],
    ) -> None:
        self.runtimes = dict(runtimes)
        self.torch = torch

    def min_driver(self, runtime: str, version: Version) -> Version | None:
        """Lowest driver that runs ``runtime`` ``version`` (a version between rows uses the row
        below it: CUDA 12.7 -> 12.6.3's driver), or None when the runtime or version is unknown."""
        table = self.runtimes.get(runtime)
        row = table.row_for(version) if table is not None else None
        return row.min_driver if row is not None else None

    def needed_driver(
        self,
        need: SoftwareNeed,
        vendor: str,
        driver_version: str | None,
    ) -> Version | None:
        """The lowest driver of ``vendor`` that the tables say runs ``need``, above
        ``driver_version`` when that is given (the upgrade a DRIVER_TOO_OLD verdict asks for:
        ``cuda>=12.4`` on 525.85.12 -> 550.54.14). The rows tried are those :meth:`check` tries:
        every table version that satisfies the need (for torch: every build of every release
        that satisfies it, on a runtime the vendor runs), or the stand-in row below the version
        asked. None when the driver runs one of them already, when no row's minimum is above
        it, or when the vendor runs no such runtime. Pure; the engine calls it once per
        (need, profile) to word its reason."""
        if need.name == "torch":
            wanted = [
                (build.runtime, "==", build.version)
                for builds in self._torch_releases(need)
                for build in builds
            ]
        else:
            wanted = [(need.name, need.op, need.version)]
        driver = _parsed(driver_version)
        found: Version | None = None
        for runtime, op, version in wanted:
            table = self.runtimes.get(runtime)
            if table is None or not (
                vendor in table.vendors or vendor in table.vendors_if_reported
            ):
                continue
            rows = [row for row in table.rows if satisfies(row.version, op, version)]
            if not rows:
                stand_in = table.row_for(version)
                rows = [stand_in] if stand_in is not None else [table.rows[0]]
            for row in rows:
                if driver is not None and row.verdict(driver) == Verdict.OK:
                    return None  # it runs already: no upgrade to ask for
                if driver is not None and row.min_driver <= driver:
                    continue
                if found is None or row.min_driver < found:
                    found = row.min_driver
        return found

    def _torch_releases(self, need: SoftwareNeed) -> list[tuple[TorchBuild, ...]]:
        """The builds of every listed release that satisfies ``need``; when none does, those of
        the release below the version asked (none when older than the table)."""
        releases = [
            builds for version, builds in self.torch if satisfies(version, need.op, need.version)
        ]
        if not releases:
            below = [builds for version, builds in self.torch if version <= need.version]
            releases = below[-1:]
        return releases

    def check(
        self,
        need: SoftwareNeed,
        vendor: str,
        driver_version: str | None,
        runtimes: Mapping[str, str],
    ) -> Verdict:
        """Can a device of ``vendor`` with ``driver_version`` and reported ``runtimes`` meet ``need``?

        Runtimes (cuda, rocm, cann):
        - UNSUPPORTED when the vendor does not run that runtime (a vendor listed under
          ``vendors_if_reported`` runs it only when ``runtimes`` names it).
        - A reported runtime wins over the driver tables. CUDA reports the newest version the driver
          serves: the need is met when some version it allows is <= that (``cuda>=12.4`` with 12.4
          reported is OK; ``cuda>=12.6`` is DRIVER_TOO_OLD). ROCm and CANN report the installed
          version, compared with the need directly (older -> TOO_OLD, newer -> TOO_NEW).
        - Otherwise the driver decides: no driver version -> DRIVER_UNKNOWN; else the table versions
          that satisfy the need are tried and the need is met if the driver runs ANY of them.
          When no table version satisfies it (``cuda==12.7``, ``cuda>=14``) the row below the
          requested version stands in for it (12.6.3; the newest row), so versions newer than the
          table are assumed to need at least the newest known driver - optimistic, and documented.
          A need older than every row is met by a driver that runs the oldest row when the runtime
          is backward compatible (CUDA), else DRIVER_UNKNOWN.
        torch: the builds of every listed release that satisfies the need (``torch>=2.3`` -> 2.3.0
        ... 2.5.1) are each checked as ``<runtime>==<build version>``; the best verdict wins
        (OK > DRIVER_TOO_OLD > DRIVER_TOO_NEW > DRIVER_UNKNOWN > UNSUPPORTED). A release missing
        from the table uses the release below it; one older than the table is DRIVER_UNKNOWN.
        """
        if need.name == "torch":
            return self._check_torch(need, vendor, driver_version, runtimes)
        return self._check_runtime(
            need.name, need.op, need.version, vendor, driver_version, runtimes
        )

    def _check_torch(
        self,
        need: SoftwareNeed,
        vendor: str,
        driver_version: str | None,
        runtimes: Mapping[str, str],
    ) -> Verdict:
        releases = self._torch_releases(need)
        if not releases:
            return Verdict.DRIVER_UNKNOWN
        verdicts = [
            self._check_runtime(
                build.runtime, "==", build.version, vendor, driver_version, runtimes
            )
            for builds in releases
            for build in builds
        ]
        return best_verdict(verdicts)

    def _check_runtime(
        self,
        name: str,
        op: str,
        wanted: Version,
        vendor: str,
        driver_version: str | None,
        runtimes: Mapping[str, str],
    ) -> Verdict:
        table = self.runtimes.get(name)
        if table is None:
            return Verdict.UNSUPPORTED
        reported = _parsed(runtimes.get(name))
        if vendor not in table.vendors and not (
            reported is not None and vendor in table.vendors_if_reported
        ):
            return Verdict.UNSUPPORTED
        if reported is not None:
            return _check_reported(table, op, wanted, reported)
        driver = _parsed(driver_version)
        if driver is None:
            return Verdict.DRIVER_UNKNOWN
        candidates = [row for row in table.rows if satisfies(row.version, op, wanted)]
        if not candidates:
            stand_in = table.row_for(wanted)
            if stand_in is None:
                if table.backward_compatible and table.rows[0].verdict(driver) == Verdict.OK:
                    return Verdict.OK
                return Verdict.DRIVER_UNKNOWN
            candidates = [stand_in]
        return best_verdict([row.verdict(driver) for row in candidates])


def _check_reported(table: RuntimeTable, op: str, wanted: Version, reported: Version) -> Verdict:
    if table.reported_is_max:
        # Some version v <= reported with `v op wanted` exists: older versions always do for
        # <, <= and != (the driver serves everything below its maximum).
        if op in ("<", "<=", "!="):
            return Verdict.OK
        # The report is a prefix: "12.4" (CUDA's driver API version, nvidia-smi's "CUDA
        # Version") serves every 12.4.x update, so cuda>=12.4.1, ==12.4.1 and >12.4 are met by
        # it. For >, >= and == some served version qualifies iff the wanted version cut to the
        # report's length is not above it.
        parts = sum(1 for rank, _ in reported.key if rank == 1)
        cut = parse_version(".".join(str(n) for n in wanted.release(parts)))
        return Verdict.OK if reported >= cut else Verdict.DRIVER_TOO_OLD
    if satisfies(reported, op, wanted):
        return Verdict.OK
    return Verdict.DRIVER_TOO_OLD if reported < wanted else Verdict.DRIVER_TOO_NEW


@lru_cache(maxsize=4096)
def _parsed(text: str | None) -> Version | None:
    """A driver/runtime version as probes report it; None when absent or not a version."""
    if text is None:
        return None
    try:
        return parse_version(text)
    except ValueError:
        return None


def load_compat(path: str | Path | None = None) -> CompatTable:
    """Load the tables from ``path``, or the packaged data when None (parsed once, then cached).

    Raises :class:`~xpupool.catalog.CatalogFileError` naming the file, the entry
    (``cuda.versions[3]``) and the field when the file is malformed.
    """
    if path is None:
        return _packaged_compat()
    return _parse(read_yaml(Path(path), str(path)), str(path))


@cache
def _packaged_compat() -> CompatTable:
    source = files("xpupool.catalog") / "data" / "compat.yaml"
    return _parse(read_yaml(source, "compat.yaml"), "compat.yaml")


_TABLE_FIELDS = frozenset(
    {
        "source",
        "vendors",
        "vendors_if_reported",
        "backward_compatible",
        "reported_runtime",
        "versions",
        "notes",
        "minor_version_compatibility",
    }
)
_ROW_FIELDS = frozenset({"version", "min_driver", "max_driver", "firmware", "notes"})


def _parse(document: object, label: str) -> CompatTable:
    top = Entry(label, "", document, frozenset({*RUNTIMES, "torch"}))
    tables = {name: _parse_runtime(label, name, top.raw(name)) for name in RUNTIMES}
    return CompatTable(tables, _parse_torch(label, top.raw("torch")))


def _parse_runtime(label: str, name: str, data: object) -> RuntimeTable:
    table = Entry(label, name, data, _TABLE_FIELDS)
    vendors = _vendor_set(table, "vendors")
    if not vendors:
        raise table.error("vendors", "expected at least one vendor")
    backward = table.raw("backward_compatible")
    if not isinstance(backward, bool):
        raise table.error("backward_compatible", f"expected true or false, got {backward!r}")
    reported = table.text("reported_runtime")
    if reported not in ("max", "installed"):
        raise table.error("reported_runtime", f"expected 'max' or 'installed', got {reported!r}")
    rows = []
    for index, raw_row in enumerate(_entry_list(table, "versions")):
        row = Entry(label, f"{name}.versions[{index}]", raw_row, _ROW_FIELDS)
        version, min_driver = row.version("version"), row.version("min_driver")
        assert version is not None and min_driver is not None
        max_driver = row.version("max_driver", required=False)
        if max_driver is not None and max_driver <= min_driver:
            raise row.error("max_driver", f"must be above min_driver {min_driver}")
        rows.append(
            DriverRange(
                version,
                min_driver,
                max_driver,
                row.optional_text("firmware"),
                row.optional_text("notes"),
            )
        )
    rows.sort(key=lambda r: r.version)
    for before, after in pairwise(rows):
        if before.version == after.version:
            raise table.error("versions", f"version {after.version} is listed twice")
    return RuntimeTable(
        name=name,
        source=table.source(),
        vendors=vendors,
        vendors_if_reported=_vendor_set(table, "vendors_if_reported"),
        backward_compatible=backward,
        reported_is_max=reported == "max",
        rows=tuple(rows),
    )


def _parse_torch(label: str, data: object) -> tuple[tuple[Version, tuple[TorchBuild, ...]], ...]:
    table = Entry(label, "torch", data, frozenset({"source", "notes", "versions"}))
    table.source()
    releases = []
    for index, raw_release in enumerate(_entry_list(table, "versions")):
        where = f"torch.versions[{index}]"
        release = Entry(label, where, raw_release, frozenset({"version", "builds", "notes"}))
        version = release.version("version")
        assert version is not None
        builds = []
        for b_index, raw_build in enumerate(_entry_list(release, "builds")):
            build = Entry(
                label, f"{where}.builds[{b_index}]", raw_build, frozenset({"runtime", "version"})
            )
            runtime = build.text("runtime")
            if runtime not in RUNTIMES:
                raise build.error(
                    "runtime", f"expected one of {', '.join(RUNTIMES)}, got {runtime!r}"
                )
            build_version = build.version("version")
            assert build_version is not None
            builds.append(TorchBuild(runtime, build_version))
        releases.append((version, tuple(builds)))
    releases.sort(key=lambda r: r[0])
    return tuple(releases)


def _entry_list(entry: Entry, field: str) -> list[object]:
    value = entry.raw(field)
    if not isinstance(value, list) or not value:
        raise entry.error(field, "expected a non-empty list")
    return value


def _vendor_set(entry: Entry, field: str) -> frozenset[str]:
    names = entry.text_list(field)
    for name in names:
        if name not in VENDOR_KEYS:
            raise entry.error(field, f"unknown vendor {name!r}; known: {', '.join(VENDOR_KEYS)}")
    return frozenset(names)
