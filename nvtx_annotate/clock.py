"""The decode cycles' own clock before nsys's capture window opens (issue 40).

Under ``nsys profile --capture-range=cudaProfilerApi`` a process runs attached to nsys but uncollected
until SGLang's ``/start_profile`` (CUDA_PROFILER) opens the window. Inside the window nsys stretches a
host-bound cycle (by 0.4 to 4.9 ms a cycle on real SGLang 0.5.17, differently at each step count): the
profile's clock is not the server's. Before the window the same process, same load, runs at (nearly: see
docs/whatif.md, "The profile's own clock") its unprofiled speed. This module keeps that clock: per decode
cycle K, the time from its start to the next decode cycle's start (its period, the scheduler's host work
between included) and the tokens it produced (accepted draft tokens + one per request, from its accept
mark), by the cycle's requests. When profiling starts the shim writes the last :data:`KEEP` cycles of each
batch size as ``clock`` marks (:func:`nvtx_annotate.protocol.clock_mark`) into the window, where the
analyzer reads them: whatif calibrates from them when no unprofiled figure is given.

A period with a prefill in it is dropped (it is not a decode cycle's), and so is the period of the first decode
cycle after a prefill (the overlap scheduler processes the prefill's result in it). What the shim cannot see is not
dropped (an idle scheduler between two decode cycles without a prefill: the steady rule's outlier cut in the
analyzer takes a long one out). Standard library only, one clock read and a few dict operations a decode cycle, and nothing once
profiling has started (the clock stops: what follows is the profiled clock).
"""

from __future__ import annotations

from collections import deque

KEEP = 2048
"""Cycles kept per batch size (the most recent). A whole round should fit: a decode cycle's period grows with
the requests' context (real SGLang 0.5.17, 32 layers, batch 1: 2.98 ms at the start of 1,024-token requests,
4.06 ms at their end), so the last few hundred cycles of a round are slower than the round (the first device
run kept 512: the clock said 427 tokens/s where the round ran 450)."""
GAPS_KEEP = 64
"""Round gaps kept per batch size (the most recent): the time before a round that its decode cycles do not hold."""
PART = 512
"""Cycles per ``clock`` mark (about 3.5 KB of text): a batch size's cycles in parts ``part=0, 1, ...``."""
MAX_SIZES = 8
"""Batch sizes written when profiling starts (those with the most cycles)."""
OPEN_MAX = 64
"""Cycles waiting for their accept mark or their successor's start (SGLang's v2 workers resolve a
cycle's accept lengths after the next cycle was launched): older ones are dropped."""


class WindowClock:
    """Periods and tokens of the decode cycles, per batch size (the accept mark's requests)."""

    __slots__ = ("_open", "_last", "_after_gap", "rows", "_seen", "_round", "gaps")

    def __init__(self):
        self._open: dict[int, list] = {}     # K -> [start_ns, next_start_ns, tokens, requests]
        self._last = None                    # K of the last decode cycle started
        self._after_gap = False              # the next decode cycle follows a prefill: its period is not kept
        self.rows: dict[int, deque] = {}     # requests -> (period_ns, tokens) of finished cycles
        self._seen: dict[int, list] = {}     # K -> [end_ns, requests] of the recent decode cycles (the round gaps')
        self._round = None                   # (K, start_ns) of the first decode cycle after a prefill
        self.gaps: dict[int, deque] = {}     # requests -> gap_ns before the rounds of that many requests

    def decode(self, k: int, now_ns: int) -> None:
        """Decode cycle ``k`` starts at ``now_ns``: the previous one's period ends here."""
        last = self._last
        if last is not None:
            e = self._open.get(last)
            if e is not None:
                e[1] = now_ns
                if e[2] is not None:
                    self._done(last, e)
        self._last = k
        self._seen[k] = [None, None]
        if len(self._seen) > OPEN_MAX:
            self._seen.pop(next(iter(self._seen)))
        if self._after_gap:     # SGLang's overlap scheduler resolves the prefill's result during this cycle
            self._after_gap = False
            self._round = (k, now_ns)
            return
        self._open[k] = [now_ns, None, None, None]
        if len(self._open) > OPEN_MAX:
            self._open.pop(next(iter(self._open)))

    def gap(self) -> None:
        """Something other than a decode cycle (a prefill) runs: the last decode cycle's period is no decode
        cycle's, nor is the next one's (with the overlap scheduler the host waits for the prefill's result
        during the next decode cycle: on real SGLang 0.5.17 the first decode cycle after a prefill took 9.7
        against 8.3 ms at batch 1, 12.8-14.1 against 8.5 ms at 16, under nsys)."""
        if self._last is not None:
            self._open.pop(self._last, None)
            self._last = None
        self._after_gap = True

    def end(self, k: int, now_ns: int) -> None:
        """Decode cycle ``k``'s host end (its forward returned)."""
        e = self._seen.get(k)
        if e is not None:
            e[0] = now_ns

    def _round_gap(self, requests: int) -> None:
        """The first decode cycle after a prefill (``self._round``) has ``requests`` requests: where the decode
        cycle before it had none (the previous batch done: a new round, analyze's ``rounds.lockstep_rounds``
        rule) the time from the end of the last decode cycle with requests to its start is a round's gap."""
        k0, start = self._round
        self._round = None
        before = self._seen.get(k0 - 1)
        if requests <= 0 or before is None or before[1] != 0:
            return
        ends = [e for kk, (e, m) in self._seen.items() if kk < k0 and m and e is not None]
        if ends and start > ends[-1]:
            gaps = self.gaps.get(requests)
            if gaps is None:
                gaps = self.gaps[requests] = deque(maxlen=GAPS_KEEP)
            gaps.append(start - ends[-1])

    def accepted(self, k: int | None, accepted: int, requests: int) -> None:
        """Cycle ``k``'s accept mark: ``accepted`` draft tokens over ``requests`` requests."""
        seen = self._seen.get(k) if k is not None else None
        if seen is not None:
            seen[1] = int(requests)
            if self._round is not None and self._round[0] == k:
                self._round_gap(int(requests))
        e = self._open.get(k) if k is not None else None
        if e is None or requests <= 0:
            return
        e[2], e[3] = int(accepted) + int(requests), int(requests)
        if e[1] is not None:
            self._done(k, e)

    def _done(self, k: int, e: list) -> None:
        del self._open[k]
        rows = self.rows.get(e[3])
        if rows is None:
            rows = self.rows[e[3]] = deque(maxlen=KEEP)
        rows.append((e[1] - e[0], e[2]))

    def buckets(self) -> list[tuple[int, int, list[int], list[int], list[int]]]:
        """(requests, part, periods in us, tokens, round gaps in us) of the :data:`MAX_SIZES` batch sizes with the
        most cycles, by requests, each in parts of :data:`PART` cycles (oldest first); a batch size's round gaps
        (the time before each round of that many requests that no decode cycle holds) on its part 0."""
        top = sorted(self.rows.items(), key=lambda kv: -len(kv[1]))[:MAX_SIZES]
        out = []
        for m, rows in sorted(top):
            rows = list(rows)
            gaps = [int(round(g / 1000)) for g in self.gaps.get(m, ())]
            for part, i in enumerate(range(0, len(rows), PART)):
                chunk = rows[i:i + PART]
                out.append((m, part, [int(round(p / 1000)) for p, _ in chunk], [t for _, t in chunk],
                            gaps if part == 0 else []))
        return out
