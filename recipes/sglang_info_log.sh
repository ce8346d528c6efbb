#!/usr/bin/env bash
# A real SGLang 0.5.17 engine run at --log-level info, so that its scheduler prints its own "Decode batch, #running-req:
# M, ... accept len: A, ... gen throughput (token/s): X" lines (every 40 decode steps), beside recipes/sglang_sweep.py's
# tokens/s of the same engine: what `analyze-trace whatif --calibrate-sglang-log` reads, checked against the sweep.
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first), command:
#     V=3 L=32 S=3 BATCHES=1,16 bash recipes/sglang_info_log.sh
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; mkdir -p "$O"
V=${V:-3}; L=${L:-32}; S=${S:-3}; BATCHES=${BATCHES:-1,16}
source recipes/sglang_env.sh
deep_gemm_stub on
[ -d "/tmp/tiny_v${V}_l${L}" ] || tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
timeout 240 python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" --steps "$S" --batches "$BATCHES" \
  --log-level info --out "$O/info_v${V}_l${L}_s${S}.json" > "$O/info_v${V}_l${L}_s${S}.log" 2>&1
echo "rc $?"; grep -c "Decode batch" "$O/info_v${V}_l${L}_s${S}.log"; grep '"tok_s"' "$O/info_v${V}_l${L}_s${S}.log"
