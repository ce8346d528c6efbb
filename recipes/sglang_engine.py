"""Real SGLang EAGLE decode with the offline ``sglang.Engine`` (same tokenizer manager and spawned
scheduler / TP-worker process as ``launch_server``), on tiny random-weight models: no tokenizer, no
download. Writes what SGLang reports per request (``meta_info``) to ``--out-json`` so the analyzer's
tokens per cycle can be checked against SGLang's own count. Used by ``recipes/sglang_h200.sh``.

usage: python sglang_engine.py TINY_DIR [--graphs] [--algo EAGLE3|EAGLE] [--n 8] [--new 32]
                               [--rounds 2] [--steps 3] [--out-json F]"""
import argparse
import json
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tiny")
    p.add_argument("--graphs", action="store_true")
    p.add_argument("--algo", default="EAGLE3")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--vocab", type=int, default=31000, help="prompt token ids drawn below this")
    p.add_argument("--out-json", default=None)
    p.add_argument("--no-profile-window", action="store_true",
                   help="do not bracket the rounds with engine.start_profile/stop_profile (CUDA_PROFILER)")
    a = p.parse_args()
    import sglang

    draft = f"{a.tiny}/eagle3" if a.algo == "EAGLE3" else f"{a.tiny}/eagle"
    kw = dict(model_path=f"{a.tiny}/target", load_format="dummy", skip_tokenizer_init=True,
              speculative_algorithm=a.algo, speculative_draft_model_path=draft,
              speculative_num_steps=a.steps, speculative_eagle_topk=1, speculative_num_draft_tokens=a.steps + 1,
              attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
              mem_fraction_static=0.5, tp_size=1, max_running_requests=a.n, log_level="info")
    if not a.graphs:
        kw["disable_cuda_graph"] = True
    t0 = time.time()
    eng = sglang.Engine(**kw)
    up = time.time() - t0
    print(f"engine up in {up:.1f}s (sglang {sglang.__version__})", flush=True)
    ids = [[1] + [(17 * i + 31 * j) % (a.vocab - 3) + 3 for j in range(32)] for i in range(a.n)]
    sp = {"max_new_tokens": a.new, "temperature": 0.0, "ignore_eos": True}
    rounds = []
    # Engine.shutdown() SIGKILLs the scheduler, so CUDA data nsys still buffers in it is lost (on an
    # H200 with nsys 2025.3.1: every kernel of an eager run, the last 3 s of a graphs run). SGLang's own
    # profiler window fixes that: stop_profile() calls cudaProfilerStop, on which nsys flushes its CUDA
    # buffers (--flush-on-cudaprofilerstop, default on); under `profile-trace --capture cudaprofilerapi`
    # the window is also exactly what is captured.
    if not a.no_profile_window:
        eng.start_profile(activities=["CUDA_PROFILER"])
    for rnd in range(a.rounds):
        t = time.time()
        out = eng.generate(input_ids=ids, sampling_params=sp)
        metas = [o["meta_info"] for o in out]
        keep = ("completion_tokens", "spec_verify_ct", "spec_num_correct_drafts", "spec_accept_length",
                "spec_accept_rate", "spec_correct_drafts_histogram")
        rounds.append({"round": rnd, "seconds": time.time() - t,
                       "requests": [{k: m.get(k) for k in keep} for m in metas]})
        tot_c = sum(m.get("completion_tokens") or 0 for m in metas)
        tot_v = sum(m.get("spec_verify_ct") or 0 for m in metas)
        print(json.dumps({"round": rnd, "s": round(time.time() - t, 3), "completion_tokens": tot_c,
                          "spec_verify_ct": tot_v, "accept_length": tot_c / tot_v if tot_v else None}), flush=True)
    if not a.no_profile_window:
        eng.stop_profile()
    eng.shutdown()
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"sglang": sglang.__version__, "engine_up_s": up, "args": vars(a), "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
