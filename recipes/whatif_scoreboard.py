"""whatif against every real SGLang sweep at once (docs/whatif.md, "Rounds"): per (profile, sweep, batch), calibrated
at the profiled step count with the measured no-speculation tokens/s, the worst and the mean |error| over the other
measured step counts 1..6 and the speed-up's error; from the profile alone the speed-up's error (and, for a profile
with the shim's clock, the speed-up's error as `whatif PROFILE --batch B` gives it: calibrated by that clock); per cell
whether it is truth (every engine of the cell converged, its engines within 3% of each other: `?` where not); summary
lines over all pairs, over the clock profiles, and over the cells that are truth; per pair and summed, how far below the
measured best the recommended step count measured ("best lost"); whether speculation pays in one word (whatif's
``best.verdict``, break-even within 3% of 1) against the measured best's word.

    python recipes/whatif_scoreboard.py OUT.json     (the real fixtures unpacked: python -m fixtures.unpack)

To compare two versions of the model, run it from each tree (PYTHONPATH=TREE) and diff the summaries."""
import sys, json, warnings
warnings.filterwarnings("ignore")
import numpy as np
from pathlib import Path
from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import clock_calibration, read_measured
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PAIRS = [("sglang_v2_l64_s3_b4", "sglang_sweep_v2_l64_b4", b) for b in (1, 4, 16, 64)] + \
    [(f"sglang_v2_l{l}_s{s}", f"sglang_sweep_v2_l{l}", b) for l in (64, 8) for s in (3, 1) for b in (1, 16)] + \
    [("sglang_live_h100_v2_l64_s3", "sglang_sweep_h100_v2_l64", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l32_s3", "sglang_sweep_h100_v2_l32", b) for b in (1, 16)] + \
    [("sglang_h200_v1_l64_s3", "sglang_sweep_h200_v1_l64", b) for b in (1, 16, 64)] + \
    [("sglang_h100_v3_l32_s3", "sglang_sweep_h100_v3_l32", b) for b in (1, 4, 16, 64)] + \
    [("sglang_h100_v3_l32_s5", "sglang_sweep_h100_v3_l32", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l128_s3", "sglang_sweep_h100_v2_l128", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l64_s3_clock", "sglang_sweep_h100_v2_l64_clock", b) for b in (1, 16)] + \
    [(p, "sglang_sweep_h100_v2_l48", b) for p in ("sglang_h100_v2_l48_s3", "sglang_h100_v2_l48_s3_gap") for b in (1, 8, 32)]


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}%"


def settled(sweep: str, batch: int) -> dict:
    """{steps: True where the cell is truth}: every engine of that step count converged (its rounds within the
    recipe's tolerance) and, where several engines ran it, they agree within 3%."""
    got = {}
    for r in json.loads((REAL / f"{sweep}.json").read_text())["runs"]:
        for b in ([] if r.get("adaptive") else r["batches"]):
            if int(b["batch"]) == batch:
                got.setdefault(int(r["steps"]), []).append((float(b["tokens_per_s"]), bool(b.get("converged"))))
    return {s: all(c for _, c in v) and max(t for t, _ in v) <= 1.03 * min(t for t, _ in v) for s, v in got.items()}


def _best_loss(r: dict, measured: dict) -> float | None:
    """How far below the measured best the recommended step count measured (%; 0 where it is the measured best; None
    where the recommendation was not measured or is no speculation)."""
    k = r["best"]["steps"]
    return None if k not in measured else 100 * (1 - measured[k] / max(measured.values()))


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
        ok = settled(sw, b)
        out["cells"] = {s: [round(100 * (p[s] / mm[s] - 1), 1), ok.get(s, False)] for s in mm}
        out["settled_k"] = ok.get(k, False) and ok.get(0, False)
        good = [100 * (p[s] / mm[s] - 1) for s in mm if s != k and ok.get(s)]
        out["cal_worst_settled"] = max(good, key=abs) if good and out["settled_k"] else None
        out["cal_worst"] = max(errs, key=abs); out["cal_mean"] = float(np.mean(np.abs(errs)))
        out["cal_sp"] = 100 * (r["best"]["speedup"] / (max(mm.values()) / base) - 1)
        out["cal_best"] = _best_loss(r, mm)
        out["cal_verdict"] = r["best"]["verdict"]
    except Exception as e:
        out["cal_err"] = str(e)[:60]
    r = W.whatif(side, range(1, 7), n_boot=0, batch=b)
    out["alone_sp"] = 100 * (r["best"]["speedup"] / (max(mm.values()) / base) - 1)
    out["alone_verdict"] = r["best"]["verdict"]
    out["measured_verdict"] = W.verdict(max(mm.values()) / base, False)
    # what `whatif PROFILE --batch B` does with no figure given: the profile's own clock calibrates it where it has one
    ck, ctps, csrc, _ = clock_calibration([side], [k], None, b)
    if ctps is not None:
        r = W.whatif(side, range(1, 7), n_boot=0, batch=b, calibrate_tps=ctps, calibrate_steps=ck, calibration_source=csrc)
        out["clock_sp"] = 100 * (r["best"]["speedup"] / (max(mm.values()) / base) - 1)
        out["clock_best"] = _best_loss(r, mm)
        out["clock_verdict"] = r["best"]["verdict"]
    rows.append(out)
    print(f"{prof:32s} b{b:<3d} cal worst {out.get('cal_worst', float('nan')):+6.1f}% mean {out.get('cal_mean', float('nan')):5.1f}% "
          f"sp {out.get('cal_sp', float('nan')):+6.1f}% | alone sp {out['alone_sp']:+6.1f}%"
          + (f" (its clock {out['clock_sp']:+6.1f}%)" if "clock_sp" in out else "") + " | settled: "
          + (f"worst {out['cal_worst_settled']:+6.1f}%" if out.get("cal_worst_settled") is not None else "(k or 0 unsettled)")
          + " " + " ".join(f"{s}:{e:+.0f}{'' if g else '?'}" for s, (e, g) in sorted(out.get("cells", {}).items()))
          + f" | best lost {_pct(out.get('cal_best'))} (clock {_pct(out.get('clock_best'))})",
          flush=True)
cw = [abs(r["cal_worst"]) for r in rows if "cal_worst" in r]; cm = [r["cal_mean"] for r in rows if "cal_mean" in r]
al = [abs(r["alone_sp"]) for r in rows]
print(f"SUMMARY cal worst mean {np.mean(cw):.2f} max {np.max(cw):.1f} | cal mean-abs {np.mean(cm):.2f} | "
      f"alone sp mean-abs {np.mean(al):.2f} max {np.max(al):.1f} | alone>25%: {sum(a > 25 for a in al)} | cal worst>10%: {sum(c > 10 for c in cw)}")
bl = [r["cal_best"] for r in rows if r.get("cal_best") is not None]
cb = [r["clock_best"] for r in rows if r.get("clock_best") is not None]
if bl:
    print(f"BEST (measured tokens/s lost at the recommended step count against the measured best): calibrated mean "
          f"{np.mean(bl):.2f}% max {np.max(bl):.1f}% over {len(bl)} pairs"
          + (f"; clock alone mean {np.mean(cb):.2f}% max {np.max(cb):.1f}% over {len(cb)}" if cb else ""))
ck = [abs(r["clock_sp"]) for r in rows if "clock_sp" in r]
if ck:
    print(f"CLOCK (profiles with the shim's clock, no figure given, as the command runs): {len(ck)} pairs, speed-up "
          f"error mean-abs {np.mean(ck):.2f} max {np.max(ck):.1f}")
cs = [abs(r["cal_worst_settled"]) for r in rows if r.get("cal_worst_settled") is not None]
print(f"SETTLED (cells whose engines converged and agree within 3%, calibrated at a settled cell): {len(cs)} pairs, "
      f"worst mean {np.mean(cs):.2f} max {np.max(cs):.1f} | worst>10%: {sum(c > 10 for c in cs)}")
OPPOSITE = {("pays", "does_not_pay"), ("does_not_pay", "pays")}
for key, what in (("cal_verdict", "calibrated"), ("clock_verdict", "clock alone"), ("alone_verdict", "profile alone")):
    got = [(r[key], r["measured_verdict"]) for r in rows if r.get(key)]
    if got:
        print(f"VERDICT {what}: {len(got)} pairs, same word as measured {sum(a == b for a, b in got)}, the opposite "
              f"(pays vs does not pay) {sum((a, b) in OPPOSITE for a, b in got)}, break-even against a side "
              f"{sum((a == 'break_even') != (b == 'break_even') for a, b in got)}, uncertain {sum(a == 'uncertain' for a, _ in got)}")
json.dump(rows, open(sys.argv[1], "w"))
