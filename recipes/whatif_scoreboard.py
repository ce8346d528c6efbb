"""whatif against every real SGLang sweep at once (docs/whatif.md, "Rounds"): per (profile, sweep, batch), calibrated
at the profiled step count with the measured no-speculation tokens/s, the worst and the mean |error| over the other
measured step counts 1..6 and the speed-up's error; from the profile alone the speed-up's error; a summary line.

    python recipes/whatif_scoreboard.py OUT.json     (the real fixtures unpacked: python -m fixtures.unpack)

To compare two versions of the model, run it from each tree (PYTHONPATH=TREE) and diff the summaries."""
import sys, json, warnings
warnings.filterwarnings("ignore")
import numpy as np
from pathlib import Path
from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PAIRS = [("sglang_v2_l64_s3_b4", "sglang_sweep_v2_l64_b4", b) for b in (1, 4, 16, 64)] + \
    [(f"sglang_v2_l{l}_s{s}", f"sglang_sweep_v2_l{l}", b) for l in (64, 8) for s in (3, 1) for b in (1, 16)] + \
    [("sglang_live_h100_v2_l64_s3", "sglang_sweep_h100_v2_l64", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l32_s3", "sglang_sweep_h100_v2_l32", b) for b in (1, 16)] + \
    [("sglang_h200_v1_l64_s3", "sglang_sweep_h200_v1_l64", b) for b in (1, 16, 64)] + \
    [("sglang_h100_v3_l32_s3", "sglang_sweep_h100_v3_l32", b) for b in (1, 4, 16, 64)] + \
    [("sglang_h100_v3_l32_s5", "sglang_sweep_h100_v3_l32", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l128_s3", "sglang_sweep_h100_v2_l128", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l64_s3_clock", "sglang_sweep_h100_v2_l64_clock", b) for b in (1, 16)]
sidecache = {}
rows = []
for prof, sw, b in PAIRS:
    if prof not in sidecache:
        sidecache.clear()
        sidecache[prof] = sides.load_side(REAL / f"{prof}.sqlite")
    side = sidecache[prof]
    m, base = read_measured(REAL / f"{sw}.json", b)
    k = W.infer_steps(side)[0]
    mm = {s: v for s, v in m.items() if 1 <= s <= 6}
    out = {"p": prof, "b": b}
    try:
        r = W.whatif(side, range(1, 7), n_boot=0, batch=b, calibrate_tps=m[k], baseline_tps=base)
        p = r["predictions"].set_index("steps")["tokens_per_s"]
        errs = [100 * (p[s] / mm[s] - 1) for s in mm if s != k]
        out["cal_worst"] = max(errs, key=abs); out["cal_mean"] = float(np.mean(np.abs(errs)))
        out["cal_sp"] = 100 * (r["best"]["speedup"] / (max(mm.values()) / base) - 1)
    except Exception as e:
        out["cal_err"] = str(e)[:60]
    r = W.whatif(side, range(1, 7), n_boot=0, batch=b)
    out["alone_sp"] = 100 * (r["best"]["speedup"] / (max(mm.values()) / base) - 1)
    rows.append(out)
    print(f"{prof:32s} b{b:<3d} cal worst {out.get('cal_worst', float('nan')):+6.1f}% mean {out.get('cal_mean', float('nan')):5.1f}% "
          f"sp {out.get('cal_sp', float('nan')):+6.1f}% | alone sp {out['alone_sp']:+6.1f}%", flush=True)
cw = [abs(r["cal_worst"]) for r in rows if "cal_worst" in r]; cm = [r["cal_mean"] for r in rows if "cal_mean" in r]
al = [abs(r["alone_sp"]) for r in rows]
print(f"SUMMARY cal worst mean {np.mean(cw):.2f} max {np.max(cw):.1f} | cal mean-abs {np.mean(cm):.2f} | "
      f"alone sp mean-abs {np.mean(al):.2f} max {np.max(al):.1f} | alone>25%: {sum(a > 25 for a in al)} | cal worst>10%: {sum(c > 10 for c in cw)}")
json.dump(rows, open(sys.argv[1], "w"))
