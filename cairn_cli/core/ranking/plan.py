"""The rerank plan: how the cross-encoder stage fits CAIRN_RERANK_BUDGET_MS on the machine it runs on.
Measured once per machine and cached in machine state; `choose` is pure, `replan` learns the margin from the stage
as it runs (docs/hot-path.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from cairn_cli.config import Settings

LENGTHS = (128, 96, 64)
MIN_CANDIDATES = 8
P95_MARGIN = 1.35  # the starting margin: p95/p50 of the stage on a shared 2-core machine (bench/rerank_plan.md)
MARGIN_BOUNDS = (1.0, 10.0)
OBSERVE_MIN = 20  # stage calls observed before the margin is learnt from them
OBSERVE_WINDOW = 50  # the most recent calls it is learnt from
TOP5_MIN, SPEARMAN_MIN = 0.95, 0.98
STATE_KEY = "rerank_plan:{}"


@dataclass
class Throughput:
    """time(n pairs) = a + b * n seconds, for one precision at one max length."""

    a: float
    b: float

    def ms(self, n: int) -> float:
        return (self.a + self.b * n) * 1000.0

    def pairs_per_s(self, n: int = 20) -> float:
        return n / (self.a + self.b * n)


@dataclass
class Plan:
    precision: str | None
    candidates: int
    max_length: int
    expected_ms: float | None
    budget_ms: float
    skipped: bool = False
    reason: str = ""
    throughput: dict = field(default_factory=dict)  # precision -> {max_length: pairs/s at 20}
    fidelity: dict = field(default_factory=dict)  # precision -> {top5, spearman, accepted}
    key: str = ""
    margin: float = P95_MARGIN  # expected p95 = fitted time x margin
    observed: dict = field(default_factory=dict)  # what the margin was learnt from: {calls, p95_ms, ratio_p95}

    def provenance(self) -> dict:
        """What each delivery records of the stage that ranked it."""
        return {
            "precision": self.precision,
            "candidates": self.candidates,
            "max_length": self.max_length,
            "budget_ms": self.budget_ms,
            "skipped": self.skipped,
        }

    def as_dict(self) -> dict:
        return asdict(self)


def choose(
    throughput: dict[str, dict[int, Throughput]],
    accepted: list[str],
    *,
    budget_ms: float,
    max_candidates: int,
    min_candidates: int = MIN_CANDIDATES,
    lengths: tuple[int, ...] = LENGTHS,
    margin: float = P95_MARGIN,
) -> Plan:
    """The plan for measured `throughput` (precision -> max length -> fit) among the `accepted` precisions."""
    if budget_ms <= 0:  # no budget: the configured stage as it is
        best = accepted[0] if accepted else "fp32"
        return Plan(best, max_candidates, max(lengths), None, budget_ms, reason="no budget (CAIRN_RERANK_BUDGET_MS=0)")
    fastest = sorted(accepted, key=lambda p: throughput[p][max(lengths)].ms(max_candidates))
    for precision in fastest[:1]:
        for length in sorted(lengths, reverse=True):
            fit = throughput[precision].get(length)
            if fit is None:
                continue
            room = budget_ms / margin / 1000.0 - fit.a
            n = min(max_candidates, math.floor(room / fit.b)) if fit.b > 0 else max_candidates
            if n >= min(min_candidates, max_candidates):
                expected = fit.ms(n) * margin
                why = f"{precision}, {n} candidates at {length} tokens: expected p95 {expected:.0f} ms <= {budget_ms:g} ms"
                return Plan(precision, n, length, round(expected, 1), budget_ms, reason=why, margin=margin)
    slowest = f"even {min_candidates} pairs at {min(lengths)} tokens exceed {budget_ms:g} ms"
    return Plan(
        None, 0, min(lengths), None, budget_ms, skipped=True, reason=f"rerank skipped: {slowest}", margin=margin
    )


def fidelity(reference: list[list[float]], candidate: list[list[float]]) -> dict:
    """Mean top-5 overlap and mean Spearman of `candidate`'s scores against `reference`'s, query by query."""
    overlaps, rhos = [], []
    for ref, got in zip(reference, candidate):
        k = min(5, len(ref))
        overlaps.append(len(_top(ref, k) & _top(got, k)) / k if k else 1.0)
        rhos.append(_spearman(ref, got))
    top5 = sum(overlaps) / len(overlaps) if overlaps else 1.0
    rho = sum(rhos) / len(rhos) if rhos else 1.0
    return {"top5": round(top5, 4), "spearman": round(rho, 4), "accepted": top5 >= TOP5_MIN and rho >= SPEARMAN_MIN}


def _top(scores: list[float], k: int) -> set[int]:
    return set(sorted(range(len(scores)), key=lambda i: -scores[i])[:k])


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    if n < 2:
        return 1.0
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else 1.0


def calibration_set(settings: Settings) -> list[tuple[str, list[str]]]:
    """(query, candidate texts) pairs: CAIRN_RERANK_CALIBRATION (JSONL {query, texts}) or the shipped set."""
    import json
    from importlib import resources
    from pathlib import Path

    path = settings.RERANK_CALIBRATION
    if path:
        out = []
        for line in Path(path).expanduser().read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out.append((str(row["query"]), [str(t) for t in row["texts"]]))
        return out
    data = resources.files("cairn_cli").joinpath("data")
    prompts = [p for p in data.joinpath("calibration_prompts.txt").read_text(encoding="utf-8").splitlines() if p]
    texts = [
        json.loads(line)["content"]
        for line in data.joinpath("example_memories.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return [(p, texts) for p in prompts]


def measure_stage(reranker, settings: Settings, *, lengths: tuple[int, ...] = LENGTHS) -> tuple[dict, dict]:
    """(throughput: precision -> max length -> Throughput, fidelity: precision -> report) on this machine."""
    small, large = MIN_CANDIDATES, max(settings.RERANK_CANDIDATES, MIN_CANDIDATES + 4)
    throughput: dict[str, dict[int, Throughput]] = {}
    for precision in reranker.available():
        throughput[precision] = {}
        for length in lengths:
            t_small = reranker.time_call(precision, length, small)
            t_large = reranker.time_call(precision, length, large)
            b = max(1e-6, (t_large - t_small) / (large - small))
            throughput[precision][length] = Throughput(max(0.0, t_small - b * small), b)
    queries = calibration_set(settings)
    length = max(lengths)
    reference = [reranker.logits(q, texts, precision="fp32", max_length=length, cache=False) for q, texts in queries]
    report = {"fp32": {"top5": 1.0, "spearman": 1.0, "accepted": True}}
    for precision in reranker.available():
        if precision != "fp32":
            got = [reranker.logits(q, t, precision=precision, max_length=length, cache=False) for q, t in queries]
            report[precision] = fidelity(reference, got)
    return throughput, report


def plan_for(reranker, settings: Settings, *, measure: bool = True) -> Plan | None:
    """The plan for this reranker on this machine: read from machine state, else measured (`measure`), else None."""
    from cairn_cli.core.store import state
    from cairn_cli.ml.device import cpu_flags, simd_summary

    threads = _threads()
    key = STATE_KEY.format(f"{reranker.checksum()}:{hash_flags(cpu_flags())}:{threads}")
    cached = state.get(key, settings)
    if cached is None and not measure:
        return None
    if cached is None:
        throughput, report = measure_stage(reranker, settings)
        cached = {
            "throughput": {p: {str(n): [f.a, f.b] for n, f in by.items()} for p, by in throughput.items()},
            "fidelity": report,
            "cpu": simd_summary(),
            "threads": threads,
            "model": reranker.name,
        }
        state.put(key, cached, settings, by="cairn daemon", reason="rerank stage measured on this machine")
    return _plan(cached, key, settings)


def _plan(cached: dict, key: str, settings: Settings) -> Plan:
    """The plan from a machine-state entry (its fit, fidelity and learnt margin)."""
    throughput = _fits(cached)
    accepted = [p for p, r in cached["fidelity"].items() if r.get("accepted") and p in throughput]
    plan = choose(
        throughput,
        accepted,
        budget_ms=settings.RERANK_BUDGET_MS,
        max_candidates=settings.RERANK_CANDIDATES,
        margin=float(cached.get("margin", P95_MARGIN)),
    )
    plan.throughput = {p: {str(n): round(f.pairs_per_s(), 1) for n, f in by.items()} for p, by in throughput.items()}
    plan.fidelity, plan.key, plan.observed = cached["fidelity"], key, dict(cached.get("observed") or {})
    return plan


def _fits(cached: dict) -> dict[str, dict[int, Throughput]]:
    return {p: {int(n): Throughput(*ab) for n, ab in by.items()} for p, by in cached["throughput"].items()}


def learnt_margin(fit: Throughput, calls: list[tuple[int, float]]) -> tuple[float, dict]:
    """The margin the stage's `calls` (pairs, seconds) show against `fit`: the p95 (nearest rank) of observed over
    fitted time, within MARGIN_BOUNDS; and what it was learnt from."""
    ratios = sorted(seconds * 1000.0 / fit.ms(n) for n, seconds in calls if n > 0 and fit.ms(n) > 0)
    times = sorted(seconds * 1000.0 for n, seconds in calls if n > 0)
    if not ratios:
        return P95_MARGIN, {}
    p95 = ratios[max(0, math.ceil(0.95 * len(ratios)) - 1)]
    lo, hi = MARGIN_BOUNDS
    observed = {
        "calls": len(ratios),
        "p95_ms": round(times[max(0, math.ceil(0.95 * len(times)) - 1)], 1),
        "ratio_p95": round(p95, 3),
    }
    return min(hi, max(lo, p95)), observed


def replan(plan: dict, calls: list[tuple[int, float]], settings: Settings) -> Plan | None:
    """The plan chosen again with the margin the live stage's `calls` show (see the module note), with what it was
    learnt from; a margin that moved more than 5%, or rose at all while the plan's stage at it exceeds the budget,
    is kept in machine state (a smaller move leaves the margin and the plan as they are). None when there is too
    little to learn from."""
    from cairn_cli.core.store import state

    key = plan.get("key")
    if not key or plan.get("skipped") or len(calls) < OBSERVE_MIN:
        return None
    cached = state.get(key, settings)
    if cached is None:
        return None
    fit = _fits(cached).get(plan["precision"], {}).get(int(plan["max_length"]))
    if fit is None:
        return None
    margin, observed = learnt_margin(fit, calls[-OBSERVE_WINDOW:])
    old = float(cached.get("margin", P95_MARGIN))
    # a small move is noise, unless the stage as observed no longer fits the budget: that is always acted on
    over = fit.ms(int(plan["candidates"])) * margin > float(plan.get("budget_ms") or settings.RERANK_BUDGET_MS)
    if abs(margin - old) <= 0.05 * old and not (margin > old and over):
        same = _plan(cached, key, settings)
        same.observed = observed
        return same
    cached = {**cached, "margin": round(margin, 3), "observed": observed}
    state.put(
        key,
        cached,
        settings,
        by="cairn daemon",
        reason=f"rerank margin {old:.2f} -> {margin:.2f}: p95 of observed / fitted stage time over {observed['calls']} calls",
    )
    return _plan(cached, key, settings)


def hash_flags(flags) -> str:
    import hashlib

    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]


def _threads() -> int:
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else 0
