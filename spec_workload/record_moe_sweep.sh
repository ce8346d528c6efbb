#!/bin/bash
# Issue 20: the draft-step sweep of the MoE-like target (spec_workload --target moe) with a batch
# that changes from cycle to cycle, for a whatif that models verify time as a function of the
# verified tokens from ONE profile, in ONE device call (measured: 137 s on the H200, 2026-12-01;
# no optional profiled run starts after BUDGET s): the profiled runs
# and the unprofiled truth come from one machine state. Packs the results into
# $OUT/moe_sweep.tar.xz and the log into $OUT/moe_sweep.log.
#
#   device: carry [".device-kit"], command: "bash spec_workload/record_moe_sweep.sh"
#   local CPU rehearsal (nsys 2022.4, no GPU):  SMALL=1 OUT=/tmp/moe bash spec_workload/record_moe_sweep.sh
#
# Workload (GPU), sized to be GPU-bound at the smallest batch and to fit at the largest:
#   2 MoE layers, 64 experts, top-4 routing, hidden 4096, expert intermediate 4096: an expert's up
#   and down are 4096x4096 bf16, 33.5 MB each. Every (token, expert) pair gathers both (index_select:
#   67 MB read + 67 MB written) and its bmms read the copies again (67 MB): ~201 MB of HBM traffic
#   per pair per layer = 50 us at 4 TB/s. Plus a dense shared expert per layer (intermediate
#   48 x 4096 = 196608: up and down 1.61 GB each, 3.2 GB read once per layer = 0.8 ms at 4 TB/s,
#   whatever the tokens: the token-independent part of the cost). Verify over n tokens, GPU only:
#   ~2 x (0.8 ms + 4 n x 50 us) = 1.6 ms + 0.4 ms x n at 4 TB/s: 2.4 ms for the smallest batch at
#   1 step (1 request x 2 tokens), 24 ms for the largest at 6 steps (8 x 7 = 56 tokens).
#   Memory: experts 2 x 64 x 67 MB = 8.6 GB, shared experts 6.4 GB; the largest gathered
#   temporary is 56 tokens x top-4 = 224 pairs x 33.5 MB = 7.5 GB (the up gather is freed before
#   the down gather), once in the verify graphs' shared pool and once in the eager warm-up cache:
#   ~31 GB at the peak of the 6-step run, of the H200's 139 GB.
#   No host sync in the MoE forward and the same kernels for any token count: verify is a CUDA
#   graph replay, one graph per batch size (M x (steps+1) rows, M = 1..8, sharing one memory pool);
#   dense 1-layer draft in a CUDA graph (hidden 4096, ffn 16384: ~0.1 ms per step); 8 batch slots,
#   1..8 running requests per cycle (seeded finish/arrival process, finish_p = arrive_p = 0.3, the
#   same batches for every step count); accept lengths drawn from ACCEPT_DIST, default
#   P(0..6) = 0.05,0.05,0.6,0.2,0.067,0.022,0.011: conditional rates 0.95, 0.95, then 1/3 at every
#   later position (a geometric tail, so extrapolating acceptance past the profiled 3 steps is not
#   what is being tested). Expected at 4 TB/s with the profiles' mean 3.75 requests: cycle ~1.6 ms +
#   1.6 ms x (steps + 1), so 2 steps come out best (~10% ahead of 1 and of 3) and a constant-verify
#   prediction from the 3-step profile picks 4 or 5; the H200 decides.
#
# Outputs, in this order (the profiled runs other than steps 3 and nospec are skipped once the
# script has run BUDGET seconds, default 200, so that the repeat sweep and the packing always fit):
#   ${PREFIX}_unprofiled.json         no profiler: tokens/s of no-spec and K=1..6, SWEEPC cycles each
#   ${PREFIX}_unprofiled_b2b.json     the same sweep again, right after: the STABILITY GATE (the
#                                     per-step-count difference of the two is printed: sweep_diff)
#   ${PREFIX}_steps3.sqlite           profile-trace, --steps 3 (the one-profile input)
#   ${PREFIX}_nospec.sqlite           profile-trace, --no-spec
#   ${PREFIX}_steps{1,2,4,5,6}.sqlite profile-trace, --steps K (if time allows)
#   ${PREFIX}_unprofiled_repeat.json  the same unprofiled sweep after the profiles (difference printed)
#   ${PREFIX}_*.workload.json         the workload's own per-cycle record of each profiled run
# Every profiled run has 3 warm-up + CYC (28) timed cycles: the same 28 batches (1..7 requests,
# mean 3.75: 4 to 28 verified tokens at 3 steps); the unprofiled sweeps run SWEEPC = 10 x CYC
# cycles with --batch-period CYC, i.e. those 28 batches 10 times: profiles and truth hold exactly
# the same batch mix. Traces: -t cuda,nvtx, --cuda-graph-trace=node, no CPU sampling, no context
# switches; few cycles so that each export stays around 3 MB before xz (the script prints the
# sizes). Scrub before committing: analyze-trace scrub IN -o fixtures/real/IN.
# PREFIX (default h200_moe) names the outputs; ACCEPT_DIST, BUDGET, CYC, SWEEPC override.
set -u
PREFIX="${PREFIX:-h200_moe}"
ACCEPT_DIST="${ACCEPT_DIST:-0.05,0.05,0.6,0.2,0.067,0.022,0.011}"
BUDGET="${BUDGET:-200}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?set OUT}"
REC="${REC:-$(mktemp -d /tmp/specprof_moe.XXXXXX)}"   # work dir outside $OUT: only the 2 packed files come back
mkdir -p "$OUT" "$REC"
LOG="$OUT/moe_sweep.log"
exec > >(tr '\r' '\n' | grep --line-buffered -v -e '^\[[0-9]/[0-9]\]' -e '^Exporting ' -e '^Processing [0-9]* events' \
  -e '^ *$' | tee -a "$LOG") 2>&1
if [ -z "${NSYS:-}" ] && [ -f "$REPO/.device-kit/nsys-setup.sh" ]; then
  source "$REPO/.device-kit/nsys-setup.sh"
fi
export NSYS="${NSYS:-$(command -v nsys)}"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XZ_OPT="${XZ_OPT:--6 -T0}"
cd "$REC"
"$PY" -m nvtx_annotate install-pth
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
$NSYS --version
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv 2>/dev/null

if [ "${SMALL:-0}" = 1 ]; then
  SIZE=(--hidden 64 --vocab 128 --experts 32 --expert-ffn 64 --shared-ffn 256)
  TRACE="-t nvtx"; GR="--eager"; : "${CYC:=12}"
else
  SIZE=(--hidden 4096 --experts 64 --expert-ffn 4096 --shared-ffn 196608)
  TRACE="-t cuda,nvtx"; GR="--cuda-graphs"; : "${CYC:=28}"
fi
: "${SWEEPC:=$((10 * CYC))}"
PT=("$PY" -m nvtx_annotate.profile_trace --package spec_workload $TRACE
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none)
W=("$PY" -m spec_workload --target moe "${SIZE[@]}" --verify-layers 2 --top-k 4 --reqs 8 --reqs-min 1
   --finish-p 0.3 --arrive-p 0.3 --batch-period "$CYC" --warmup 3 --seed 0 --world 1 $GR
   --accept-dist "$ACCEPT_DIST")
step() { echo "=== $(date +%T) +${SECONDS}s $*"; }
profiled() {  # NAME ARGS...
  local name=$1; shift
  step profiled "$name"
  timeout 100 "${PT[@]}" -o "${PREFIX}_$name" -- "${W[@]}" "$@" --cycles "$CYC" \
    --out-json "${PREFIX}_$name.workload.json"
  echo "rc=$? $(ls -la "${PREFIX}_$name.sqlite" 2>/dev/null)"
}

sweep() {  # NAME: the unprofiled sweep (no-spec and 1..6 steps) into ${PREFIX}_NAME.json
  step "unprofiled sweep -> ${PREFIX}_$1.json"
  timeout 150 "${W[@]}" --sweep-steps 1,2,3,4,5,6 --cycles "$SWEEPC" --out-json "${PREFIX}_$1.json"
  echo "rc=$?"
}
sweepdiff() {  # A B: per-step-count difference of two sweeps
  "$PY" -m spec_workload.sweep_diff "${PREFIX}_$1.json" "${PREFIX}_$2.json"
}

sweep unprofiled
sweep unprofiled_b2b
step "STABILITY GATE: two unprofiled sweeps back to back (same configuration)"
sweepdiff unprofiled unprofiled_b2b
profiled steps3 --steps 3
profiled nospec --no-spec
for K in 2 4 1 5 6; do
  if [ "$SECONDS" -ge "$BUDGET" ]; then step "skipped steps$K (past BUDGET=${BUDGET}s)"; continue; fi
  profiled "steps$K" --steps "$K"
done
sweep unprofiled_repeat
step "unprofiled sweep before vs after the profiled runs"
sweepdiff unprofiled unprofiled_repeat
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv 2>/dev/null

step pack
rm -f ./*.nsys-rep
ls -la
tar -cJf "$OUT/moe_sweep.tar.xz" "${PREFIX}"_*.sqlite "${PREFIX}"_*.json 2>/dev/null
ls -la "$OUT"
step done
sleep 2
