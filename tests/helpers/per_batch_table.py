"""A table as analyze.tools.whatif.per_batch.per_batch returns it, built in tests from the columns that
matter to each (the rest at plain values: 3 profiled steps, given baselines, 1 accepted token a
request, nothing extrapolated, calibrated or uncertain, no interval; the verdict of the speed-up given)."""
import pandas as pd

from analyze.tools.whatif.per_batch import COLUMNS


def per_batch_table(**cols) -> pd.DataFrame:
    n = len(cols["batch"])
    plain = {"profiled_steps": [3] * n, "baseline_source": ["given"] * n, "accepted_per_request": [1.0] * n,
             "best_extrapolated": [False] * n, "calibrated": [False] * n, "verdict_uncertain": [False] * n,
             "baseline_from_live_log": [False] * n, "speedup_through_estimate": [False] * n,
             "rough_estimate": [False] * n,
             "tokens_per_s_best_lo": [float("nan")] * n,
             "tokens_per_s_best_hi": [float("nan")] * n}
    if "speedup" in cols and "verdict" not in cols:     # the word whatif gives that speed-up (uncertain as given)
        from analyze.tools.whatif.model import verdict

        unsure = cols.get("verdict_uncertain", plain["verdict_uncertain"])
        plain["verdict"] = [verdict(float(x), bool(u)) for x, u in zip(cols["speedup"], unsure)]
    missing = set(COLUMNS) - set(plain) - set(cols)
    if missing:
        raise TypeError(f"per_batch_table: give {sorted(missing)}")
    return pd.DataFrame({**plain, **cols})[list(COLUMNS)]
