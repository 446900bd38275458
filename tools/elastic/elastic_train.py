"""A tiny training loop for torchrun's elastic mode inside an elastic xpupool job (docs/jobs.md,
"Elastic jobs"): one matmul step and one gloo all_reduce of a one per rank every two seconds, each
printed with the rank and world size torchrun gave this worker. The all_reduce's sum is the world
size, so the log shows each rendezvous's world. Needs torch; run by tools/elastic/torchrun_cpu.sh
(device cpu) and tools/hardware/mig_power_elastic.sh (device cuda), never by the test suite.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
env = os.environ.get
print(
    f"start rank={rank} world={world} restart={env('TORCHELASTIC_RESTART_COUNT')} "
    f"XPUPOOL_REPLICAS={env('XPUPOOL_REPLICAS')} XPUPOOL_RANK={env('XPUPOOL_RANK')}",
    flush=True,
)
if args.device == "cuda":
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
else:
    a = torch.randn(256, 256)
started = time.time()
while time.time() - started < args.seconds:
    for _ in range(10):
        a = (a @ a).clamp_(-1, 1)
    if args.device == "cuda":
        torch.cuda.synchronize()
    x = torch.ones(1)
    dist.all_reduce(x)
    at = time.strftime("%H:%M:%S", time.gmtime())
    print(f"{at} rank={rank} world={world} allreduce={x.item():.0f}", flush=True)
    time.sleep(2)
dist.destroy_process_group()
