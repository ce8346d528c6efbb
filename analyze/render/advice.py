"""Advice (``analyze-trace advise``, the report's Advice section) for people: terminal lines and an
HTML fragment, from :meth:`analyze.findings.Advice.to_dict` (plain data; nothing here computes)."""
from __future__ import annotations

import html as _html
import math
import textwrap

WIDTH = 120
MAX_EVIDENCE = 8


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None and not (
        isinstance(v, float) and math.isnan(v))


def fmt_value(key: str, v) -> str:
    """One evidence value with its unit, read from the key's suffix."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if _num(v):
        if key.endswith("_ns"):
            return f"{v / 1e3:,.1f} us"
        if key.endswith("_share"):
            return f"{100 * v:.1f}%"
        if key.endswith("_bytes"):
            return f"{v:,.0f} B"
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        return f"{v:,}"
    return str(v)


def _shown_key(key: str) -> str:
    """An evidence key as the text shows it: without the ``_ns`` of the JSON key (the text prints the
    value in us, with its unit: 'idle 4,188.1 us', not 'idle_ns 4,188.1 us')."""
    return key[:-3] if key.endswith("_ns") else key


def evidence_items(ev: dict) -> list[tuple[str, str]]:
    """(key, formatted value) of the scalar evidence, then one item per structured entry."""
    out = []
    for k, v in ev.items():
        if isinstance(v, dict):
            if k == "message_sizes" and v.get("count"):
                out.append(("message_sizes", f"{v['count']} messages, {v['min_bytes']:,}..{v['max_bytes']:,} B, "
                                             f"median {v['median_bytes']:,.0f} B"))
            continue
        if isinstance(v, list):
            if k == "kinds":
                out.append(("kinds", ", ".join(f"{x['label']} x{x['count']} ({x['transfer_ns'] / 1e3:,.1f} us)"
                                               for x in v)))
            continue
        if k in ("cycle_ns", "threshold_share"):
            continue
        out.append((k, fmt_value(k, v)))
    return out


def text_lines(advice: dict, *, evidence: bool = True, width: int = WIDTH) -> list[str]:
    """The Advice section of the terminal report, wrapped to ``width`` columns (default 120)."""
    def _wrap(text: str, indent: str, more: str | None = None) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent if more is None else more,
                             break_on_hyphens=False) or [indent.rstrip()]

    out = []
    if not advice:
        return out
    n = advice.get("cycles") or 0
    head = "Advice: what to change, ranked by the cycle time it could save"
    if advice.get("cycle_ns"):
        w = advice.get("whatif") or {}
        at = advice.get("cycles_batch")           # --batch M: the cycle figures are of M alone
        pooled = at is None and w.get("batch") is not None and w.get("batches_seen", 1) >= 2   # else every one
        head += (f" (mean cycle {advice['cycle_ns'] / 1e3:,.1f} us over {n} cycles"
                 + (f" at batch {at}" if at is not None else " of every batch size" if pooled else "")
                 + ", host start to next start"
                 + (f", {advice['warmup_cycles']} warm-up left out" if advice.get("warmup_cycles") else "")
                 + ("" if advice.get("live") else
                    "; the report's headline and decode table time a cycle GPU start to next GPU start") + ")")
    out += _wrap(head, "", "  ")
    if advice.get("error"):
        return out + _wrap(advice["error"], "  ")
    findings = advice.get("findings") or []
    if not findings:
        out.append("  no finding: every rule is below its threshold or does not apply (see below)")
    for f in findings:
        cyc = f["cycle_ns"] or 0
        amdahl = f.get("speedup_ceiling")
        line = f"{f['rank_order']}. {f['title']}: {_saves(f)}"
        if cyc:
            line += (f"; ceiling {f['ceiling_ns'] / 1e3:,.1f} us ({100 * f['ceiling_ns'] / cyc:.1f}% of the cycle, "
                     + (f"at most {amdahl:,.2f}x faster)" if amdahl else "all of it)"))
        out += _wrap(line, "", "   ")
        out += _wrap(f["suggestion"], "   ")
        for s in f.get("settings") or []:
            out += _wrap(f"- try: {s['text']}", "   ", "     ")
        out += _wrap(f"saving: {f['basis']}", "   ")
        if evidence:
            items = evidence_items(f.get("evidence") or {})
            if items:
                out += _wrap("evidence: " + "; ".join(f"{_shown_key(k)} {v}" for k, v in items[:MAX_EVIDENCE + 4]),
                             "   ")
    quiet = [c for c in advice.get("checks") or [] if c["status"] != "triggered"]
    if quiet:
        out += _wrap("rules without a finding: " + "; ".join(f"{c['rule']} ({c['status'].replace('_', ' ')}: "
                                                              f"{c['reason']})" for c in quiet), "")
    if advice.get("whatif_error"):
        out += _wrap(f"whatif not available: {advice['whatif_error']}", "")
    return out


def _saves(f: dict) -> str:
    """What a finding saves, in words: a figure, or (nothing estimated) that it names a direction, not a setting that
    saves time by itself (e.g. verify dominating at the best step count: only a faster or smaller verify helps)."""
    saving = f["saving_ns"]
    if saving != saving or round(saving / 1e3, 1) == 0:      # none (or NaN): nothing a setting saves by itself
        return "a direction, no setting that saves time by itself (saving 0 us per cycle)"
    return f"saves {f['saving_ns'] / 1e3:,.1f} us per cycle ({100 * f['saving_share']:.1f}%)"


def _esc(v) -> str:
    return _html.escape(str(v))


def html_fragment(advice: dict) -> str:
    """The Advice section of the HTML report: an ordered list of findings with settings and evidence."""
    if not advice:
        return "<p>No advice computed.</p>"
    if advice.get("error"):
        return f"<p>{_esc(advice['error'])}</p>"
    parts = []
    findings = advice.get("findings") or []
    if advice.get("cycle_ns"):
        parts.append(f"<p>Ranked by the cycle time each could save; mean cycle "
                     f"{advice['cycle_ns'] / 1e3:,.1f} us over {advice.get('cycles')} cycles, host start to next "
                     "start (the decode table's period runs GPU start to GPU start).</p>")
    if not findings:
        parts.append("<p>No finding: every rule is below its threshold or does not apply.</p>")
    items = []
    for f in findings:
        ev = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in evidence_items(f.get("evidence") or {}))
        sets = "".join(f"<li><code>{_esc(s['text'])}</code></li>" for s in f.get("settings") or [])
        amdahl = f.get("speedup_ceiling")
        items.append(
            f"<li><b>{_esc(f['title'])}</b>: {_esc(_saves(f))}, ceiling {f['ceiling_ns'] / 1e3:,.1f} us"
            + (f" (up to {amdahl:,.2f}x)" if amdahl else "") + f"<p>{_esc(f['suggestion'])}</p>"
            + (f"<p>Try:</p><ul>{sets}</ul>" if sets else "")
            + f"<p><i>Saving: {_esc(f['basis'])}</i></p>"
            + (f'<table class="evidence">{ev}</table>' if ev else "") + "</li>")
    if items:
        parts.append('<ol class="advice">' + "".join(items) + "</ol>")
    quiet = [c for c in advice.get("checks") or [] if c["status"] != "triggered"]
    if quiet:
        parts.append("<p>Rules without a finding:</p><ul>" + "".join(
            f"<li>{_esc(c['rule'])}: {_esc(c['status'].replace('_', ' '))}: {_esc(c['reason'])}</li>" for c in quiet)
            + "</ul>")
    return "\n".join(parts)
