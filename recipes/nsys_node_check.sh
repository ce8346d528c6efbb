#!/usr/bin/env bash
# Is a failure under profile-trace nsys's or the shim's? The 128-layer 3-step engine at batch 1 failed twice
# under profile-trace (--cuda-graph-trace=node) with "CUDA error: unspecified launch failure" (device_plan.md,
# eleventh session). This runs the same workload under plain nsys with the same options, the shim's .pth NOT
# installed (SHIM=1: installed, as profile-trace does), and says whether the engine survived.
#   device: carry [".sglreal", ".device-kit"] (park the fixtures first), command:
#     V=2 L=128 S=3 B=1 bash recipes/nsys_node_check.sh
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$REPO"
O="${OUT:-/tmp/out}"; W=/tmp/nodecheck; mkdir -p "$O" "$W"
V=${V:-2}; L=${L:-128}; S=${S:-3}; B=${B:-1}; SHIM=${SHIM:-0}; TRACE=${TRACE:-node}
exec > >(tee -a "$O/nodecheck.log") 2>&1
source recipes/sglang_env.sh
deep_gemm_stub on
source .device-kit/nsys-setup.sh >/dev/null || exit 5
if [ "$SHIM" = 1 ]; then python3 -m nvtx_annotate install-pth; else python3 -m nvtx_annotate uninstall-pth 2>/dev/null || true; fi
[ -d "/tmp/tiny_v${V}_l${L}" ] || tiny "/tmp/tiny_v${V}_l${L}" "$V" "$L"
echo "== $(date -u +%T) v$V l$L s$S b$B shim=$SHIM trace=$TRACE"
timeout 300 "$NSYS" profile -t cuda,nvtx --trace-fork-before-exec=true --cuda-graph-trace="$TRACE" \
  --cuda-flush-interval=1000 --force-overwrite=true --capture-range=cudaProfilerApi --capture-range-end=stop \
  --sample=none --cpuctxsw=none -o "$W/run" \
  python3 recipes/sglang_sweep.py "/tmp/tiny_v${V}_l${L}" --vocab "$V" --steps "$S" --batches "$B" --min-new 1024 \
  --tokens-per-round 4096 --min-rounds 1 --max-rounds 1 --graph-bs 1,2,4,8,16,32,64 --profile-window \
  --out "$W/run.json" > "$O/nodecheck.run.log" 2>&1
echo "rc $?"
grep -m3 -e "launch failure" -e "tok_s" -e "Traceback" "$O/nodecheck.run.log"
ls -la "$W"
