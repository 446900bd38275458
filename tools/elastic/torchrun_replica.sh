#!/bin/bash
# One replica of an elastic xpupool job (replicas=MIN..MAX) running torchrun's elastic mode
# (docs/jobs.md, "torchrun's elastic mode"): the job's command is
#   torchrun_replica.sh MIN:MAX PYTHON TRAIN_SCRIPT [ARGS...]
# with MIN:MAX the job's replicas (torchrun's --nnodes) and PYTHON an interpreter holding torch
# that the job's uid can run. Every replica joins one c10d rendezvous at MASTER_ADDR:MASTER_PORT
# (rank 0's node, the same as the size file's first member, and a port of the job's own), which
# rank 0 hosts (is_host): replica 0, one of the job's MIN replicas, which a shrink never stops.
# torchrun learns who joined or left from the rendezvous, not from the size file, so the size
# signal (SIGUSR1, sent to the whole process group) is ignored; torchrun and its workers inherit
# the ignore.
set -euo pipefail
NNODES=$1
PY=$2
shift 2
trap '' USR1
# torch 2.15 shares the rendezvous's TCPStore with the workers by default, and then a node that
# joins a later round waits for that round's MASTER_ADDR key, which a rank 0 that stays rank 0
# never writes again (its first round's is kept): the grown replica timed out after 60 s
# (docs/hardware-validation.md). Without the sharing every round writes it.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
echo "replica rank ${XPUPOOL_RANK} of ${XPUPOOL_REPLICAS}; rendezvous ${MASTER_ADDR}:${MASTER_PORT}"
HOST=false
[ "$XPUPOOL_RANK" = 0 ] && HOST=true
exec "$PY" -m torch.distributed.run --nnodes="$NNODES" --nproc-per-node=1 \
  --max-restarts=10 --monitor-interval=1 --rdzv-backend=c10d \
  --rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}" --rdzv-id="xpupool-job-${XPUPOOL_JOB_ID}" \
  --rdzv-conf="is_host=${HOST},last_call_timeout=3,join_timeout=120" "$@"
