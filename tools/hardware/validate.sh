#!/bin/bash
# Hardware validation on a GPU host (docs/hardware-validation.md): probe, agent metrics, a
# fractional CUDA job under a tenant's uid, the catalog's verdicts for the real driver, plan on the
# real pool, the Kubernetes node agent's annotations. Run from the repository root as root with
# xpupool's dependencies importable (or their wheels in .whl/); output in $OUT/hw.log.
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
[ ! -d .whl ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site
L=$OUT/hw.log
xp() { python3 -c "from xpupool.cli import main; main()" "$@"; }
step() { echo; echo "=== $* ==="; }
{
step host; date -u; uname -r; python3 --version; nvidia-smi -L; nvidia-smi --query-gpu=name,uuid,memory.total,driver_version,power.draw,temperature.gpu,utilization.gpu --format=csv
nvidia-smi | head -5
step "xpupool probe"; xp probe; xp probe -o json > $OUT/probe.json; head -c 1500 $OUT/probe.json; echo
step "up with the in-process agent"
D=$(mktemp -d); chmod 755 $D
xp up --data $D --port 8080 --heartbeat 1 --lost-after 10 --history-interval 2s > $D/up.log 2>&1 &
for i in $(seq 60); do curl -sf localhost:8080/healthz >/dev/null && break; sleep 0.5; done
sleep 4; tail -5 $D/up.log
export XPUPOOL_TOKEN=$(cat $D/admin-token) XPUPOOL_URL=http://127.0.0.1:8080
xp nodes; xp devices
step metrics; curl -s -H "Authorization: Bearer $(cat $D/admin-token)" localhost:8080/metrics | grep -E '^xpupool_device_(memory_used|utilization|power|temperature)' | head -12
step "tenant + fractional CUDA job"
xp tenant create team; eval "$(xp token issue team | grep ^export)"
cat > /tmp/cuda_job.py <<'PY'
import ctypes, os
cuda = ctypes.CDLL("libcuda.so.1"); assert cuda.cuInit(0) == 0
n = ctypes.c_int(); cuda.cuDeviceGetCount(ctypes.byref(n))
print("uid", os.getuid(), "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), "count", n.value)
dev = ctypes.c_int(); cuda.cuDeviceGet(ctypes.byref(dev), 0); ctx = ctypes.c_void_p()
print("ctx", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
p = ctypes.c_uint64(); print("alloc 8 GiB (inside the 20 GiB grant) ->", cuda.cuMemAlloc_v2(ctypes.byref(p), 8 << 30))
q = ctypes.c_uint64(); print("alloc 24 GiB more (past the grant) ->", cuda.cuMemAlloc_v2(ctypes.byref(q), 24 << 30))
import time; time.sleep(4)
for k in sorted(os.environ):
    if k.startswith(("XPUPOOL", "CUDA", "NVIDIA")): print(k, "=", os.environ[k])
try: open(os.environ.get("ADMIN_TOKEN_PATH", "/nonexistent")).read(); print("ADMIN TOKEN READABLE")
except OSError as e: print("admin token:", type(e).__name__, e.errno)
PY
cp /tmp/cuda_job.py $D/cuda_job.py 2>/dev/null; chmod 644 /tmp/cuda_job.py
xp submit "H100 mem=20Gi cores=50%" --env ADMIN_TOKEN_PATH=$D/admin-token --wait --until finished --timeout 90 -- $(command -v python3) /tmp/cuda_job.py
xp job 1; xp logs 1
step "metrics while a job holds memory"
xp submit "H100 mem=30Gi" -- $(command -v python3) -c "import torch,time; x=torch.empty(10<<30,dtype=torch.uint8,device='cuda'); a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); t=time.time()
while time.time()-t<14: a@a"
sleep 10; curl -s -H "Authorization: Bearer $(cat $D/admin-token)" localhost:8080/metrics | grep -E '^xpupool_device_(memory_used|utilization|power)'; xp devices; nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv
export XPUPOOL_TOKEN=$(cat $D/admin-token)
curl -s -H "Authorization: Bearer $XPUPOOL_TOKEN" localhost:8080/v1/fleet/overview > $OUT/overview.json; head -c 1500 $OUT/overview.json; echo
step "software verdicts for this driver"
python3 - <<'PY'
import json
from xpupool.probes import host_probes
from xpupool.catalog.compat import load_compat
from xpupool.catalog.images import default_image_catalog
from xpupool.model.request import parse_software_need
devs = [d for p in host_probes() if p.available() for d in p.discover()]
print(devs[:1])
cat = default_image_catalog()
for img in ["pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", "vllm/vllm-openai:v0.8.5", "nvcr.io/nvidia/pytorch:24.05-py3", "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0"]:
    n = cat.needs_for(img); print(img, "->", [str(s) for s in n.software], n.notes)
PY
step "plan and submit --model on this pool"
xp plan --model qwen2.5-7b --task serve 2>&1 | head -6
xp plan --model qwen2.5-72b --task serve 2>&1 | head -8
xp submit --model qwen2.5-7b --task serve --tenant team --dry-run 2>&1 | head -30
step "k8s node agent annotations from the real probe"
python3 - <<'PY'
from xpupool.agent.monitor import Monitor
from xpupool.probes import host_probes
from xpupool.k8s.node_agent.hami_register import hami_register_annotations
from xpupool.agent.inventory import device_in
from xpupool.k8s.codec.node_annotations import encode_devices
r = Monitor(host_probes()).read()
print("devices annotation:", encode_devices([x for x in (device_in(d) for d in r.devices) if x])[:800])
print("hami:", dict(hami_register_annotations(r.devices)))
PY
step "server log tail"; tail -20 $D/up.log
} > $L 2>&1
cp $L $OUT/ 2>/dev/null; true
pkill -f "up --data" || true
