#!/bin/bash
# Issue 20 (advise, all-reduce message sizes): does nsys export NCCL's NVTX payload bytes
# (NVTX_EVENTS.binaryData of the ncclAllReduce ranges) on a real tensor-parallel run? The exports in
# fixtures/real/ (nsys 2025.3.1, world 1) hold NCCL's payload schemas and ncclAllReduce ranges but
# no binaryData; analyze/read/nccl_payloads.py decodes the layout nsys-ai documents for nsys 2026.2
# and is checked on synthetic exports only. This records the SGLang-shaped workload at TP 2 (NCCL
# all-reduces between two H200s) with profile-trace, exports it again with blobs where this nsys
# has such an option, and prints what each export holds. Not yet run; ~1-2 min expected.
#
#   device: kind nvidia-h200-x2, carry [".device-kit"], command: "OUT=$OUT bash recipes/nccl_payloads_check.sh"
#   results: $OUT/nccl_payloads.log, $OUT/nccl_tp2*.sqlite
set -u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?set OUT}"
mkdir -p "$OUT"
exec > >(tee "$OUT/nccl_payloads.log") 2>&1
if [ -z "${NSYS:-}" ] && [ -f "$REPO/.device-kit/nsys-setup.sh" ]; then
  source "$REPO/.device-kit/nsys-setup.sh"
fi
export NSYS="${NSYS:-$(command -v nsys)}"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$OUT"
"$PY" -m nvtx_annotate install-pth
$NSYS --version
$NSYS export --help 2>&1 | grep -i -n "blob\|payload\|binary" || echo "nsys export --help: no blob/payload option"
"$PY" -m nvtx_annotate.profile_trace -o nccl_tp2 -t cuda,nvtx -- \
    "$PY" -m spec_workload --world 2 --hidden 4096 --verify-layers 4 --steps 3 --cycles 20 --warmup 2 \
    --cuda-graphs --out-json nccl_tp2.workload.json
if $NSYS export --help 2>&1 | grep -q -- "--include-blobs"; then
  $NSYS export --type sqlite --include-blobs true --force-overwrite true -o nccl_tp2_blobs.sqlite nccl_tp2.nsys-rep
fi
for f in nccl_tp2*.sqlite; do
  echo "== $f"
  "$PY" - "$f" <<'PYEOF'
import sqlite3, sys
from analyze.read.nccl_payloads import message_sizes
c = sqlite3.connect(sys.argv[1])
tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
print("payload tables:", sorted(t for t in tables if "PAYLOAD" in t))
print("binaryData rows:", c.execute("select count(*) from NVTX_EVENTS where binaryData is not null").fetchone()[0],
      "types:", c.execute("select typeof(binaryData), count(*) from NVTX_EVENTS group by 1").fetchall())
print("ncclAllReduce ranges:", c.execute("select count(*) from NVTX_EVENTS e left join StringIds s on s.id=e.textId "
                                         "where coalesce(e.text, s.value)='ncclAllReduce'").fetchone()[0])
print("NCCL kernels:", c.execute("select s.value, count(*) from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on "
                                 "s.id=k.shortName where s.value like 'nccl%' group by 1").fetchall())
row = c.execute("select hex(binaryData) from NVTX_EVENTS where binaryData is not null limit 1").fetchone()
print("first blob:", row[0][:160] if row else None)
frame, info = message_sizes(sys.argv[1])
print("decoded:", len(frame), info)
print(frame.head().to_string() if len(frame) else "")
PYEOF
done
"$PY" -m analyze.cli advise nccl_tp2.sqlite --no-whatif || true
