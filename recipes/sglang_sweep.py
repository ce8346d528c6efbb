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

usage: python recipes/sglang_sweep.py TINY_DIR --vocab V --steps N --batches 1,4,16,64 --out F.json
Driven by recipes/sglang_sweep.sh (one engine per step count)."""
import argparse
import json
import statistics
import time


def new_tokens_for(batch, tokens_per_round):
    """Tokens each request generates in a round: tokens_per_round over the batch, at least 128."""
    return max(128, tokens_per_round // batch)


def spread(values):
    """max/min - 1 of the values (0 for one value)."""
    return max(values) / min(values) - 1.0 if values and min(values) > 0 else float("inf")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tiny")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--steps", type=int, required=True, help="--speculative-num-steps; 0: no speculation")
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--tokens-per-round", type=int, default=4096)
    p.add_argument("--min-new", type=int, default=1024, help="at batch 1: tokens of one request per round")
    p.add_argument("--tol", type=float, default=0.03)
    p.add_argument("--min-rounds", type=int, default=3)
    p.add_argument("--max-rounds", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--graph-bs", default="1,2,4,8,16,32,64")
    p.add_argument("--profile-window", action="store_true",
                   help="bracket the measured rounds with engine.start_profile/stop_profile (CUDA_PROFILER): "
                        "under `profile-trace --capture cudaprofilerapi` exactly they are captured")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    import sglang

    kw = dict(model_path=f"{a.tiny}/target", load_format="dummy", skip_tokenizer_init=True,
              attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
              mem_fraction_static=0.5, tp_size=1, max_running_requests=max(batches),
              cuda_graph_bs_decode=[int(x) for x in a.graph_bs.split(",")], log_level="warning",
              random_seed=0)
    if a.steps > 0:
        kw.update(speculative_algorithm="EAGLE3", speculative_draft_model_path=f"{a.tiny}/eagle3",
                  speculative_num_steps=a.steps, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=a.steps + 1)
    t0 = time.time()
    eng = sglang.Engine(**kw)
    up_s = time.time() - t0
    print(f"engine up in {up_s:.1f}s (sglang {sglang.__version__}, vocab {a.vocab}, steps {a.steps})", flush=True)
    result = {"sglang": sglang.__version__, "engine_up_s": up_s, "vocab": a.vocab, "steps": a.steps,
              "temperature": a.temperature, "tol": a.tol, "engine_args": {k: v for k, v in kw.items()},
              "profiled": a.profile_window, "batches": []}
    if a.profile_window:
        eng.start_profile(activities=["CUDA_PROFILER"])
    for b in batches:
        new = a.min_new if b == 1 else new_tokens_for(b, a.tokens_per_round)
        # prompt ids below the vocabulary (eos lies outside it; ignore_eos anyway)
        ids = [[(7 * i + 3 * j) % a.vocab for j in range(32)] for i in range(b)]
        sp = {"max_new_tokens": new, "temperature": a.temperature, "ignore_eos": True}
        eng.generate(input_ids=ids, sampling_params=dict(sp, max_new_tokens=64))  # warm-up
        rounds = []
        while True:
            t = time.perf_counter()
            out = eng.generate(input_ids=ids, sampling_params=sp)
            wall = time.perf_counter() - t
            metas = [o["meta_info"] for o in out]
            toks = sum(m.get("completion_tokens") or 0 for m in metas)
            verify = sum(m.get("spec_verify_ct") or 0 for m in metas)
            rounds.append({"seconds": wall, "tokens": toks, "tokens_per_s": toks / wall,
                           "spec_verify_ct": verify,
                           "tokens_per_request_cycle": toks / verify if verify else None})
            last = [r["tokens_per_s"] for r in rounds[-a.min_rounds:]]
            if len(rounds) >= a.min_rounds and (spread(last) <= a.tol or len(rounds) >= a.max_rounds):
                break
        last = rounds[-a.min_rounds:]
        tps = [r["tokens_per_s"] for r in last]
        acc = [r["tokens_per_request_cycle"] for r in last if r["tokens_per_request_cycle"]]
        row = {"batch": b, "new_tokens": new, "rounds": rounds, "tokens_per_s": statistics.median(tps),
               "spread": spread(tps), "converged": spread(tps) <= a.tol,
               "tokens_per_request_cycle": statistics.mean(acc) if acc else None}
        result["batches"].append(row)
        print(json.dumps({"steps": a.steps, "batch": b, "tok_s": round(row["tokens_per_s"], 1),
                          "spread": round(row["spread"], 4), "rounds": len(rounds),
                          "acc": row["tokens_per_request_cycle"] and round(row["tokens_per_request_cycle"], 3)}),
              flush=True)
    if a.profile_window:
        eng.stop_profile()
    eng.shutdown()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
