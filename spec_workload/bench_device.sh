#!/bin/bash
# Overhead of the NVTX shim on the GPU machine (nsys 2025.3): ns per push/pop pair and per wrapped
# call, with no profiler attached (backend inactive) and under `nsys profile -t nvtx`
# (ctypes client, and torch.cuda.nvtx for comparison). Results: $OUT/bench.txt
set -u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/.device-kit/nsys-setup.sh" >/dev/null
export PYTHONPATH="$REPO"
cd /tmp
{
  echo "# shim start-up, ms: a fresh interpreter, then one that imported torch first"
  for pre in "" "import torch; "; do
    SPECPROF_NVTX=1 python3 -c "${pre}import time; t = time.perf_counter_ns(); import nvtx_annotate._boot; print((time.perf_counter_ns() - t) / 1e6)"
  done
  echo "# no profiler (is_current_stream_capturing_ns: the per-stream capture query on this GPU)"
  python3 -m nvtx_annotate bench -n 300000
  for b in ctypes torch; do
    echo "# nsys $($NSYS --version | awk '{print $NF}') -t nvtx, backend $b"
    SPECPROF_NVTX_BACKEND=$b $NSYS profile -t nvtx --sample=none --cpuctxsw=none -o b_$b --force-overwrite=true \
      python3 -m nvtx_annotate bench -n 300000 2>/dev/null | grep '^{'
  done
  lscpu | grep -m1 "Model name"
} | tee "$OUT/bench.txt"
# the capture guard with the current code: a 1-rank CUDA-graph run, NVTX range counts per name
cd /tmp && python3 -m nvtx_annotate install-pth >/dev/null
python3 -m nvtx_annotate.profile_trace --nsys "$NSYS" --package spec_workload -o guard -- \
  python3 -m spec_workload --world 1 --steps 3 --cycles 3 --warmup 1 --cuda-graphs >/dev/null 2>&1
python3 - <<'PY' | tee -a "$OUT/bench.txt"
import sqlite3, collections
c = sqlite3.connect("guard.sqlite")
rows = c.execute("select coalesce(e.text, s.value) from NVTX_EVENTS e left join StringIds s on s.id=e.textId "
                 "where eventType=59 and domainId=(select domainId from NVTX_EVENTS where eventType=75 and text='sglang')")
print("guard ranges", sorted(collections.Counter(r[0] for r in rows).items()))
PY
