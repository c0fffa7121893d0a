#!/usr/bin/env bash
# One prepared GPU session on the device machine (docs/SPEED.md, "A GPU session"), run there from the repo root:
#     bash scripts/device/gpu_session.sh
# Needs, carried beside the tree (scripts/device/prepare.sh makes them here): .whl/ (cp312 wheels of what the
# machine lacks), .gpu/w (the FID weights packed by fid_weights_pack.py), .gpu/data/<ds>/*.xz (idx files),
# .gpu/runs/<run> (finished generation runs whose 60,000-sample FID is wanted). Within LIMIT seconds it runs
#   1. the fast suite (pytest -n 12) and, beside it, the 60,000-sample FID of each run in FID_JOBS;
#   2. make bench's five scripts alone, each capped (rows are printed as they finish, so a capped one keeps some);
#   3. the DP-Sinkhorn paper-recipe run (make table-dpsinkhorn-mnist SCALE=paper) beside 1, paused during 2,
#      stopped by SIGTERM (checkpoint and ledger written) before LIMIT; its folder comes back to be resumed.
#      PAPER_ARGS picks Table 1's rows and data sets (default "--datasets mnist --rows DP_Sinkhorn"); e.g.
#      PAPER_ARGS="--datasets mnist --rows Non_priv_Sinkhorn --generations 1" trains MNIST's non-private
#      row (12,000 steps) and measures it, FID at the paper's 60,000: MNIST's only, since prepare.sh
#      cannot carry Fashion-MNIST's training split (it does not fit the 64 MiB beside the weights).
#   REAL_FID=1 adds, after the FID jobs, FID(real train, real test) at 60,000 vs 10,000 (DP-Sinkhorn's "Real data"
#      row, 1.6 / 2.5) for each training split carried (-> fid.tgz: real/tables/fid_real_data.{csv,md}).
# Everything lands in $OUT: summary.txt, test.log, bench.tgz, fid.tgz, paper_run.tgz.
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
LIMIT=${LIMIT:-570}
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( LIMIT - $(el) )); }
log() { echo "[$(el) s] $*" | tee -a "$OUT/summary.txt"; }
export PYTHONUNBUFFERED=1
PY=${PY:-python3}

if [ "${SKIP_WHEELS:-0}" = 0 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { log "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uptime
  $PY -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"; git log -1 --format='%h %s' 2>/dev/null; } \
  >> "$OUT/summary.txt" 2>&1

DATA=/tmp/data
$PY - "$DATA" <<'PYEOF'
import lzma, pathlib, sys
for f in pathlib.Path(".gpu/data").glob("*/*.xz"):
    d = pathlib.Path(sys.argv[1]) / f.parent.name
    d.mkdir(parents=True, exist_ok=True)
    (d / f.stem).write_bytes(lzma.decompress(f.read_bytes()))
PYEOF
W=/tmp/fidw/pt_inception-2015-12-05-fp16conv.pth
$PY scripts/device/fid_weights_pack.py unpack .gpu/w "$W" && log "FID weights unpacked (convolutions float16-rounded)" \
  || log "FID weights not unpacked"

# 3, started first: the paper-recipe run in its own process group (paused / stopped as a group)
# PAPER_GRAPH=1 (default): the step captured in a CUDA graph (trainer.static_shapes + trainer.cuda_graph, issue 84;
# the same math, another run folder); a run that dies in its first 60 s is started again without the graph
paper_run() {
  $PY -c "import os, sys; os.setsid(); os.execvp('bash', ['bash', '-c', sys.argv[1]])" "exec $PY -m dpgen.tables.declared dpsinkhorn_table1 --scale paper \
    ${PAPER_ARGS:---datasets mnist --rows DP_Sinkhorn} $1 --data-root $DATA --no-progress >> $OUT/paper_run.log 2>&1" &
  PR=$!
}
if [ -f "$DATA/mnist/train-images-idx3-ubyte" ] && [ "${PAPER_RUN:-1}" = 1 ]; then
  if [ "${PAPER_GRAPH:-1}" = 1 ]; then
    paper_run "--set trainer.static_shapes=true trainer.cuda_graph=true"
    for _ in $(seq 60); do kill -0 $PR 2>/dev/null || break; sleep 1; done
    if ! kill -0 $PR 2>/dev/null; then
      log "paper-recipe run with the CUDA graph ended in its first 60 s: $(grep -a 'Error' "$OUT/paper_run.log" | tail -1)"
      paper_run ""
    fi
  else
    paper_run ""
  fi
  log "paper-recipe run started (pgid $PR)"
else
  PR=""
fi

# 1: FID jobs beside the fast suite
mkdir -p /tmp/fid
FID_JOBS=${FID_JOBS:-}
(
  i=0
  while IFS= read -r job; do
    [ -z "$job" ] && continue
    i=$((i + 1))
    s=$(date +%s)
    env DPGEN_DATA_ROOT=$DATA DPGEN_FID_WEIGHTS=$W OMP_NUM_THREADS=4 timeout -k 5 300 \
      $PY scripts/fidelity_of_run.py $job --data-root $DATA --fid-samples ${FID_SAMPLES:-60000} --device ${FID_DEVICE:-cuda} --out /tmp/fid/fid_$i.json \
      > /tmp/fid/fid_$i.log 2>&1
    echo "[fid $i rc $? in $(( $(date +%s) - s )) s] $job" >> /tmp/fid/done.txt
  done <<< "$FID_JOBS"
  # REAL_FID=1: FID(real train, real test) at the paper's 60,000 vs 10,000 for each training split carried
  if [ "${REAL_FID:-0}" = 1 ]; then
    sets=""
    [ -f "$DATA/mnist/train-images-idx3-ubyte" ] && sets=mnist
    [ -f "$DATA/fashionmnist/train-images-idx3-ubyte" ] && sets=${sets:+$sets,}fashion_mnist
    if [ -z "$sets" ]; then
      echo "[real-data FID] no training split carried" >> /tmp/fid/done.txt
    else
      s=$(date +%s)
      env DPGEN_DATA_ROOT=$DATA DPGEN_FID_WEIGHTS=$W DPGEN_OUTPUTS=/tmp/fid/real OMP_NUM_THREADS=4 \
        timeout -k 5 ${CAP_REAL_FID:-240} $PY -m dpgen.tables.declared fid_real_data --scale paper --datasets $sets \
        --data-root $DATA > /tmp/fid/real_data.log 2>&1
      echo "[real-data FID rc $? in $(( $(date +%s) - s )) s] $sets" >> /tmp/fid/done.txt
      cat /tmp/fid/real/tables/fid_real_data*.csv >> /tmp/fid/done.txt 2>/dev/null
    fi
  fi
) &
FJ=$!
# -v: each test's verdict is printed as it finishes, so a suite stopped by its cap still names its failures
env -u DPGEN_DATA_ROOT -u DPGEN_FID_WEIGHTS timeout -k 5 $(( $(left) > 300 ? ${CAP_TESTS:-260} : $(left) / 2 )) \
  $PY -m pytest -n ${TEST_WORKERS:-12} -v -rfE -p no:cacheprovider --durations=10 ${PYTEST_ARGS:-} > "$OUT/test.log" 2>&1
log "fast suite rc $?: $(tail -1 "$OUT/test.log"); $(grep -c ' PASSED' "$OUT/test.log") passed so far"
grep -a ' FAILED\| ERROR' "$OUT/test.log" | head -20 >> "$OUT/summary.txt"
while kill -0 $FJ 2>/dev/null && [ "$(left)" -gt 330 ]; do sleep 2; done
kill -0 $FJ 2>/dev/null && log "FID jobs still running at the bench's start"

# 2: make bench, alone (the paper-recipe run paused)
[ -n "$PR" ] && kill -STOP -- -$PR
mkdir -p /tmp/bench
export DPGEN_FID_WEIGHTS=$W
bench() { local cap=$1; shift; local name=$1; shift
  [ "$(left)" -lt $(( cap + 40 )) ] && cap=$(( $(left) - 40 ))
  [ "$cap" -lt 10 ] && { log "bench $name skipped (time)"; return; }
  local s=$(date +%s); timeout -k 5 $cap $PY scripts/$name.py "$@" > /tmp/bench/$name.log 2>&1
  log "bench $name rc $? in $(( $(date +%s) - s )) s (cap $cap)"; }
bench ${CAP_SPEED:-110} bench_speed --out /tmp/bench
bench ${CAP_ACC:-30} bench
bench ${CAP_SWD:-25} bench_swd --no-memory
bench ${CAP_SINK:-25} bench_sinkhorn --repeats 3
bench ${CAP_DA:-20} bench_da --repeats 3
unset DPGEN_FID_WEIGHTS
[ -n "$PR" ] && kill -CONT -- -$PR

while kill -0 $FJ 2>/dev/null && [ "$(left)" -gt 40 ]; do sleep 2; done
[ -f /tmp/fid/done.txt ] && cat /tmp/fid/done.txt >> "$OUT/summary.txt"

# 3 continues until LIMIT - 25 s, then SIGTERM: checkpoint and ledger
if [ -n "$PR" ]; then
  while kill -0 $PR 2>/dev/null && [ "$(left)" -gt 25 ]; do sleep 2; done
  kill -TERM -- -$PR 2>/dev/null
  for _ in $(seq 20); do kill -0 $PR 2>/dev/null || break; sleep 1; done
  log "paper-recipe run: $(grep -a 'SIGTERM\|resumed\|Error' "$OUT/paper_run.log" | tail -2)"
  tar czf "$OUT/paper_run.tgz" outputs/runs/dpsinkhorn_table1 2>/dev/null
fi
kill $FJ 2>/dev/null
tar czf "$OUT/bench.tgz" -C /tmp bench 2>/dev/null
tar czf "$OUT/fid.tgz" -C /tmp fid 2>/dev/null
log "done"
