"""The numbers cairn reports, computed one way everywhere (commands, gates and benchmark scripts): ranking quality
(nDCG, recall), interval estimates (Wilson for a rate, a normal interval for a mean) and percentiles. Pure
functions of their arguments; stdlib only."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.96


def dcg(grades: Sequence[float], k: int, *, exponential: bool = True) -> float:
    """Discounted cumulative gain of the first `k` grades in rank order; gain 2^g - 1 (exponential) or g."""
    return sum(((2**g - 1) if exponential else g) / math.log2(i + 2) for i, g in enumerate(grades[:k]))


def ndcg(
    ranked_grades: Sequence[float], all_grades: Sequence[float], k: int = 10, *, exponential: bool = True
) -> float | None:
    """nDCG@k of a ranking given the grades in rank order and every graded item of the query; None when the
    query has nothing relevant (it cannot be scored)."""
    ideal = dcg(sorted(all_grades, reverse=True), k, exponential=exponential)
    return dcg(list(ranked_grades), k, exponential=exponential) / ideal if ideal > 0 else None


def recall_at(ranked_ids: Sequence[object], relevant: set | frozenset, k: int) -> float | None:
    """Share of the relevant ids among the first `k` ranked; None when nothing is relevant."""
    if not relevant:
        return None
    return len(relevant & set(ranked_ids[:k])) / len(relevant)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100): a value that was measured, never an interpolation."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval of successes/n; (None, None) when n = 0."""
    if n == 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high): a normal-approximation 95% interval of the mean (None parts when it cannot be said)."""
    n = len(values)
    if n == 0:
        return None, None, None
    m = sum(values) / n
    if n == 1:
        return m, None, None
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = z * sd / math.sqrt(n)
    return m, m - half, m + half
