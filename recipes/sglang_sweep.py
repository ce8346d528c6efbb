"""Ground truth for whatif/advise: real SGLang's own tokens/s, WITHOUT any profiler, for one engine
(one vocabulary, target depth and ``--speculative-num-steps``), at several batch sizes.

One process = one ``sglang.Engine`` (the same tokenizer manager and spawned scheduler as
``launch_server``) on tiny random-weight models (``--load-format dummy``; no tokenizer, no download).
Realistic acceptance without real weights: the dummy weights are tiny, logits nearly uniform, so at
temperature 1 with a vocabulary of V tokens SGLang's target-only speculative sampling accepts a draft
token with probability about 1/V (../shared/NOTES.md). ``--steps 0`` runs without speculation.

For each batch size B: one short warm-up round, then rounds of B requests x NEW tokens (thousands of
tokens a round) until the last three rounds agree within ``--tol`` (max/min - 1) or ``--max-rounds``
is reached. tokens/s of a round = completion tokens / the round's wall time (``engine.generate``,
prefill of the 32-token prompts included: <1% of a round). Reported: every round, the median of the
last three and their spread, and SGLang's own acceptance (``meta_info``: completion tokens /
``spec_verify_ct`` = tokens per request per cycle).

SGLang's adaptive mode (``--adaptive default|FILE``; SGLang 0.5.17 ``--speculative-adaptive`` and
``--speculative-adaptive-config``, ``srt/speculative/adaptive_spec_params.py``): the engine captures the
draft, draft-extend and verify graphs of every candidate step count of the config (the union over its
batch-size keys) and picks, per batch-size bucket, among that bucket's candidates by an EMA of
acceptance. ``--steps`` is then SGLang's ``--speculative-num-steps``, the step count it starts at: it
must be one of the candidates (SGLang raises otherwise) and > 0 (at 0 SGLang reports no
``spec_verify_ct``); omitted: the largest candidate. The output JSON's ``adaptive`` holds the mode, the
config's content and path, the candidates and the start; with ``--log-level info`` SGLang logs every
switch, which ``--merge`` attaches to the batch it happened in (``adaptive_switches``).

usage: python recipes/sglang_sweep.py TINY_DIR --vocab V --steps N --batches 1,4,16,64 --out F.json
       python recipes/sglang_sweep.py TINY_DIR --vocab V --adaptive default|FILE [--steps N] ... --out F.json
       python recipes/sglang_sweep.py ... --dry-run       # print the Engine kwargs; sglang not imported
       python recipes/sglang_sweep.py --merge DIR OUT.json  # DIR/*.json (+ DIR/*.log) -> one sweep.json
       python recipes/sglang_sweep.py --compare SWEEP.json...  # per batch: fixed step counts vs adaptive
       python recipes/sglang_sweep.py --whatif-args SWEEP.json 3  # whatif --per-batch's measured figures
Driven by recipes/sglang_sweep.sh (one engine per step count or adaptive config). The merged file:
``{"runs": [fixed-step engines], "adaptive_runs": [adaptive engines]}``: ``runs`` keeps the format the
readers take (analyze/tools/whatif/command.py ``sweep_tokens_per_s``, the tests)."""
import argparse
import copy
import glob
import json
import math
import os
import re
import statistics
import sys
import time

DEFAULT_ADAPTIVE_CONFIG = {
    # SGLang 0.5.17 srt/speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG (used when
    # --speculative-adaptive-config is not given); tests/test_recipes_sweep.py checks it against the bundle.
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
SWITCH = re.compile(r"Adaptive spec params updated: steps (\d+) -> (\d+)")
BATCH_MARK = re.compile(r"^sweep: batch (\d+) begin")


def new_tokens_for(batch, tokens_per_round):
    """Tokens each request generates in a round: tokens_per_round over the batch, at least 128."""
    return max(128, tokens_per_round // batch)


MAX_ROUND_REPEATS = 32


def round_repeats(first_round_s, min_round_s):
    """How many generate calls make a round of at least ``min_round_s`` seconds, from the first round's
    duration (1 when it is long enough; at most MAX_ROUND_REPEATS)."""
    if first_round_s >= min_round_s:
        return 1
    return int(min(MAX_ROUND_REPEATS, math.ceil(min_round_s / max(first_round_s, 1e-9))))


def spread(values):
    """max/min - 1 of the values (0 for one value)."""
    return max(values) / min(values) - 1.0 if values and min(values) > 0 else float("inf")


def candidate_steps(cfg):
    """The union of a config's candidate_steps over its batch-size keys, sorted, validated as SGLang
    0.5.17's ``_load_adaptive_config`` does (keys that are not digits skipped; each list non-empty,
    non-negative ints; at least one batch-size key)."""
    steps = set()
    keys = [k for k in cfg if str(k).isdigit()]
    if not keys:
        raise ValueError(f"adaptive config: no batch-size key (keys {list(cfg)})")
    for k in keys:
        c = cfg[k].get("candidate_steps") if isinstance(cfg[k], dict) else None
        if not isinstance(c, list) or not c or not all(isinstance(x, int) and not isinstance(x, bool)
                                                       and x >= 0 for x in c):
            raise ValueError(f"adaptive config: BS {k}: candidate_steps must be a list of non-negative ints, got {c!r}")
        steps.update(c)
    return sorted(steps)


def adaptive_record(mode, start):
    """``mode`` 'default' or a config file -> the output's ``adaptive`` record (mode, path, content,
    candidates, start steps). ``start`` None: the largest candidate; else it must be a candidate > 0."""
    if mode == "default":
        path, cfg = None, copy.deepcopy(DEFAULT_ADAPTIVE_CONFIG)
    else:
        path = os.path.abspath(mode)
        with open(path) as f:
            cfg = json.load(f)
    cand = candidate_steps(cfg)
    if start is None:
        start = max(cand)
    if start not in cand:
        raise ValueError(f"--steps {start} is not in the adaptive config's candidate_steps {cand} "
                         "(SGLang 0.5.17 raises the same)")
    if start < 1:
        raise ValueError(f"adaptive: start at a positive candidate of {cand}, not {start} (at 0 SGLang's "
                         "meta_info has no spec_verify_ct: no acceptance to record)")
    return {"mode": "default" if mode == "default" else "file", "config_path": path, "config": cfg,
            "candidate_steps": cand, "start_steps": start}


def engine_kwargs(a, batches):
    """(sglang.Engine kwargs, adaptive record or None) for the parsed arguments."""
    kw = dict(model_path=f"{a.tiny}/target", load_format="dummy", skip_tokenizer_init=True,
              attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
              mem_fraction_static=0.5, tp_size=1, max_running_requests=max(batches),
              log_level=a.log_level, random_seed=0)
    if a.graph_bs == "none":      # eager: SGLang's --disable-cuda-graph (no replays; docs/live.md)
        kw["disable_cuda_graph"] = True
    else:
        kw["cuda_graph_bs_decode"] = [int(x) for x in a.graph_bs.split(",")]
    adaptive = adaptive_record(a.adaptive, a.steps) if a.adaptive else None
    steps = adaptive["start_steps"] if adaptive else a.steps
    if steps > 0:
        kw.update(speculative_algorithm="EAGLE3", speculative_draft_model_path=f"{a.tiny}/eagle3",
                  speculative_num_steps=steps, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=steps + 1)
    if adaptive:
        kw["speculative_adaptive"] = True
        if adaptive["config_path"]:
            kw["speculative_adaptive_config"] = adaptive["config_path"]
    return kw, adaptive


def sum_histograms(hists):
    """Element-wise sum of per-request histograms (lists of counts of different lengths); None if none."""
    hists = [h for h in hists if h]
    if not hists:
        return None
    out = [0] * max(len(h) for h in hists)
    for h in hists:
        for i, v in enumerate(h):
            out[i] += v
    return out


def switches_by_batch(log_text):
    """{batch: [[from, to], ...]} of SGLang's adaptive switches in an engine log, each under the
    ``sweep: batch B begin`` mark before it (before any mark: key 0, the engine's start)."""
    out, batch = {}, 0
    for line in log_text.splitlines():
        m = BATCH_MARK.search(line)
        if m:
            batch = int(m.group(1))
            continue
        m = SWITCH.search(line)
        if m:
            out.setdefault(batch, []).append([int(m.group(1)), int(m.group(2))])
    return out


def summary_lines(doc):
    """One text line per (engine, batch) of a merged sweep."""
    lines = []
    for key in ("runs", "adaptive_runs"):
        for r in doc.get(key, []):
            layers = r.get("layers") or r["engine_args"].get("model_path", "").split("_l")[-1].split("/")[0]
            mode = "steps {}".format(r["steps"]) if not r.get("adaptive") else \
                "adaptive {} (start {})".format(os.path.basename(r["adaptive"]["config_path"] or "default"),
                                                r["adaptive"]["start_steps"])
            for b in r["batches"]:
                acc = b["tokens_per_request_cycle"]
                lines.append(f"v{r['vocab']} l{layers} {mode} batch {b['batch']:>3}: {b['tokens_per_s']:10.1f} tok/s "
                             f"spread {100 * b['spread']:.1f}% acc {acc if acc is None else round(acc, 3)}"
                             + (f" switches {b['adaptive_switches']}" if b.get("adaptive_switches") else ""))
    return lines


def merge(directory, out):
    """DIR/*.json (one engine each) -> OUT: fixed-step engines under ``runs``, adaptive ones under
    ``adaptive_runs``; an engine's log DIR/NAME.log (if any) adds SGLang's adaptive switches per batch."""
    runs, adaptive = [], []
    for f in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(f) as fh:
            r = json.load(fh)
        log = f[:-len(".json")] + ".log"
        if r.get("adaptive") and os.path.exists(log):
            with open(log, errors="replace") as fh:
                sw = switches_by_batch(fh.read())
            r["adaptive"]["switches_at_start"] = sw.get(0, [])
            for b in r["batches"]:
                b["adaptive_switches"] = sw.get(int(b["batch"]), [])
        (adaptive if r.get("adaptive") else runs).append(r)
    doc = {"runs": runs, "adaptive_runs": adaptive}
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
    return doc


def compare(docs):
    """Issue 41's table from merged sweeps (several files: their runs pooled; a step count measured twice
    keeps the later file's): per batch size, tokens/s of every fixed step count, the best fixed one, and
    each adaptive engine's tokens/s and ratio to the best fixed. Returns the text lines."""
    fixed, adaptive = {}, {}
    for doc in docs:
        for r in doc.get("runs", []):
            for b in r["batches"]:
                fixed.setdefault(int(b["batch"]), {})[int(r["steps"])] = float(b["tokens_per_s"])
        for r in doc.get("adaptive_runs", []):
            name = os.path.basename(r["adaptive"]["config_path"] or "default")
            for b in r["batches"]:
                adaptive.setdefault(int(b["batch"]), {})[name] = (float(b["tokens_per_s"]),
                                                                  b.get("adaptive_switches") or [])
    lines = []
    for batch in sorted(set(fixed) | set(adaptive)):
        f = fixed.get(batch, {})
        row = f"batch {batch:>3}: " + " ".join(f"{k}:{v:,.0f}" for k, v in sorted(f.items()))
        if f:
            k, best = max(f.items(), key=lambda kv: kv[1])
            row += f" | best fixed {k} {best:,.0f}"
        for name, (tps, sw) in sorted(adaptive.get(batch, {}).items()):
            row += f" | {name} {tps:,.0f}" + (f" ({tps / best:.3f}x)" if f else "") + (f" switches {sw}" if sw else "")
        lines.append(row)
    return lines


def whatif_args(doc, profiled_steps, max_spread=0.05):
    """``--batch-baseline-tps M=Y,... --batch-tps M=X,...`` for ``analyze-trace whatif --per-batch`` from a
    merged sweep: the no-speculation engine's tokens/s and the profiled step count's (calibration), per
    batch size; a calibration figure whose last rounds spread more than ``max_spread`` is left out (noisy)."""
    def pairs(steps, spread_ok):
        return ",".join(f"{b['batch']}={b['tokens_per_s']:.1f}" for r in doc.get("runs", []) if r["steps"] == steps
                        for b in sorted(r["batches"], key=lambda b: b["batch"]) if spread_ok(b))
    base = pairs(0, lambda b: True)
    cal = pairs(profiled_steps, lambda b: b["spread"] <= max_spread)
    return " ".join(x for x in (base and f"--batch-baseline-tps {base}", cal and f"--batch-tps {cal}") if x)


def set_timing(pause_file, n):
    """Round ``n`` of an alternating run: timing on (even rounds: the pause file removed) or paused (odd:
    made); None without --alternate-timing. A short sleep lets the shim's timer see the change at the
    round's first cycle (it looks at most every 0.05 s, nvtx_annotate/live/events.TeeBackend)."""
    if pause_file is None:
        return None
    on = n % 2 == 0
    if on:
        if os.path.exists(pause_file):
            os.unlink(pause_file)
    else:
        open(pause_file, "w").close()
    time.sleep(0.2)
    return on


def timing_overhead(rounds):
    """Per batch of an alternating run: medians with the timing on and paused, the overhead 1 - on/off,
    and each adjacent pair's ratio (on round / the paused round after it: the spread of the overhead)."""
    on = [r["tokens_per_s"] for r in rounds if r.get("timing")]
    off = [r["tokens_per_s"] for r in rounds if r.get("timing") is False]
    pairs = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(rounds[::2], rounds[1::2])
             if a.get("timing") and b.get("timing") is False]
    m_on, m_off = statistics.median(on), statistics.median(off)
    return {"tokens_per_s_timing_on": m_on, "tokens_per_s_timing_paused": m_off, "timing_overhead": 1 - m_on / m_off,
            "timing_pair_ratios": pairs}


def measure_batch(eng, a, b, steps, min_rounds, max_rounds):
    """One batch size: a warm-up, then rounds of ``b`` requests until the last ``min_rounds`` agree within
    ``a.tol`` (or ``max_rounds``); the batch's row (every round, the median of the last rounds, spread,
    SGLang's acceptance)."""
    new = a.min_new if b == 1 else new_tokens_for(b, a.tokens_per_round)
    # prompt ids below the vocabulary (eos lies outside it; ignore_eos anyway)
    ids = [[(7 * i + 3 * j) % a.vocab for j in range(32)] for i in range(b)]
    sp = {"max_new_tokens": new, "temperature": a.temperature, "ignore_eos": True}
    print(f"sweep: batch {b} begin", file=sys.stderr, flush=True)   # --merge files switches under it
    eng.generate(input_ids=ids, sampling_params=dict(sp, max_new_tokens=64))  # warm-up
    rounds, reps = [], 1
    while True:
        timing = set_timing(a.alternate_timing, len(rounds))
        t = time.perf_counter()
        out = []
        for _ in range(reps):          # a round: `reps` generate calls of the same requests, back to back
            out += eng.generate(input_ids=ids, sampling_params=sp)
        wall = time.perf_counter() - t
        if not rounds and reps == 1 and wall < a.min_round_s:
            # the first round sizes the others: long enough for the 3% rule (a round of 4,096 tokens
            # at batch 16 lasts under a second on the H200: one slow step moved it 10-40%); the same
            # requests repeated, so each request's context is the profile's
            reps = round_repeats(wall, a.min_round_s)
            if reps > 1:
                continue
        metas = [o["meta_info"] for o in out]
        toks = sum(m.get("completion_tokens") or 0 for m in metas)
        verify = sum(m.get("spec_verify_ct") or 0 for m in metas)
        rounds.append({"seconds": wall, "tokens": toks, "tokens_per_s": toks / wall,
                       "spec_verify_ct": verify,
                       "tokens_per_request_cycle": toks / verify if verify else None,
                       # SGLang's count of verifies by accepted drafts (0, 1, ...) over the round's requests
                       "spec_correct_drafts_histogram": sum_histograms(
                           m.get("spec_correct_drafts_histogram") or m.get("spec_accept_histogram")
                           for m in metas)})
        if timing is not None:
            rounds[-1]["timing"] = timing
            if len(rounds) >= 2 * max_rounds or (len(rounds) >= 2 * min_rounds and all(
                    spread([r["tokens_per_s"] for r in rounds if r["timing"] == on][-min_rounds:]) <= a.tol
                    for on in (True, False))):
                break
            continue
        last = [r["tokens_per_s"] for r in rounds[-min_rounds:]]
        if len(rounds) >= min_rounds and (spread(last) <= a.tol or len(rounds) >= max_rounds):
            break
    last = rounds[-min_rounds:] if a.alternate_timing is None else \
        [r for r in rounds if not r["timing"]][-min_rounds:]     # the figure: rounds without timing
    tps = [r["tokens_per_s"] for r in last]
    acc = [r["tokens_per_request_cycle"] for r in last if r["tokens_per_request_cycle"]]
    row = {"batch": b, "new_tokens": new, "round_repeats": reps, "rounds": rounds,
           "tokens_per_s": statistics.median(tps),
           "spread": spread(tps), "converged": spread(tps) <= a.tol,
           "tokens_per_request_cycle": statistics.mean(acc) if acc else None}
    if a.alternate_timing is not None:
        row.update(timing_overhead(rounds))
    print(json.dumps({"steps": steps, "batch": b, "tok_s": round(row["tokens_per_s"], 1),
                      "spread": round(row["spread"], 4), "rounds": len(rounds),
                      "acc": row["tokens_per_request_cycle"] and round(row["tokens_per_request_cycle"], 3)}),
          flush=True)
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("tiny", nargs="?")
    p.add_argument("--vocab", type=int)
    p.add_argument("--steps", type=int, default=None,
                   help="--speculative-num-steps; 0: no speculation. With --adaptive: the step count SGLang "
                        "starts at (a candidate > 0; default the largest candidate)")
    p.add_argument("--adaptive", metavar="default|FILE", default=None,
                   help="SGLang's adaptive mode: 'default' (its built-in config) or a "
                        "--speculative-adaptive-config JSON file")
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--tokens-per-round", type=int, default=4096)
    p.add_argument("--min-new", type=int, default=1024, help="at batch 1: tokens of one request per round")
    p.add_argument("--tol", type=float, default=0.03)
    p.add_argument("--min-round-s", type=float, default=3.0,
                   help="a round shorter than this (measured on the first) repeats its requests back to back "
                        "until it is not (the same context per request; 0: one generate call a round)")
    p.add_argument("--min-rounds", type=int, default=3)
    p.add_argument("--max-rounds", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--graph-bs", default="1,2,4,8,16,32,64",
                   help="CUDA graph batch sizes, or 'none': eager (SGLang's --disable-cuda-graph)")
    p.add_argument("--log-level", default="warning",
                   help="SGLang's log level ('info' logs the adaptive switches that --merge reads)")
    p.add_argument("--profile-window", action="store_true",
                   help="bracket the measured rounds with engine.start_profile/stop_profile (CUDA_PROFILER): "
                        "under `profile-trace --capture cudaprofilerapi` exactly they are captured")
    p.add_argument("--precapture", type=int, default=0, metavar="N",
                   help="with --profile-window: before the window, up to N rounds a batch size (the 3%% rule "
                        "over the last min(3, N)) in the same engine, uncaptured; written as precapture_batches")
    p.add_argument("--alternate-timing", metavar="PAUSE_FILE", default=None,
                   help="the engine runs with SPECPROF_TIMING=1 and SPECPROF_TIMING_PAUSE_FILE=PAUSE_FILE: rounds "
                        "alternate timing on / paused (the file made and removed between rounds), each round "
                        "marked; per batch the medians of both and the overhead (issue 43: inside one engine, "
                        "where engines differ by 8-27%)")
    p.add_argument("--out")
    p.add_argument("--dry-run", action="store_true",
                   help="print the Engine kwargs (and the adaptive record) as JSON and exit; sglang not imported")
    p.add_argument("--merge", nargs=2, metavar=("DIR", "OUT"),
                   help="merge DIR/*.json into OUT (see the module docstring) and print a summary; nothing else")
    p.add_argument("--whatif-args", nargs=2, metavar=("SWEEP", "STEPS"),
                   help="print whatif --per-batch's --batch-baseline-tps/--batch-tps from a merged sweep and the "
                        "profiled step count; nothing else")
    p.add_argument("--compare", nargs="+", metavar="SWEEP",
                   help="merged sweep.json file(s): per batch, fixed step counts vs the adaptive engines; nothing else")
    a = p.parse_args(argv)
    if a.merge or a.compare or a.whatif_args:
        return a
    missing = [n for n, v in (("TINY_DIR", a.tiny), ("--vocab", a.vocab), ("--out", a.out)) if v is None]
    if a.steps is None and not a.adaptive:
        missing.append("--steps")
    if missing and not (a.dry_run and missing == ["--out"]):
        p.error("missing " + ", ".join(missing))
    if a.precapture and not a.profile_window:
        p.error("--precapture needs --profile-window")
    if a.adaptive and a.steps is not None and a.steps < 1:
        p.error("--adaptive starts at a positive candidate step count (--steps >= 1 or omitted)")
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.merge:
        doc = merge(*a.merge)
        print("\n".join(summary_lines(doc)))
        return
    if a.whatif_args:
        with open(a.whatif_args[0]) as f:
            print(whatif_args(json.load(f), int(a.whatif_args[1])))
        return
    if a.compare:
        docs = []
        for path in a.compare:
            with open(path) as f:
                docs.append(json.load(f))
        print("\n".join(compare(docs)))
        return
    batches = [int(b) for b in a.batches.split(",")]
    kw, adaptive = engine_kwargs(a, batches)
    if a.dry_run:
        print(json.dumps({"engine_args": kw, "adaptive": adaptive}, indent=1))
        return
    steps = adaptive["start_steps"] if adaptive else a.steps
    if a.alternate_timing is not None:
        # the scheduler processes inherit this environment: the file the sweep toggles is the one they watch
        if os.environ.get("SPECPROF_TIMING", "") in ("", "0") or os.environ.get("SPECPROF_NVTX", "") in ("", "0"):
            sys.exit("--alternate-timing: run with SPECPROF_NVTX=1 SPECPROF_TIMING=1 (the shim's timing mode)")
        os.environ["SPECPROF_TIMING_PAUSE_FILE"] = a.alternate_timing
    import sglang

    t0 = time.time()
    eng = sglang.Engine(**kw)
    up_s = time.time() - t0
    mode = f", adaptive {adaptive['mode']} {adaptive['candidate_steps']}" if adaptive else ""
    print(f"engine up in {up_s:.1f}s (sglang {sglang.__version__}, vocab {a.vocab}, steps {steps}{mode})", flush=True)
    result = {"sglang": sglang.__version__, "engine_up_s": up_s, "vocab": a.vocab, "steps": steps,
              "temperature": a.temperature, "tol": a.tol, "engine_args": {k: v for k, v in kw.items()},
              "profiled": a.profile_window, "adaptive": adaptive, "batches": []}
    if a.precapture:
        # the same engine's rounds before the capture window: under `profile-trace --capture cudaprofilerapi`
        # nsys is attached but not collecting (what a profiled process runs at outside its window)
        result["precapture_batches"] = [measure_batch(eng, a, b, steps, min(3, a.precapture), a.precapture)
                                        for b in batches]
    if a.profile_window:
        eng.start_profile(activities=["CUDA_PROFILER"])
    for b in batches:
        result["batches"].append(measure_batch(eng, a, b, steps, a.min_rounds, a.max_rounds))
    if a.profile_window:
        eng.stop_profile()
    if os.environ.get("SPECPROF_TIMING", "") not in ("", "0"):
        # shutdown() SIGKILLs the scheduler (no exit hook runs): the shim's timing log completes its
        # file once the server has idled for 5 s (nvtx_annotate/live/sink.py, woken every second)
        time.sleep(8)
    eng.shutdown()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
