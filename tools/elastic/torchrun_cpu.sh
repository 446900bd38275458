#!/bin/bash
# torchrun's elastic mode (--nnodes=1:2) inside an elastic xpupool job, on CPU (gloo) and fake
# cards: the contract of docs/jobs.md ("Elastic jobs", "torchrun's elastic mode") checked with a
# real torch, where tests/integration/test_elastic_jobs.py checks it with a stand-in program.
# It starts `xpupool up` (a temporary data dir, a free port on 127.0.0.1) and one agent with two
# fake A100s (tests/fixtures/agent/fake-a100x2.yaml, as the integration tests), then: a blocker job
# holds one card; an elastic job `A100:1 replicas=1..2` runs tools/elastic/torchrun_replica.sh
# (torchrun, c10d rendezvous, a gloo all_reduce loop: tools/elastic/elastic_train.py) at one
# replica; the blocker is cancelled and the job grows to two (torchrun re-rendezvouses, world 2);
# a job needing the card is submitted and the job shrinks to one (world 1 again). It prints what
# each replica logged and the job's events, and exits non-zero unless replica 0's workers saw the
# world sizes 1, 2, 1 in that order (and replica 1's saw 2).
#
#   TORCH_PY=/var/cache/xpupool/torch-venv/bin/python tools/elastic/torchrun_cpu.sh
#
# TORCH_PY: a Python holding torch with gloo. PyPI's torch is the CUDA build: it runs on CPU
# but does not import without its nvidia-* wheels (`pip install --no-deps torch` is not enough).
# Run as root, the agent runs jobs as a tenant's uid with a /tmp of their own, so TORCH_PY, this
# folder and every folder above them must let any uid through (a venv made from /usr/bin/python3
# under /var/cache, not one under /root or /tmp). XPUPOOL_PY (default .venv/bin/python) runs the
# server, the agent and the CLI. Run from the repository root; KEEP=1 keeps the temporary folder
# (logs, data dir), which is also kept on failure. Not run in CI: torch is too big for the
# project's dependencies, and no test needs it. Result: docs/hardware-validation.md.
set -euo pipefail
: "${TORCH_PY:?set TORCH_PY to a python with torch}"
XP_PY=${XPUPOOL_PY:-.venv/bin/python}
WAIT_S=${WAIT_S:-300}
FAKE=tests/fixtures/agent/fake-a100x2.yaml
[ -f "$FAKE" ] && [ -x "$XP_PY" ] || { echo "run from the repository root, with $XP_PY" >&2; exit 2; }
# the physical folder, the name kept: a venv's python is a link its venv is found through
TORCH_PY=$(cd "$(dirname "$TORCH_PY")" && pwd -P)/$(basename "$TORCH_PY")
TORCH_VERSION=$("$TORCH_PY" -c 'import torch, torch.distributed as d
assert d.is_available() and d.is_gloo_available(), "torch.distributed with gloo"
print(torch.__version__)')
# the jobs run the repository's own files, in place: a root agent gives each job a /tmp of its
# own (docs/agent.md), so nothing is copied there
JOB_DIR=$PWD/tools/elastic
if [ "$(id -u)" = 0 ]; then
  "$XP_PY" - "$TORCH_PY" "$JOB_DIR/torchrun_replica.sh" "$JOB_DIR/elastic_train.py" <<'PY' || exit 2
import stat, sys
from pathlib import Path
for given in map(Path, sys.argv[1:]):
    for path in (given, given.resolve()):
        for p in (path, *path.parents):
            if not p.stat().st_mode & (stat.S_IXOTH if p != given else stat.S_IROTH):
                sys.exit(f"{p} does not let other uids through: jobs (a tenant's uid) cannot use {given}")
PY
fi
xp() { "$XP_PY" -c "from xpupool.cli import main; main()" "$@"; }
step() { echo; echo "=== $* === $(date -u +%T)"; }

RUN=$(mktemp -d /tmp/xpupool-torchrun.XXXXXX)
PORT=$("$XP_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export XPUPOOL_URL=http://127.0.0.1:$PORT
SERVER=; AGENT=; ADMIN=; JOBS=()
cleanup() {
  set +e
  if [ -n "$SERVER" ]; then
    for j in "${JOBS[@]}"; do XPUPOOL_TOKEN=$ADMIN xp cancel "$j" >/dev/null 2>&1; done
    for j in "${JOBS[@]}"; do  # the agent reports them ended before it stops
      for _ in $(seq 120); do
        case "$(state "$j")" in succeeded | failed | cancelled | "") break ;; esac
        sleep 0.5
      done
    done
  fi
  [ -z "$AGENT" ] || { kill "$AGENT"; wait "$AGENT"; } 2>/dev/null
  [ -z "$SERVER" ] || { kill "$SERVER"; wait "$SERVER"; } 2>/dev/null
  if [ "${OK:-0}" = 1 ] && [ -z "${KEEP:-}" ]; then rm -rf "$RUN"; else echo "logs kept in $RUN" >&2; fi
}
trap cleanup EXIT

step "xpupool up on $XPUPOOL_URL and an agent with two fake A100s; torch $TORCH_VERSION"
XP=("$XP_PY" -c "from xpupool.cli import main; main()")  # started as is, so that $! is its pid
"${XP[@]}" up --data "$RUN/data" --port "$PORT" --no-agent --heartbeat 0.5 > "$RUN/up.log" 2>&1 &
SERVER=$!
for _ in $(seq 240); do curl -sf "$XPUPOOL_URL/healthz" >/dev/null && break; sleep 0.5; done
ADMIN=$(cat "$RUN/data/admin-token")
export XPUPOOL_TOKEN=$ADMIN
(umask 077; xp token issue --agent --node n1 | tail -n 1 > "$RUN/agent-token")
"${XP[@]}" agent --server "$XPUPOOL_URL" --token-file "$RUN/agent-token" --node n1 --fake "$FAKE" \
  --work-dir "$RUN/agent" --grace 10 > "$RUN/agent.log" 2>&1 &
AGENT=$!
xp tenant create team >/dev/null
TEAM=$(xp token issue team | sed -n 's/^export XPUPOOL_TOKEN=//p')

# waits until the shell condition "$1" holds, at most WAIT_S seconds; fails naming $2
until_true() {
  local end=$((SECONDS + WAIT_S))
  while [ "$SECONDS" -lt "$end" ]; do
    eval "$1" && return 0
    case "$(state "${EJ:-0}")" in succeeded | failed | cancelled)
      echo "job $EJ ended waiting for $2:" >&2; api "/v1/jobs/$EJ" >&2; log "$EJ" 0 >&2; return 1 ;;
    esac
    sleep 0.5
  done
  echo "timed out after ${WAIT_S}s waiting for $2" >&2
  return 1
}
submit() { XPUPOOL_TOKEN=$TEAM xp submit "$@" | sed -n 's/^job \([0-9]*\).*/\1/p'; }
# reads through the HTTP API with curl: one CLI start per poll would be slower than the polling
api() { curl -sf -H "Authorization: Bearer $TEAM" "$XPUPOOL_URL$1" || true; }
state() { api "/v1/jobs/$1" | "$XP_PY" -c 'import json, sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true; }
log() { api "/v1/jobs/$1/logs?replica=$2"; }
# the world sizes replica $2 of job $1 started workers with, in order, repeats collapsed
worlds() { log "$1" "$2" | sed -n 's/^start rank=[0-9]* world=\([0-9]*\).*/\1/p' | uniq | paste -sd' '; }
last_allreduce() { log "$1" "$2" | sed -n 's/.* world=\([0-9]*\) allreduce=\([0-9]*\)$/\1:\2/p' | tail -n 1; }

step "a blocker holds one card; the elastic job starts at one replica"
until_true 'api /v1/nodes | grep -q "\"n1\""' "node n1"
B=$(submit "A100:1" -- /bin/sleep 3600); JOBS+=("$B")
until_true '[ "$(state "$B")" = running ]' "the blocker to run"
EJ=$(submit "A100:1 replicas=1..2" -- "$JOB_DIR/torchrun_replica.sh" 1:2 "$TORCH_PY" \
  "$JOB_DIR/elastic_train.py" --device cpu); JOBS+=("$EJ")
echo "blocker job $B, elastic job $EJ"
until_true '[ "$(last_allreduce "$EJ" 0)" = 1:1 ]' "world 1 on replica 0"

step "the blocker ends: the job grows to two replicas"
xp cancel "$B" >/dev/null
until_true '[ "$(last_allreduce "$EJ" 0)" = 2:2 ] && [ "$(last_allreduce "$EJ" 1)" = 2:2 ]' "world 2 on both replicas"

step "a job needs the card: the job shrinks to one replica"
P=$(submit "A100:1" -- /bin/sleep 3600); JOBS+=("$P")
until_true '[ "$(worlds "$EJ" 0)" = "1 2 1" ] && [ "$(last_allreduce "$EJ" 0)" = 1:1 ]' "world 1 again on replica 0"
until_true '[ "$(state "$P")" = running ]' "the job that needed the card to run"

step "what the replicas logged (start lines and the first all_reduce of each world)"
for r in 0 1; do
  echo "--- replica $r"
  log "$EJ" "$r" | awk '/^replica |^start /{print; seen=0; next} /allreduce=/{if (!seen) print; seen=1}'
done
step "the elastic job's events"
xp job "$EJ" -o json | "$XP_PY" -c 'import json, sys, time
for e in json.load(sys.stdin)["events"]:
    print(time.strftime("%H:%M:%S", time.gmtime(e["at"])), e["state"], e["reason"])'

W0=$(worlds "$EJ" 0); W1=$(worlds "$EJ" 1)
echo; echo "replica 0 worlds: $W0; replica 1 worlds: $W1"
if [ "$W0" = "1 2 1" ] && [ "$W1" = 2 ]; then
  echo "PASS: torch $TORCH_VERSION, world 1 -> 2 -> 1"
  OK=1
else
  echo "FAIL: expected replica 0 worlds '1 2 1' and replica 1 worlds '2'"
  exit 1
fi
