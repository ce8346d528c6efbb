#!/usr/bin/env bash
# Real SGLang 0.5.17 EAGLE-3 on one H200 under profile-trace (nsys + the shim), in the configurations of
# recipes/sglang_sweep.sh: the profiles whatif/advise predict from, beside that recipe's unprofiled truth.
#
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first: recipes/device_tree.sh), command:
#     RUNS="2:8:3:1,16 2:8:0:1" bash recipes/sglang_profiles.sh
#
# RUNS: space-separated VOCAB:LAYERS:STEPS:BATCHES (BATCHES comma-separated; STEPS 0: no speculation).
# Each run is recipes/sglang_sweep.py with --profile-window under `profile-trace --capture
# cudaprofilerapi`: exactly the measured rounds are captured, after PRECAPTURE uncaptured rounds a batch size (one round per batch size, NEW tokens a
# request: PROFILE_TOKENS at batch 1). Writes $OUT/BASE.tar.xz per run (BASE.sqlite + BASE.profiled.json,
# BASE = sglang_v{V}_l{L}_s{S}; a device call returns files of <= 16 MiB: a larger archive is split into
# BASE.tar.xz.part-aa, -ab, ...: `cat BASE.tar.xz.part-* | tar -xJ`; at most 8 files come back in all)
# and $OUT/profiles.log. A 64-layer profile of batches 1 and 16 was 46 MB of SQLite, 5.7 MB as xz. BUDGET_S: no run is started after that many
# seconds since T0 (default: this script's start; `export T0=$(date +%s)` to share one budget with
# recipes/sglang_sweep.sh in one device command). GRAPH_BS: --cuda-graph-bs-decode (as the sweep's).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/profiles; mkdir -p "$O" "$W"
RUNS=${RUNS:-"2:8:3:1,16 2:8:0:1"}; BUDGET_S=${BUDGET_S:-520}; PROFILE_TOKENS=${PROFILE_TOKENS:-1024}
# the sweep's round sizes (sglang_sweep.py: --min-new 1024 at batch 1, --tokens-per-round 4096): verify's
# GPU time grows with the requests' context (64 layers: +3.45 us a generated token), so a profile of
# shorter requests than the truth it is held to predicts another cycle (docs/whatif.md, "Context length")
PROFILE_ROUND=${PROFILE_ROUND:-4096}
GRAPH_BS=${GRAPH_BS:-1,2,4,8,16,32,64}; T0=${T0:-$(date +%s)}
# rounds a batch size before the window (sglang_sweep.py --precapture): the shim's clock of those decode cycles
# goes into the profile (nvtx_annotate/clock.py), and whatif/advise calibrate from it (0: none, the old profiles)
PRECAPTURE=${PRECAPTURE:-3}
exec > >(tee -a "$O/profiles.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
source .device-kit/nsys-setup.sh >/dev/null || exit 5
python3 -m nvtx_annotate install-pth
PT=(python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" -t cuda,nvtx --force --capture cudaprofilerapi
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none ${PT_EXTRA:-})   # PT_EXTRA: e.g. "--cuda-graph-trace graph"
for run in $RUNS; do
  IFS=: read -r V L S B <<< "$run"; base="sglang_v${V}_l${L}_s${S}${SUFFIX:-}"
  el=$(( $(date +%s) - T0 ))
  if [ "$el" -gt "$BUDGET_S" ]; then echo "== budget: skipping $base"; continue; fi
  [ -d "/tmp/tiny_v${V}_l${L}" ] || tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
  echo "== $(date -u +%T) +${el}s $base batches $B"
  timeout 240 "${PT[@]}" -o "$W/$base" -- python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" \
    --steps "$S" --batches "$B" --min-new "$PROFILE_TOKENS" --tokens-per-round "$PROFILE_ROUND" --min-rounds 1 --max-rounds 1 \
    --graph-bs "$GRAPH_BS" --profile-window --precapture "$PRECAPTURE" --out "$W/$base.profiled.json" 2>&1 | grep -v -e 'it/s\]' -e '^\s*$' \
    -e 'Processing [0-9]* events' -e '\[1/1\] \[' > "$O/$base.run.log"   # the whole run's log comes back (a failed run's cause)
  tail -8 "$O/$base.run.log"
  ls -la "$W/$base.sqlite" 2>/dev/null || continue
  (cd "$W" && tar -cf - "$base.sqlite" "$base.profiled.json" | xz -T0 -6 > "$O/$base.tar.xz")
  if [ "$(stat -c %s "$O/$base.tar.xz")" -gt 15728640 ]; then
    split -b 15M "$O/$base.tar.xz" "$O/$base.tar.xz.part-" && rm "$O/$base.tar.xz"
  fi
done
ls -la "$O"
echo "== done in $(( $(date +%s) - T0 ))s since T0"
