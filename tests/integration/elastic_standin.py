"""A stand-in for an elastic training job (issue 54 part 1), for tests: no torch, one line per
thing it sees of its size. At start it prints ``start size N rank R`` from ``XPUPOOL_REPLICAS``
and ``XPUPOOL_RANK``; at each ``SIGUSR1`` it reads ``XPUPOOL_SIZE_FILE`` and prints ``signal size
N rank R members A,B,...`` (the members' replica numbers in rank order), as docs/jobs.md says a
job does. It runs until stopped. The handler only sets a flag: the loop reads and prints, so a
signal that comes while it prints is not lost and nothing prints inside a handler."""

from __future__ import annotations

import json
import os
import signal
import time

resized = False


def on_resize(_signum: int, _frame: object) -> None:
    global resized
    resized = True


def say(text: str) -> None:
    os.write(1, text.encode() + b"\n")


signal.signal(signal.SIGUSR1, on_resize)
say(f"start size {os.environ['XPUPOOL_REPLICAS']} rank {os.environ['XPUPOOL_RANK']}")
path = os.environ["XPUPOOL_SIZE_FILE"]
while True:
    if resized:
        resized = False
        with open(path) as f:
            world = json.load(f)
        members = ",".join(str(m["replica"]) for m in world["members"])
        say(f"signal size {world['replicas']} rank {world['rank']} members {members}")
    time.sleep(0.05)
