#!/usr/bin/env bash
# Issue 43 on one H200: the shim's timing mode (SPECPROF_TIMING=1, docs/live.md) on real SGLang 0.5.17
# EAGLE-3: (a) its overhead on tokens/s, engines with and without it interleaved (off, on, off, on: a
# drift of the machine does not favour one side), unprofiled; (b) one engine under profile-trace WITH
# the timing mode on, so that the live log's per-cycle phase times can be compared with the same
# run's nsys-derived ones (`analyze-trace whatif` / the cycle tables of both: tests to be written
# from the files).
#
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first: recipes/device_tree.sh), command:
#     CONFIG=2:64 STEPS=3 BATCHES=1,16 BUDGET_S=500 bash recipes/sglang_live.sh
#   the overhead inside one engine (rounds alternate timing on / paused), two engines:
#     ENGINES="alt alt" CONFIG=2:64 STEPS=3 BATCHES=1,16 BUDGET_S=400 bash recipes/sglang_live.sh
#   the same with the CUDA events off (host times only: what the events cost): EVENTS=0; events in every
#   cycle instead of one in 41: SAMPLE=1. The profile times one cycle in 41 too (PROFILE_SAMPLE, default 41):
#   events in every cycle cost 3-12% of tokens/s (H100, 2026-12-05) and would bias a whatif from the profile
#   alone; recipes/live_compare.py compares medians, over the timed cycles on the log's side
#   eager mode (SGLang's --disable-cuda-graph): GRAPH_BS=none (the profile is named ..._eager)
#   SGLang's adaptive speculation (--speculative-adaptive; STEPS is the step count it starts at): ADAPTIVE=default
#   or ADAPTIVE=path/config.json (the profile is named ..._adaptive): the live log's `steps` column and the
#   profile's `spec_steps` marks carry each cycle's step count (issues 41, 43). Start at the config's largest
#   candidate (STEPS=7 for SGLang's default): SGLang 0.5.17 sizes its buffers by the start value and fails on
#   the first switch above it ("shared logits buffer holds 64 rows but caller needs 128", 2026-12-06)
#   the shim's own cost before and after a change, one machine (carry .oldshim too):
#     mkdir -p .oldshim && git archive REV nvtx_annotate | tar -x -C .oldshim
#     ENGINES="onold on onold" CONFIG=3:32 STEPS=3 BATCHES=1,16 BUDGET_S=300 bash recipes/sglang_live.sh
#   the profile alone (its engines skipped), e.g. a second call while the machine is warm:
#     ENGINES= CONFIG=2:64 STEPS=3 BATCHES=1,16 BUDGET_S=400 bash recipes/sglang_live.sh
#
# Writes $OUT/live_sweep.json (every engine: tokens/s per batch, spreads; `live` says which had the
# timing mode on), $OUT/live_logs.tar.xz (the Parquet logs of every timed engine, by engine), and,
# when the budget allows, $OUT/sglang_live_v{V}_l{L}_s{S}.tar.xz (the profile + its live log).
# ~75 s an engine; ~150 s the profile.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/live; mkdir -p "$O" "$W"
CONFIG=${CONFIG:-"2:64"}; STEPS=${STEPS:-3}; BATCHES=${BATCHES:-1,16}; BUDGET_S=${BUDGET_S:-500}
T0=${T0:-$(date +%s)}; GRAPH_BS=${GRAPH_BS:-1,4,16,64}
ROUND_ARGS=${ROUND_ARGS:-}            # e.g. "--min-new 128 --tokens-per-round 1024" (eager mode: slow rounds)
ADAPTIVE=${ADAPTIVE:-}; SPEC=(--steps "$STEPS")   # every engine's and the profile's speculation arguments
[ -n "$ADAPTIVE" ] && SPEC+=(--adaptive "$ADAPTIVE" --log-level info)
ENGINES=${ENGINES-"off on off on"}   # ENGINES="" : the profile alone (a second call on a warm machine);
                                     # "alt": one engine, rounds alternating timing on / paused (the overhead)
exec > >(tee -a "$O/live.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
python3 -m nvtx_annotate install-pth          # the shim in SGLang's scheduler processes (SPECPROF_NVTX=1)
V=${CONFIG%%:*}; L=${CONFIG##*:}; tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
n=0
for mode in $ENGINES; do
  el=$(( $(date +%s) - T0 ))
  if [ "$el" -gt "$BUDGET_S" ]; then echo "== budget: skipping engine $n ($mode)"; continue; fi
  n=$((n + 1)); tag="e${n}_${mode}"
  echo "== $(date -u +%T) +${el}s engine $n timing $mode"
  if [ "$mode" = alt ]; then
    # the overhead inside ONE engine: rounds alternate timing on / paused (SPECPROF_TIMING_PAUSE_FILE made
    # and removed by the sweep between rounds); engines of one configuration differ by 8-27% on one machine
    rm -f "$W/pause"; mkdir -p "$W/logs"
    env SPECPROF_NVTX=1 SPECPROF_TIMING=1 SPECPROF_TIMING_DIR="$W/logs/$tag" SPECPROF_TIMING_FILE_S=10 \
      SPECPROF_TIMING_EVENTS="${EVENTS:-1}" SPECPROF_TIMING_SAMPLE="${SAMPLE:-41}" \
      timeout 400 python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" "${SPEC[@]}" \
      --batches "$BATCHES" --graph-bs "$GRAPH_BS" --alternate-timing "$W/pause" --min-rounds 4 --max-rounds 8 $ROUND_ARGS \
      --out "$W/$tag.json" 2>&1 | grep -v -e 'it/s\]' -e '^\s*$' | tail -6
    python3 -c "import json,sys; [print(f\"   batch {b['batch']}: on {b['tokens_per_s_timing_on']:.1f} paused {b['tokens_per_s_timing_paused']:.1f} overhead {100*b['timing_overhead']:+.2f}% pairs {[round(x,3) for x in b['timing_pair_ratios']]}\") for b in json.load(open(sys.argv[1]))['batches']]" "$W/$tag.json"
  elif [ "$mode" = on ] || [ "$mode" = onold ]; then
    # onold: the same with another copy of the shim first on the path (OLD_SHIM, a directory holding an
    # nvtx_annotate package, e.g. an earlier commit's: `git archive REV nvtx_annotate | tar -x -C .oldshim`):
    # the shim's own cost before and after a change, on one machine in one call
    shim_path=""; [ "$mode" = onold ] && shim_path="$REPO/${OLD_SHIM:-.oldshim}"
    if [ -n "$shim_path" ] && [ ! -f "$shim_path/nvtx_annotate/__init__.py" ]; then
      echo "== $tag: no nvtx_annotate under $shim_path (carry it): engine skipped"; continue
    fi
    # /metrics of rank 0 (SPECPROF_METRICS_PORT + rank), scraped every 3 s while the engine runs: the last
    # good scrape is kept (issue 43: "/metrics serves the histograms")
    mkdir -p "$W/logs"
    ( for i in $(seq 1 90); do sleep 3; curl -sf -m 2 http://127.0.0.1:9400/metrics -o "$W/m.tmp" \
        && mv "$W/m.tmp" "$W/logs/metrics_$tag.txt"; done ) & scraper=$!
    env ${shim_path:+PYTHONPATH="$shim_path:$PYTHONPATH"} SPECPROF_NVTX=1 SPECPROF_TIMING=1 SPECPROF_TIMING_DIR="$W/logs/$tag" \
      SPECPROF_TIMING_FILE_S=10 SPECPROF_METRICS_PORT=9400 \
      timeout 300 python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" "${SPEC[@]}" \
      --batches "$BATCHES" --graph-bs "$GRAPH_BS" --out "$W/$tag.json" 2>&1 | grep -v -e 'it/s\]' -e '^\s*$' | tail -6
    kill "$scraper" 2>/dev/null; ls -la "$W/logs/metrics_$tag.txt" 2>/dev/null || echo "   no /metrics scrape"
  else    # the shim loaded (NVTX no-ops without a profiler), the timing mode off: only the timing differs
    env SPECPROF_NVTX=1 timeout 300 python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" \
      "${SPEC[@]}" --batches "$BATCHES" --graph-bs "$GRAPH_BS" --out "$W/$tag.json" 2>&1 \
      | grep -v -e 'it/s\]' -e '^\s*$' | tail -6
  fi
done
python3 - "$W" "$O/live_sweep.json" <<'PY'
import glob, json, os, sys
runs = []
for f in sorted(glob.glob(sys.argv[1] + "/e*_*.json")):
    r = json.load(open(f)); r["live"] = f.rsplit("_", 1)[1].startswith("on"); r["engine"] = os.path.basename(f)[:-5]
    runs.append(r)
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    for b in r["batches"]:
        print(f"{r['engine']:>8} live={int(r['live'])} batch {b['batch']:>3}: {b['tokens_per_s']:10.1f} tok/s "
              f"spread {100 * b['spread']:.1f}%")
PY
[ -d "$W/logs" ] && (cd "$W" && tar -cf - logs | xz -T0 -6 > "$O/live_logs.tar.xz")
el=$(( $(date +%s) - T0 ))
if [ "$el" -lt "$((BUDGET_S - 150))" ]; then
  source .device-kit/nsys-setup.sh >/dev/null || exit 5
  base="sglang_live_v${V}_l${L}_s${STEPS}"; [ "$GRAPH_BS" = none ] && base="${base}_eager"
  [ -n "$ADAPTIVE" ] && base="${base}_adaptive"
  echo "== $(date -u +%T) +${el}s profile with the timing mode on: $base"
  SPECPROF_TIMING=1 SPECPROF_TIMING_DIR="$W/$base.live" SPECPROF_TIMING_FILE_S=10 \
    SPECPROF_TIMING_SAMPLE="${PROFILE_SAMPLE:-41}" timeout 240 \
    python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" -t cuda,nvtx --force --capture cudaprofilerapi \
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none -o "$W/$base" -- python3 recipes/sglang_sweep.py \
    "/tmp/tiny_v${V}_l${L}" --vocab "$V" "${SPEC[@]}" --batches "$BATCHES" --min-new 1024 \
    --tokens-per-round 4096 --min-rounds 1 --max-rounds 1 --graph-bs "$GRAPH_BS" --profile-window $ROUND_ARGS \
    --out "$W/$base.profiled.json" 2>&1 | grep -v -e 'it/s\]' -e '^\s*$' | tail -8
  # the same report as nsys's Parquet export too (issue 42: a Parquet input must give its SQLite twin's results)
  [ -e "$W/$base.nsys-rep" ] && timeout 120 "$NSYS" export --type parquetdir --force-overwrite true \
    -o "$W/$base.parquetdir" "$W/$base.nsys-rep" >/dev/null 2>&1; ls -d "$W/$base.parquetdir" 2>/dev/null
  (cd "$W" && tar -cf - "$base.sqlite" "$base.profiled.json" "$base.live" "$base.parquetdir" 2>/dev/null \
     | xz -T0 -6 > "$O/$base.tar.xz")
  if [ "$(stat -c %s "$O/$base.tar.xz")" -gt 15728640 ]; then
    split -b 15M "$O/$base.tar.xz" "$O/$base.tar.xz.part-" && rm "$O/$base.tar.xz"
  fi
fi
echo "== done in $(( $(date +%s) - T0 ))s"
