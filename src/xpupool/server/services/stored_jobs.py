"""Jobs an older release stored that this one refuses on submission, settled once on start: the
plane's operation (``server/plane/stored_job_settling.py`` says what is settled and why); this
module keeps the name the start calls.
"""

from __future__ import annotations

from xpupool.server.plane.stored_job_settling import settle_stored_jobs

__all__ = ["settle_stored_jobs"]
