#!/bin/bash
# Records every fixture trace of the spec_workload in one go (one device call), then packs the
# results into $OUT/records.tar.xz and the log into $OUT/record.log.
#
#   device: carry [".device-kit"], command: "bash spec_workload/record_all.sh"
#   local CPU rehearsal (nsys 2022.4, no GPU):  SMALL=1 OUT=/tmp/rec bash spec_workload/record_all.sh
#
# Every trace goes through profile-trace (shim on, .pth hook, --trace-fork-before-exec,
# --cuda-graph-trace=node, -t cuda,nvtx,osrt). CPU sampling and context switches are off to keep
# the exports small.
set -u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?set OUT}"
mkdir -p "$OUT/rec"
LOG="$OUT/record.log"
# progress bars (\r-separated) of nsys profile/export are dropped from the log
exec > >(tr '\r' '\n' | grep --line-buffered -v -e '^\[[0-9]/[0-9]\]' -e '^Exporting ' -e '^ *$' | tee -a "$LOG") 2>&1
if [ -z "${NSYS:-}" ] && [ -f "$REPO/.device-kit/nsys-setup.sh" ]; then
  source "$REPO/.device-kit/nsys-setup.sh"
fi
export NSYS="${NSYS:-$(command -v nsys)}"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$OUT/rec"
"$PY" -m nvtx_annotate install-pth
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
$NSYS --version

if [ "${SMALL:-0}" = 1 ]; then
  SIZE="--hidden 64 --vocab 128 --reqs 4"; TRACE="-t nvtx,osrt"; GR="--eager"; CYC=3; SWEEPC=20
else
  SIZE="--hidden 4096 --reqs 8"; TRACE="-t cuda,nvtx,osrt"; GR="--cuda-graphs"; CYC=8; SWEEPC=200
fi
PT=("$PY" -m nvtx_annotate.profile_trace --package spec_workload $TRACE
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none)
W=("$PY" -m spec_workload $SIZE --warmup 2 --seed 0)
ONLY="${ONLY:-1 2 3 4 5 6}"   # which steps to run
want() { [[ " $ONLY " == *" $1 "* ]]; }
step() { echo "=== $(date +%T) $*"; }

if want 1; then
step 1 graphs node
timeout 120 "${PT[@]}" --stats -o h200_shim_graphs_node -- "${W[@]}" --world 1 --steps 3 --cycles $CYC $GR \
  --out-json h200_shim_graphs_node.workload.json

fi
if want 2; then
step 2 four ranks one report
timeout 150 "${PT[@]}" --stats -o h200_shim_4rank_single -- "${W[@]}" --world 4 --backend gloo --steps 3 \
  --cycles $CYC $GR --out-json h200_shim_4rank_single.workload.json

fi
if want 3; then
step 3 four ranks four reports
cd "$OUT/rec"
PORT=$((20000 + RANDOM % 20000))
PIDS=()
for r in 0 1 2 3; do
  timeout 150 "${PT[@]}" -o h200_shim_4rank_rank$r -- "${W[@]}" --rank $r --world 4 --master-port $PORT \
    --backend gloo --steps 3 --cycles $CYC $GR --out-json h200_shim_4rank_rank$r.workload.json \
    > rank$r.log 2>&1 &
  PIDS+=($!)
  sleep 3   # concurrent nsys launches at the same instant can fail ("Connection reset by peer")
done
wait "${PIDS[@]}"   # not a bare wait: it would also wait for the tee of the log
tail -n 3 rank?.log

fi
if want 4; then
step 4 draft steps sweep
for K in 1 2 3 4 5 6; do
  timeout 90 "${PT[@]}" -o h200_steps$K -- "${W[@]}" --world 1 --steps $K --cycles $CYC $GR \
    --out-json h200_steps$K.workload.json
done
timeout 90 "${PT[@]}" -o h200_nospec -- "${W[@]}" --world 1 --no-spec --cycles $CYC $GR \
  --out-json h200_nospec.workload.json
step 4b unprofiled truth
timeout 120 "${W[@]}" --world 1 --sweep-steps 1,2,3,4,5,6 --cycles $SWEEPC $GR --out-json h200_sweep_truth.json

fi
if want 5; then
step 5 diff pair
timeout 90 "${PT[@]}" -o h200_diff_before -- "${W[@]}" --world 1 --steps 3 --verify-layers 4 --cycles $CYC $GR \
  --out-json h200_diff_before.workload.json
timeout 90 "${PT[@]}" -o h200_diff_after -- "${W[@]}" --world 1 --steps 3 --verify-layers 8 --cycles $CYC $GR \
  --out-json h200_diff_after.workload.json

fi
if want 6; then
step 6 overhead benchmark
SPECPROF_NVTX_BACKEND=none "$PY" -m nvtx_annotate bench -n 200000 > bench_none.json
timeout 120 $NSYS profile -t nvtx --sample=none --cpuctxsw=none -o bench_nsys --force-overwrite=true \
  "$PY" -m nvtx_annotate bench -n 200000 > bench_nsys.log 2>&1
grep '^{' bench_nsys.log > bench_nsys.json
cat bench_none.json bench_nsys.json

fi
step pack
ls -la
tar -cJf "$OUT/records.tar.xz" *.sqlite *.csv *.json 2>/dev/null
ls -la "$OUT"
sleep 3
