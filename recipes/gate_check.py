"""The stream gate (nvtx_annotate/live/gate.py) on a real GPU, before an engine relies on it: a held stream
reaches an event only after release (the host sleeps 20 ms between hold and release: the event pair
recorded behind the hold spans ~0, the pair across it ~20 ms), a CUDA graph's launch timed gated vs
ungated (the gated pair should be the graph's kernels only: shorter by about the launch call's host time), and
the watchdog: a host synchronize behind a held stream returns after the gate's timeout (0.25 s), not never.

  python3 recipes/gate_check.py      # prints one line per check; exit 1 when the gate is missing or wrong
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nvtx_annotate.live.gate import torch_stream_gate  # noqa: E402

torch.cuda.init()
torch.zeros(1, device="cuda")
gate = torch_stream_gate()
if gate is None:
    print("gate: none (no libcuda stream memory operations?)")
    sys.exit(1)
ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
ev[0].record()
n = gate.hold()
ev[1].record()
time.sleep(0.02)
ev[2].record()
gate.release(n)
torch.cuda.synchronize()
before, behind = ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])
print(f"gate: before->behind {before:.3f} ms (host slept 20 ms), behind->after {behind:.3f} ms")
ok = before > 15 and behind < 1

# a graph of many small kernels (a long launch call) timed both ways
x = torch.zeros(1024, device="cuda")
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    x.add_(1)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(800):
            x.add_(1)
torch.cuda.synchronize()
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
res = {}
for gated in (False, True, False, True):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = gate.hold() if gated else None
    a.record()
    t0 = time.perf_counter()
    g.replay()
    host = (time.perf_counter() - t0) * 1e3
    if n is not None:
        gate.release(n)
    b.record()
    torch.cuda.synchronize()
    res.setdefault(gated, []).append((a.elapsed_time(b), host))
for gated, xs in res.items():
    print(f"graph of 800 kernels, {'gated' if gated else 'ungated'}: event pair "
          f"{[round(e, 3) for e, _ in xs]} ms, launch call {[round(h, 3) for _, h in xs]} ms")
# the watchdog: a host that waits for the held stream (what a blocking launch does) is freed after timeout_s
n = gate.hold()
t0 = time.perf_counter()
torch.cuda.synchronize()                # would never return without the watchdog
waited = time.perf_counter() - t0
gate.release(n)
print(f"watchdog: a synchronize behind a held stream returned after {waited:.3f} s, tripped {gate.tripped}")
ok = ok and gate.tripped and 0.2 < waited < 2.0
print("gate check:", "ok" if ok else "WRONG")
sys.exit(0 if ok else 1)
