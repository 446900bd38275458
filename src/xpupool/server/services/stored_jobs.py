"""Jobs an older release stored that this one refuses on submission, settled once on start.

Before issue 18 a job could be stored with a NUL byte or a lone surrogate in its command or
environment: no process can be started with one (``Popen`` raises), so such a job waited forever
as ``running (pid None)`` holding its devices, and a lone surrogate made every listing of it
fail. Such a job is failed on start, with the reason, and its devices are freed (it never ran).
Text that is only shown (a name, a reason, the request) is shown readable instead
(``wire_values.readable``). Queued priorities above their queue's cap, which did not exist then,
come down to the cap (``plane/priority_caps.py``). A waiting job whose placement profile this start does
not know (it came from a ``--profile`` file the server no longer loads) is failed with the reason,
rather than refused by the scheduler at every pass.

The settling is the plane's operation (``server/plane/stored_job_settling.py``); this module keeps
the name the start calls.
"""

from __future__ import annotations

from xpupool.server.plane.stored_job_settling import settle_stored_jobs

__all__ = ["settle_stored_jobs"]
