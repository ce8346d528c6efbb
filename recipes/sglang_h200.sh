#!/usr/bin/env bash
# Real SGLang 0.5.17 EAGLE-3 on one H200 through profile-trace, as a user runs it: the recipe behind
# fixtures/real/sglang_* (issue 14). One device call, about 6 minutes:
#
#   cp -r ../shared/sglang-h200 .sglreal; cp ../shared/device/* .device-kit/   (both in .git/info/exclude)
#   device: carry [".sglreal", ".device-kit"], command: "bash recipes/sglang_h200.sh [steps...]"
#
# steps (default all): eager graphs server vocab scripts
#   eager   sglang.Engine, no CUDA graphs           -> sglang_eager.{sqlite,stats_*.csv,requests.json}
#   graphs  sglang.Engine, CUDA graphs (node trace) -> sglang_graphs.*
#   server  python -m sglang.launch_server (graphs, 64-token vocabulary) driven by `profile-trace --drive
#           --capture cudaprofilerapi`: exactly SGLang's /start_profile window, holding the whole load
#                                                                         -> sglang_server.*, .load.json
#   vocab   eager with a 64-token vocabulary, so random weights accept some draft tokens
#   scripts nsys 2025.3's own stats scripts + its sqlite (for the side-by-side benchmark, issue 19;
#           NVIDIA's files: unpack outside the repository, never commit them)
# Each step's files are packed into $OUT/<step>.tar.xz; the log is $OUT/record.log.
# Re-run 2026-12-03 at 47cb4d3 (`eager server`, 176 s): both exports equal nsys stats (projection, kernel
# and NVTX sums), as tests/test_nsys_equality.py checks fixtures/real/sglang_*.
# Models: tiny Llama target (8 layers, hidden 1024) and a 1-layer EAGLE-3 draft, random weights
# (--load-format dummy), written by the bundle's make_tiny_models.py. TP 1 (one GPU): no all-reduce.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
K="$REPO/.sglreal"; O="${OUT:-/tmp/out}"; W=/tmp/sgrec; mkdir -p "$O" "$W"
STEPS=("$@"); [ ${#STEPS[@]} -eq 0 ] && STEPS=(eager graphs server vocab scripts)
exec > >(tee -a "$O/record.log") 2>&1
# the bundle, the environment and deep_gemm_stub (one definition, shared with the sweep recipes);
# this recipe's own `tiny [VOCAB]` below replaces the shared `tiny DIR VOCAB LAYERS`
source recipes/sglang_env.sh
tiny() {  # tiny [VOCAB]: config.json files of the target and drafts in /tmp/tiny${1}
  python3 /tmp/b/make_tiny_models.py "/tmp/tiny$1" >/dev/null
  python3 - "/tmp/tiny$1" "$1" <<'PY'
import json, sys
d, vocab = sys.argv[1], sys.argv[2]
for name in ("target", "eagle3", "eagle"):
    p = f"{d}/{name}/config.json"; c = json.load(open(p))
    if name == "target": c["num_hidden_layers"] = 8   # EAGLE-3 taps layers 2, L/2, L-3: 4 layers collide
    if vocab:
        c["vocab_size"] = int(vocab)
        if "draft_vocab_size" in c: c["draft_vocab_size"] = int(vocab)
    json.dump(c, open(p, "w"))
PY
}
tiny ""
source .device-kit/nsys-setup.sh >/dev/null || exit 5
echo "== $(date -u +%FT%TZ) nsys: $($NSYS --version)"; nvidia-smi -L
python3 -c 'import torch,sglang; print("torch", torch.__version__, "sglang", sglang.__version__)'
python3 -m nvtx_annotate install-pth
python3 -m nvtx_annotate --check | tee "$W/check.txt"
PT=(python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" -t cuda,nvtx --stats --force
    --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none)
SERVER=(python3 -m sglang.launch_server --model-path /tmp/tiny64/target --load-format dummy --skip-tokenizer-init
  --speculative-algorithm EAGLE3 --speculative-draft-model-path /tmp/tiny64/eagle3 --speculative-num-steps 3
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --attention-backend triton --sampling-backend pytorch
  --grammar-backend none --mem-fraction-static 0.5 --tp-size 1 --max-running-requests 8
  --host 127.0.0.1 --port 30000 --log-level info)
stats_more() { "$NSYS" stats -r nvtx_sum,nvtx_kern_sum --format csv --force-export false -o "$1.stats" "$1.sqlite" >/dev/null 2>&1 || echo "stats failed: $1"; }
pack() {  # pack STEP FILES...: $OUT/STEP.tar.xz
  local step=$1; shift; tar -C "$W" -cJf "$O/$step.tar.xz" "$@" check.txt && ls -la "$O/$step.tar.xz"
}
for step in "${STEPS[@]}"; do
  echo "== $(date -u +%T) step $step"; t0=$SECONDS
  case $step in
    eager|graphs)
      G=(); deep_gemm_stub off; [ "$step" = graphs ] && { G=(--graphs); deep_gemm_stub on; }
      timeout 280 "${PT[@]}" -o "$W/sglang_$step" -- python3 recipes/sglang_engine.py /tmp/tiny "${G[@]}" \
        --n 8 --new 32 --rounds 2 --out-json "$W/sglang_$step.requests.json" 2>&1 | grep -v -e '^\[[0-9]/[0-9]\]' -e 'Generat' | tail -25
      stats_more "$W/sglang_$step"
      (cd "$W" && pack "$step" sglang_$step.sqlite sglang_$step.stats_*.csv sglang_$step.requests.json) ;;
    server)
      # the 64-token vocabulary (random weights then accept some drafts) and a window (num_steps 400) longer
      # than the load: the whole load is captured, so tokens per cycle can be checked against what SGLang
      # reports per request (BASE.load.json); profile-trace closes the window with /stop_profile
      deep_gemm_stub on; tiny 64
      timeout 300 "${PT[@]}" -o "$W/sglang_server" --capture cudaprofilerapi --sglang-steps 400 --drive \
        --requests 8 --concurrency 8 --input-len 32 --output-len 32 --prompt-vocab 60 --sglang-wait 240 --stop-grace 120 -- \
        "${SERVER[@]}" 2>&1 | grep -v -e '^\[[0-9]/[0-9]\]' -e 'Generat' | tail -30
      stats_more "$W/sglang_server"
      (cd "$W" && pack server sglang_server.sqlite sglang_server.stats_*.csv sglang_server.load.json) ;;
    vocab)
      deep_gemm_stub off; tiny 64
      timeout 240 "${PT[@]}" -o "$W/sglang_vocab64" -- python3 recipes/sglang_engine.py /tmp/tiny64 --vocab 64 \
        --n 8 --new 32 --rounds 2 --out-json "$W/sglang_vocab64.requests.json" 2>&1 | grep -v -e '^\[[0-9]/[0-9]\]' -e 'Generat' | tail -25
      stats_more "$W/sglang_vocab64"
      (cd "$W" && pack vocab sglang_vocab64.sqlite sglang_vocab64.stats_*.csv sglang_vocab64.requests.json) ;;
    scripts)
      H=$(dirname "$NSYS"); LIBS=()
      for f in libsqlite3.so.0 sqlite3; do p=$(find "$H" "$(dirname "$H")" -maxdepth 3 -name "$f" 2>/dev/null | head -1); [ -n "$p" ] && LIBS+=("$p"); done
      echo "nsys dir $H; sqlite: ${LIBS[*]}"
      mkdir -p "$W/nsys_scripts"; cp -a "$H"/python/lib "$H"/reports "$H"/rules "$W/nsys_scripts/" 2>/dev/null
      mkdir -p "$W/nsys_scripts/python"; mv "$W/nsys_scripts/lib" "$W/nsys_scripts/python/lib" 2>/dev/null
      [ ${#LIBS[@]} -gt 0 ] && cp -L "${LIBS[@]}" "$W/nsys_scripts/"
      "$NSYS" --version > "$W/nsys_scripts/VERSION"
      tar -C "$W" -cJf "$O/nsys_scripts.tar.xz" nsys_scripts && ls -la "$O/nsys_scripts.tar.xz" ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== step $step took $((SECONDS - t0)) s"
done
ls -la "$O"
