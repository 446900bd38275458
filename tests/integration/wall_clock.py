"""A wall clock a test steps under a running process, as NTP or ``date -s`` steps a host's.

libfaketime (Debian's ``faketime`` package; ``.ci/run`` installs it) is preloaded with only the
wall clock faked (``FAKETIME_DONT_FAKE_MONOTONIC``): CLOCK_MONOTONIC stays the system's, as in a
real step. It reads the offset from a file, again at most a second after it last did
(``FAKETIME_CACHE_DURATION``; with no cache at all every ``time.time()`` opens the file, 25 times
slower), so :meth:`WallClock.step` takes effect within a second in every process started with
:meth:`WallClock.env`, and in their children. File times are left alone (``NO_FAKE_STAT``):
nothing of xpupool decides by them.

Debian's libfaketime 0.9.10 shifts the absolute CLOCK_MONOTONIC deadline of ``clock_nanosleep``
even then (wolfcw/libfaketime#426, fixed upstream after 0.9.10), and Python 3.11's
``time.sleep`` sleeps that way: every sleep failed with EINVAL. A small library preloaded before
it (:data:`MONOTONIC_SLEEP_C`, built here with the C compiler) hands monotonic sleeps to the
kernel as they are; every other call goes on to libfaketime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

MONOTONIC_SLEEP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
typedef int (*sleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);
int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem) {
    static sleep_fn next;
    if (clock == CLOCK_MONOTONIC)
        return syscall(SYS_clock_nanosleep, clock, flags, req, rem) == 0 ? 0 : errno;
    if (next == NULL)
        next = (sleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock, flags, req, rem);
}
"""


def libfaketime() -> Path:
    """Debian's preload library (package ``libfaketime``, a dependency of ``faketime``).
    Missing, the test fails: it is a real part, never skipped."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    found += sorted(Path("/usr/lib/faketime").glob("libfaketime.so.1"))
    assert found, "libfaketime.so.1 not found: apt-get install faketime"
    return found[0]


class WallClock:
    """The wall clock of the processes started with :meth:`env`: ``offset_s`` from the real one.
    ``folder`` keeps the offset file and the sleep library."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "offset"
        self.offset_s = 0
        self._write()
        gcc = shutil.which("gcc") or shutil.which("cc")
        assert gcc is not None, "a C compiler is needed to build the monotonic sleep library"
        source = folder / "monotonic_sleep.c"
        source.write_text(MONOTONIC_SLEEP_C)
        self.sleep_library = folder / "monotonic_sleep.so"
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-o", str(self.sleep_library), str(source), "-ldl"],
            check=True,
        )

    def env(self) -> dict[str, str]:
        """This process's environment, with the stepped wall clock preloaded."""
        return {
            **os.environ,
            "LD_PRELOAD": f"{self.sleep_library} {libfaketime()}",
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_CACHE_DURATION": "1",
            "NO_FAKE_STAT": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def step(self, seconds: int) -> None:
        """Move the wall clock by ``seconds`` (back when negative), within a second."""
        self.offset_s += seconds
        self._write()

    def _write(self) -> None:
        new = self.path.with_suffix(".new")  # renamed into place: never read half written
        new.write_text(f"{self.offset_s:+d}\n")
        new.replace(self.path)
