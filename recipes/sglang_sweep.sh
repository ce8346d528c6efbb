#!/usr/bin/env bash
# Real SGLang 0.5.17 EAGLE-3 on one H200, WITHOUT a profiler: tokens/s at several step counts and batch
# sizes, the ground truth that whatif/advise are held to (issue 40, 41). One engine per (config, steps).
#
#   device: carry [".sglreal", ".device-kit"], command:
#     CONFIGS="2:8" STEPS="3 0 6 1 5 2 4" BATCHES=1,4,16,64 BUDGET_S=540 bash recipes/sglang_sweep.sh
#
# CONFIGS: space-separated VOCAB:LAYERS (vocabulary -> acceptance ~1/V; target layers -> verify cost).
# STEPS: --speculative-num-steps per engine (0: no speculation), in the order run (mixed, so that a
# drift of the machine does not line up with the step count). BUDGET_S: no engine is started after
# that many seconds (the device call's limit). Writes $OUT/sweep.json (every engine's result) and
# $OUT/sweep.log.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/sweep; mkdir -p "$O" "$W"
CONFIGS=${CONFIGS:-"2:8"}; STEPS=${STEPS:-"3 0 6 1 5 2 4"}; BATCHES=${BATCHES:-1,4,16,64}; BUDGET_S=${BUDGET_S:-540}
exec > >(tee -a "$O/sweep.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader)"
for cfg in $CONFIGS; do
  V=${cfg%%:*}; L=${cfg##*:}; tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
  for s in $STEPS; do
    if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "== budget: skipping v$V l$L steps $s"; continue; fi
    echo "== $(date -u +%T) +${SECONDS}s vocab $V layers $L steps $s"
    timeout 300 python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" --steps "$s" \
      --batches "$BATCHES" --out "$W/v${V}_l${L}_s${s}.json" 2>&1 | grep -v -e 'it/s\]' -e '^\s*$' | tail -12
  done
done
python3 - "$W" "$O/sweep.json" <<'PY'
import glob, json, sys
runs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    for b in r["batches"]:
        print(f"v{r['vocab']} l{r['engine_args'].get('model_path','').split('_l')[-1].split('/')[0]} "
              f"steps {r['steps']} batch {b['batch']:>3}: {b['tokens_per_s']:10.1f} tok/s "
              f"spread {100*b['spread']:.1f}% acc {b['tokens_per_request_cycle']}")
PY
echo "== done in ${SECONDS}s"
