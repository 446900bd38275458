#!/bin/bash
# Read-only checks on a lent NVIDIA host (docs/hardware-validation.md, "Results 2026-11-30"):
# 1. what NVML answers about MIG mode and the card's GPU-instance profiles, against the catalog's
#    geometry (catalog/data/partitions.yaml); nothing is created, no mode is changed;
# 2. the card's power and clocks idle and under a bf16 load, and the NVML energy counter against
#    the usage meter's energy for the job that caused the load (docs/usage.md);
# 3. torchrun's elastic mode (--nnodes=1:2) inside an elastic xpupool job that grows into room a
#    finished job leaves and shrinks for a pending one (docs/jobs.md, "Elastic jobs"), with the
#    replica command and training loop of tools/elastic/ (torchrun_cpu.sh runs it on CPU).
# Run from the repository root (which jobs, run as a tenant's uid, must be able to read) as root
# with python3 holding torch and nvidia-ml-py; xpupool's
# other dependencies importable or their wheels in .whl/ (tools/hardware/wheels.sh). Output in $OUT/hw.log. No setting of
# the card (MIG mode, clocks, power limit) is changed.
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
[ ! -d .whl ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site
PY=$(command -v python3)
xp() { "$PY" -c "from xpupool.cli import main; main()" "$@"; }
step() { echo; echo "=== $* === $(date -u +%T)"; }
energy() { "$PY" -c "import pynvml as N; N.nvmlInit(); print(N.nvmlDeviceGetTotalEnergyConsumption(N.nvmlDeviceGetHandleByIndex(0)))"; }
{
step host; uname -r; "$PY" --version; nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,mig.mode.current,mig.mode.pending,pstate,power.draw,power.limit,power.max_limit,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu --format=csv

step "every xpupool module imports on this Python"
"$PY" - <<'PY'
import importlib, pkgutil, xpupool
bad = []
for info in pkgutil.walk_packages(xpupool.__path__, "xpupool."):
    try:
        importlib.import_module(info.name)
    except Exception as e:
        bad.append(f"{info.name}: {type(e).__name__}: {str(e)[:300]}")
print("import failures:", len(bad)); print("\n".join(bad[:20]))
PY

step "NVML: MIG mode and GPU-instance profiles (read only)"
"$PY" - <<'PY'
import ctypes
import pynvml as N
from xpupool.catalog.partitions import load_partitions
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
name = N.nvmlDeviceGetName(h)
print("device", name, "driver", N.nvmlSystemGetDriverVersion(), "nvml", N.nvmlSystemGetNVMLVersion())
def ask(label, fn, *a):
    try:
        v = fn(*a); print(label, "->", v); return v
    except N.NVMLError as e:
        print(label, "-> NVMLError", e); return None
ask("nvmlDeviceGetMigMode (current, pending)", N.nvmlDeviceGetMigMode, h)
ask("nvmlDeviceGetMaxMigDeviceCount", N.nvmlDeviceGetMaxMigDeviceCount, h)
seen = {}
for pid in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
    try:
        info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, pid)
    except N.NVMLError as e:
        print(f"profile index {pid}: NVMLError {e}"); continue
    pname = getattr(info, "name", b"")
    pname = pname.decode() if isinstance(pname, bytes) else str(pname)
    try:  # the C call's two-step form: the count first, then the array
        count = ctypes.c_uint(0)
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, None, ctypes.byref(count))
        arr = (N.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, ctypes.byref(count))
        starts = sorted((arr[i].start, arr[i].size) for i in range(count.value))
    except (N.NVMLError, AttributeError, TypeError) as e:
        starts = f"placements: {type(e).__name__} {e}"
    print(f"profile index {pid}: id={info.id} name={pname!r} slices={info.sliceCount} instances={info.instanceCount} "
          f"memory_mib={info.memorySizeMB} copy_engines={info.copyEngineCount} decoders={info.decoderCount} "
          f"encoders={info.encoderCount} jpeg={info.jpegCount} ofa={info.ofaCount} starts={starts}")
    seen[pname] = (info.sliceCount, info.instanceCount, info.memorySizeMB, starts)
scheme = None
for model in ("H200-SXM5-141GB", "H100-SXM5-80GB"):
    try:
        scheme = load_partitions().scheme_for(model)
    except Exception as e:  # the method's name is the catalog's; print what it says
        print("catalog:", type(e).__name__, e)
    if scheme is not None:
        print("catalog scheme for", model)
        break
if scheme is not None:
    for p in scheme.profiles:
        nv = next((v for k, v in seen.items() if k.replace("MIG ", "") == p.name), None)
        print(f"  catalog {p.name}: compute={p.compute} memory_slices={p.memory_slices} memory_mib={p.memory_mib} starts={list(p.starts)} max={p.max_instances} | nvml {nv}")
PY

step "power and clocks idle (10 samples, 1 s apart)"
for i in $(seq 8); do nvidia-smi --query-gpu=timestamp,pstate,power.draw,clocks.sm,clocks.mem,utilization.gpu,temperature.gpu --format=csv,noheader; sleep 1; done

step "up with the in-process agent"
D=$(mktemp -d); chmod 755 $D
xp up --data $D --port 8080 --heartbeat 1 --lost-after 20 --usage-interval 5s --history-interval 2s > $D/up.log 2>&1 &
for i in $(seq 120); do curl -sf localhost:8080/healthz >/dev/null && break; sleep 0.5; done
sleep 3; tail -3 $D/up.log
export XPUPOOL_TOKEN=$(cat $D/admin-token) XPUPOOL_URL=http://127.0.0.1:8080
ADMIN=$XPUPOOL_TOKEN
api() { curl -s -H "Authorization: Bearer $ADMIN" "localhost:8080$1"; echo; }
xp nodes; xp devices
xp tenant create team >/dev/null; eval "$(xp token issue team | grep ^export)"

step "a bf16 job under the meter: NVML's energy counter against the usage records"
# the load is passed inline: a root agent gives each job a /tmp of its own, so a file the script
# wrote there would not be the job's
LOAD='import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 20:
    for _ in range(10):
        b = a @ a
    torch.cuda.synchronize()
print("done")'
E0=$(energy); T0=$(date +%s.%N)
J=$(xp submit "H200 mem=40Gi" -- "$PY" -c "$LOAD" | grep -oE '^job [0-9]+' | grep -oE '[0-9]+'); echo "job $J"
for i in $(seq 20); do sleep 1; nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,utilization.gpu --format=csv,noheader; done
for i in $(seq 60); do S=$(xp job $J -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["state"])'); case $S in succeeded|failed|cancelled) break;; esac; sleep 1; done; echo "job $J $S"
E1=$(energy); T1=$(date +%s.%N)
"$PY" -c "print(f'NVML energy over submit..finished: {($E1 - $E0) / 1000:.1f} J in {$T1 - $T0:.1f} s')"
sleep 8
export XPUPOOL_TOKEN=$ADMIN
api "/v1/jobs/$J" | head -c 3000; echo
api "/v1/usage?by=tenant,model&step=hour"
api "/v1/fleet/power"
sleep 5; step "power after the job (idle again)"; api "/v1/fleet/power"
nvidia-smi --query-gpu=pstate,power.draw,clocks.sm --format=csv,noheader

step "torchrun --nnodes=1:2 in an elastic job: grows when a job ends, shrinks for a pending one"
# the replicas run tools/elastic/torchrun_replica.sh and elastic_train.py in place (shared with
# tools/elastic/torchrun_cpu.sh, which runs the same scenario on CPU): the repository must let
# other uids through, as jobs run as a tenant's uid
EL=$PWD/tools/elastic
eval "$(XPUPOOL_TOKEN=$ADMIN xp token issue team | grep ^export)"
B=$(xp submit "H200 mem=100Gi" -- /bin/sleep 30 | grep -oE '^job [0-9]+' | grep -oE '[0-9]+'); echo "blocker $B"
sleep 2
EJ=$(xp submit "H200 mem=30Gi replicas=1..2" -- "$EL/torchrun_replica.sh" 1:2 "$PY" "$EL/elastic_train.py" --device cuda | grep -oE '^job [0-9]+' | grep -oE '[0-9]+'); echo "elastic $EJ"
sleep 60
P=$(xp submit "H200 mem=100Gi" -- /bin/sleep 20 | grep -oE '^job [0-9]+' | grep -oE '[0-9]+'); echo "pending $P"
sleep 35
export XPUPOOL_TOKEN=$ADMIN
xp job $EJ 2>&1 | tail -30
for r in 0 1; do echo "--- replica $r log"; xp logs $EJ --replica $r 2>&1 | tail -40; done
xp cancel $EJ >/dev/null 2>&1
step "server log tail"; tail -15 $D/up.log
} 2>&1 | tee $OUT/hw.log
