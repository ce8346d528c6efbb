#!/usr/bin/env bash
# Issue 40: the profile's own clock through a real SGLang 0.5.17 server, as a user takes a profile:
# `profile-trace --drive --capture cudaprofilerapi --clock-rounds N` runs the load N times before SGLang's
# /start_profile opens the window (the shim keeps those decode cycles' periods as clock marks), then the load
# inside the window. The same server command then runs twice without nsys, in the same call:
#   plain  the shim loaded, nothing on: the client's tokens/s per round (the truth a user sees)
#   live   the timing mode on (SPECPROF_TIMING=1): every decode cycle's period, unprofiled, per batch size:
#          what the clock marks claim to be (costs ~1-3% itself: docs/live.md); stopped with SIGINT to its group
#   liveterm  the same, stopped with SIGTERM to the server's main process only (`kill PID`, `docker stop`)
#
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first: recipes/device_tree.sh), command:
#     CONFIG=8:32 STEPS=3 bash recipes/sglang_server_clock.sh
# CONFIG=V:L (vocabulary, target layers; V >= 4: prompt ids are drawn from 3..V-1), REQUESTS (64),
# CONCURRENCY (16: also --max-running-requests), OUTPUT_LEN (256), CLOCK_ROUNDS (3), WINDOW (SGLang's
# num_steps, 300), ROUNDS (the plain server's timed rounds, 5), SERVERS (the order, default "nsys plain live").
# Writes $OUT/server_clock.log, $OUT/{plain,live}N.rounds.json (client rounds; N: the server's place in SERVERS),
# $OUT/server.load.json (the driven run's rounds, clock rounds included), $OUT/live.tar.xz (the live logs, liveN/:
# each server stopped with SIGINT to its process group, as Ctrl-C stops it), and the export split in 12 MiB
# parts $OUT/server.sqlite.xz.part{0,1,...} with its sha256 (cat the parts, unxz, check).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/srvclock; mkdir -p "$O" "$W"
IFS=: read -r V L <<< "${CONFIG:-8:32}"; S=${STEPS:-3}; C=${CONCURRENCY:-16}; REQ=${REQUESTS:-64}
OLEN=${OUTPUT_LEN:-256}; CR=${CLOCK_ROUNDS:-3}; WIN=${WINDOW:-300}; R=${ROUNDS:-5}
SERVERS=${SERVERS:-"nsys plain live"}
PV=$((V - 3)); [ "$PV" -ge 1 ] || { echo "CONFIG: the vocabulary must be 4 or more (prompt ids 3..V-1)"; exit 2; }
exec > >(tee -a "$O/server_clock.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
source .device-kit/nsys-setup.sh >/dev/null || exit 5
python3 -m nvtx_annotate install-pth
M="/tmp/tiny_v${V}_l${L}"; [ -d "$M" ] || tiny "$M" "$V" "$L"
SERVER=(python3 -m sglang.launch_server --model-path "$M/target" --load-format dummy --skip-tokenizer-init
  --speculative-algorithm EAGLE3 --speculative-draft-model-path "$M/eagle3" --speculative-num-steps "$S"
  --speculative-eagle-topk 1 --speculative-num-draft-tokens $((S + 1)) --attention-backend triton
  --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.5 --tp-size 1
  --max-running-requests "$C" --cuda-graph-bs 1 4 "$C" --random-seed 0 --host 127.0.0.1 --port 30000)
LOAD=(--requests "$REQ" --concurrency "$C" --input-len 32 --output-len "$OLEN" --prompt-vocab "$PV")
# the load R times against the server on :30000, the client's tokens/s per round
cat > "$W/rounds.py" <<'PY'
import json, sys
from nvtx_annotate import serve
out, req, conc, olen, pv, rounds = sys.argv[1], *map(int, sys.argv[2:])
url = "http://127.0.0.1:30000"
load = serve.Load(requests=req, concurrency=conc, input_len=32, output_len=olen, vocab=pv, clock_rounds=0)
serve.wait_ready(url, 240)
prompts = load.prompts()
for ids in prompts[:2]:
    serve.generate(url, ids, 16)
rows = []
for i in range(rounds):
    res, seconds = serve.run_load(url, load, prompts)
    tokens = sum(r.completion_tokens or 0 for r in res if r.ok)
    rows.append({"seconds": seconds, "succeeded": sum(r.ok for r in res), "completion_tokens": tokens,
                 "tokens_per_s": tokens / seconds})
    print(f"round {i + 1}: {tokens} tokens in {seconds:.2f} s, {tokens / seconds:.1f} tokens/s", flush=True)
tps = [r["tokens_per_s"] for r in rows]
json.dump({"load": vars(load), "rounds": rows, "spread": (max(tps) - min(tps)) / min(tps)}, open(out, "w"), indent=1)
PY
T0=$(date +%s); i=0; rm -rf "$W"/live*
for s in $SERVERS; do
  i=$((i + 1))
  echo "== $(date -u +%T) +$(( $(date +%s) - T0 ))s server $s ($i) v$V l$L s$S"
  case $s in
    nsys)
      timeout 330 python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" -t cuda,nvtx --force \
        --capture cudaprofilerapi --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none -o "$W/server" \
        --drive --clock-rounds "$CR" --sglang-steps "$WIN" "${LOAD[@]}" --sglang-wait 240 --stop-grace 120 \
        -- "${SERVER[@]}" 2>&1 | grep -v -e '^\[[0-9]/[0-9]\]' -e 'Generat' -e 'Prefill batch' -e 'Decode batch' | tail -25
      cp "$W/server.load.json" "$O/" 2>/dev/null
      if [ -f "$W/server.sqlite" ]; then
        sha256sum "$W/server.sqlite" > "$O/server.sqlite.sha256"
        xz -T0 -9 -c "$W/server.sqlite" | split -b 12M -d -a 1 - "$O/server.sqlite.xz.part"
        ls -la "$O"/server.sqlite.xz.part*
      fi ;;
    plain|live|liveterm)
      env=(SPECPROF_NVTX=1); [ "$s" != plain ] && env+=(SPECPROF_TIMING=1 SPECPROF_TIMING_DIR="$W/live$i")
      # a background job of this non-interactive shell would ignore SIGINT, and so would the schedulers it spawns
      # (Ctrl-C never reaches them; SGLang then SIGKILLs them): SIGINT restored to its default, as a terminal has it
      env "${env[@]}" setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
        "${SERVER[@]}" > "$W/$s.server.log" 2>&1 & pid=$!
      timeout 300 python3 "$W/rounds.py" "$W/$s.rounds.json" "$REQ" "$C" "$OLEN" "$PV" "$R" \
        || { echo "== $s: the load failed"; tail -20 "$W/$s.server.log"; }
      if [ "$s" = liveterm ]; then kill -TERM "$pid"; else kill -INT -- "-$pid"; fi 2>/dev/null; for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      cp "$W/$s.rounds.json" "$O/$s$i.rounds.json" 2>/dev/null
      if [ "$s" != plain ]; then  # live: stopped as Ctrl-C stops it (every file complete, .parquet); liveterm: as
                                  # `kill PID` or `docker stop` does (the open file left .arrows, read to its last batch)
        ls -la "$W/live$i"; python3 -m analyze.cli "$W/live$i" 2>&1 | head -14
      fi ;;
    *) echo "unknown server $s" ;;
  esac
done
ls -d "$W"/live* >/dev/null 2>&1 && (cd "$W" && tar -cJf "$O/live.tar.xz" live*)
echo "== done in $(( $(date +%s) - T0 ))s"; ls -la "$O"
