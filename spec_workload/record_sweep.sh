#!/bin/bash
# Issue 7: the draft-step sweep for `analyze-trace whatif`, recorded in ONE device call so that the
# profiled runs and the unprofiled truth come from one machine state. Packs the results into
# $OUT/sweep.tar.xz and the log into $OUT/sweep.log.
#
#   device: carry [".device-kit"], command: "bash spec_workload/record_sweep.sh"
#   local CPU rehearsal (nsys 2022.4, no GPU):  SMALL=1 OUT=/tmp/sweep bash spec_workload/record_sweep.sh
#
# Outputs (same workload settings as record_all.sh step 4, 60 timed cycles instead of 8):
#   ${PREFIX}_steps{1..6}.sqlite   profile-trace, --steps K, the shim's marks carry lens=
#   ${PREFIX}_nospec.sqlite        profile-trace, --no-spec
#   ${PREFIX}_unprofiled.json      no profiler: tokens/s of no-spec and K=1..6, 200 cycles each
#   ${PREFIX}_unprofiled_repeat.json   the same again after the profiled runs (measurement noise)
# The committed fixtures were recorded with this script on 2025-11-29 (about 2.5 min wall); the work
# directory was under $OUT then and has been moved to $REC since (no effect on the recordings).
# Exports are scrubbed before committing: analyze-trace scrub IN -o fixtures/real/IN.
# Traces: -t cuda,nvtx (osrt dropped: nothing in whatif reads OS runtime calls, and it keeps the
# exports small), --cuda-graph-trace=node, no CPU sampling, no context switches.
# PREFIX (default h200_sweep) names the outputs; ACCEPT_DIST (default: the workload's) sets
# P(k accepted draft tokens), k = 0, 1, ...: h200_sweep2_* use 0.2,0.3,0.4,0.05,0.03,0.02, whose
# best step count (2) is clearly ahead of 3, unlike the default distribution (2 and 3 within 0.5%).
set -u
PREFIX="${PREFIX:-h200_sweep}"
ACC=()
[ -n "${ACCEPT_DIST:-}" ] && ACC=(--accept-dist "$ACCEPT_DIST")
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?set OUT}"
REC="${REC:-$(mktemp -d /tmp/specprof_sweep.XXXXXX)}"   # work dir outside $OUT: only the 2 packed files come back
mkdir -p "$OUT" "$REC"
LOG="$OUT/sweep.log"
exec > >(tr '\r' '\n' | grep --line-buffered -v -e '^\[[0-9]/[0-9]\]' -e '^Exporting ' -e '^ *$' | tee -a "$LOG") 2>&1
if [ -z "${NSYS:-}" ] && [ -f "$REPO/.device-kit/nsys-setup.sh" ]; then
  source "$REPO/.device-kit/nsys-setup.sh"
fi
export NSYS="${NSYS:-$(command -v nsys)}"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REC"
"$PY" -m nvtx_annotate install-pth
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
$NSYS --version
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null

if [ "${SMALL:-0}" = 1 ]; then
  SIZE="--hidden 64 --vocab 128 --reqs 4"; TRACE="-t nvtx"; GR="--eager"; CYC=4; SWEEPC=20
else
  SIZE="--hidden 4096 --reqs 8"; TRACE="-t cuda,nvtx"; GR="--cuda-graphs"; CYC=60; SWEEPC=200
fi
PT=("$PY" -m nvtx_annotate.profile_trace --package spec_workload $TRACE
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none)
W=("$PY" -m spec_workload $SIZE --warmup 2 --seed 0 --world 1 $GR "${ACC[@]}")
step() { echo "=== $(date +%T) $*"; }

step unprofiled sweep
timeout 120 "${W[@]}" --sweep-steps 1,2,3,4,5,6 --cycles $SWEEPC --out-json ${PREFIX}_unprofiled.json
for K in 1 2 3 4 5 6; do
  step profiled steps $K
  timeout 100 "${PT[@]}" -o ${PREFIX}_steps$K -- "${W[@]}" --steps $K --cycles $CYC \
    --out-json ${PREFIX}_steps$K.workload.json
done
step profiled nospec
timeout 100 "${PT[@]}" -o ${PREFIX}_nospec -- "${W[@]}" --no-spec --cycles $CYC \
  --out-json ${PREFIX}_nospec.workload.json
step unprofiled sweep again
timeout 120 "${W[@]}" --sweep-steps 1,2,3,4,5,6 --cycles $SWEEPC --out-json ${PREFIX}_unprofiled_repeat.json
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null

step pack
rm -f *.nsys-rep
ls -la
tar -cJf "$OUT/sweep.tar.xz" ${PREFIX}_*.sqlite ${PREFIX}_*.json 2>/dev/null
ls -la "$OUT"
sleep 2
