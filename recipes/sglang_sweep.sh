#!/usr/bin/env bash
# Real SGLang 0.5.17 EAGLE-3 on one H200, WITHOUT a profiler: tokens/s at several step counts and batch
# sizes, the ground truth that whatif/advise are held to (issue 40, 41). One engine per (config, steps).
#
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first: recipes/device_tree.sh), command:
#     CONFIGS="2:8" STEPS="3 0 6 1 5 2 4" BATCHES=1,4,16,64 BUDGET_S=540 bash recipes/sglang_sweep.sh
#   SGLang's adaptive mode (issue 41), every engine of STEPS adaptive with one config:
#     ADAPTIVE=default STEPS=auto CONFIGS="2:64" bash recipes/sglang_sweep.sh
#     ADAPTIVE=recipes/adaptive/v2_l64.json STEPS=auto CONFIGS="2:64" bash recipes/sglang_sweep.sh
#   several of these in one device command share one budget: `export T0=$(date +%s)` first.
#
# CONFIGS: space-separated VOCAB:LAYERS (vocabulary -> acceptance ~1/V; target layers -> verify cost).
# STEPS: --speculative-num-steps per engine (0: no speculation; one listed twice runs twice: NAME_r2), in the order run (mixed, so that a
# drift of the machine does not line up with the step count). ADAPTIVE: empty (fixed steps), `default`
# (SGLang's built-in adaptive config) or a --speculative-adaptive-config JSON file (a path in the tree
# that travels): each STEPS entry is then the step count SGLang starts at (a candidate > 0 of the
# config; `auto`: the largest candidate), SGLang logs at info level and its switches are kept per batch.
# PIN: a command prefix for each engine (e.g. "taskset -c 0-7": the engine's processes on the GPU's NUMA node).
# GRAPH_BS: --cuda-graph-bs-decode (default 1,2,4,8,16,32,64, as in the recorded sweeps).
# BUDGET_S: no engine is started after that many seconds since T0 (default: this script's start).
# Writes $OUT/sweep.json ({"runs": fixed-step engines, "adaptive_runs": adaptive ones}; every engine of
# this machine's earlier calls of the recipe too) and $OUT/sweep.log.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/sweep; mkdir -p "$O" "$W"
CONFIGS=${CONFIGS:-"2:8"}; BATCHES=${BATCHES:-1,4,16,64}; BUDGET_S=${BUDGET_S:-540}
ADAPTIVE=${ADAPTIVE:-}; GRAPH_BS=${GRAPH_BS:-1,2,4,8,16,32,64}; T0=${T0:-$(date +%s)}
if [ -n "$ADAPTIVE" ]; then STEPS=${STEPS:-auto}; else STEPS=${STEPS:-"3 0 6 1 5 2 4"}; fi
exec > >(tee -a "$O/sweep.log") 2>&1
if [ -n "$ADAPTIVE" ] && [ "$ADAPTIVE" != default ]; then
  [ -f "$ADAPTIVE" ] || { echo "ADAPTIVE=$ADAPTIVE: no such file (default or a JSON config)"; exit 2; }
  TAG=$(basename "$ADAPTIVE" .json | tr -c 'A-Za-z0-9_\n-' _)
else TAG=${ADAPTIVE:+default}; fi
source recipes/sglang_env.sh
deep_gemm_stub on
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader)"
for cfg in $CONFIGS; do
  V=${cfg%%:*}; L=${cfg##*:}
  [ -d "/tmp/tiny_v${V}_l${L}" ] || tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
  for s in $STEPS; do
    el=$(( $(date +%s) - T0 ))
    if [ "$el" -gt "$BUDGET_S" ]; then echo "== budget: skipping v$V l$L steps $s ${TAG:+adaptive $TAG}"; continue; fi
    args=(--steps "$s"); name="v${V}_l${L}_s${s}"
    if [ -n "$ADAPTIVE" ]; then
      args=(--adaptive "$ADAPTIVE" --log-level info); [ "$s" = auto ] || args+=(--steps "$s")
      name="v${V}_l${L}_a${TAG}_s${s}"
    fi
    # a step count listed twice (STEPS="3 4 3 4": the variation between engines of one configuration,
    # beside the repeats within one) keeps every engine: the second is NAME_r2, ...
    r=1; base_name=$name; while [ -e "$W/$name.json" ]; do r=$((r + 1)); name="${base_name}_r$r"; done
    echo "== $(date -u +%T) +${el}s vocab $V layers $L steps $s ${TAG:+adaptive $TAG}"
    timeout 300 ${PIN:-} python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" "${args[@]}" \
      --batches "$BATCHES" --graph-bs "$GRAPH_BS" --out "$W/$name.json" > "$W/$name.log" 2>&1
    echo "   rc $?"; grep -v -e 'it/s\]' -e '^\s*$' -e 'Decode batch' -e 'Prefill batch' "$W/$name.log" | tail -12
  done
done
python3 recipes/sglang_sweep.py --merge "$W" "$O/sweep.json"
echo "== done in $(( $(date +%s) - T0 ))s since T0"
