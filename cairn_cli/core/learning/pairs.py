"""The split (by query, seeded) and the weighted (better, worse) pairs each side gives; engagement pseudo-labels join
the training side only. Pairwise agreement of a scorer on such pairs. The pairs and their weights are written out in
docs/learning.md."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from cairn_cli.config import Settings
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import LabelRow, engagement_rows, graded_rows, read_jsonl, silver_path, write_jsonl

Scorer = Callable[[str, list[str]], list[float]]


def split_by_query(rows: list[LabelRow], *, holdout: float, seed: int) -> tuple[set[str], set[str]]:
    """(train keys, held-out keys): whole queries, shuffled with `seed`; at least one of each when there are two."""
    keys = sorted({r.query_key for r in rows})
    random.Random(seed).shuffle(keys)
    n_held = min(len(keys) - 1, max(1, round(len(keys) * holdout))) if len(keys) > 1 else 0
    return set(keys[n_held:]), set(keys[:n_held])


def by_query(rows: list[LabelRow], keys: set[str]) -> list[tuple[str, list[LabelRow]]]:
    """The rows of each query of `keys`, in their order, by query key (sorted)."""
    by_key: dict[str, list[LabelRow]] = {}
    for r in rows:
        if r.query_key in keys:
            by_key.setdefault(r.query_key, []).append(r)
    return sorted(by_key.items())


class Pair(NamedTuple):
    """One (better, worse) pair of a query, and how much it counts in the training loss (mean 1 over a list)."""

    key: str
    query: str
    better: str
    worse: str
    weight: float = 1.0


HARD_NEGATIVE_WEIGHT = 2.0  # a pair against a `!` memory (misleading) counts this much more
AGREE, DISAGREE = 1.5, 0.5  # a graded row whose engagement agrees (engaged <=> grade >= 2) / disagrees with its grade
IPS_CAP = 10.0  # 1 / propensity is capped here: one explored delivery never outweighs ten ordinary pairs
MAX_RAW_WEIGHT = 20.0  # a pair's weight before normalisation is capped here
ENGAGED_GRADE = 2  # the grade from which engagement is expected (the gate's relevant grade)


def _agreement(row: LabelRow) -> float:
    if row.engaged is None:
        return 1.0
    return AGREE if row.engaged == (row.grade >= ENGAGED_GRADE) else DISAGREE


def pair_weight(better: LabelRow, worse: LabelRow, *, hard: bool) -> float:
    """The raw weight of a pair: the grade gap (1 for a hard negative at the same grade), x HARD_NEGATIVE_WEIGHT
    when the worse is a hard negative, x the inverse of the chance both were shown and graded (explore propensity of
    each, the turn's grade propensity once: sqrt of the two rows', equal within a turn; capped at IPS_CAP), x the
    mean of the two rows' grade/engagement agreement factors; capped at MAX_RAW_WEIGHT."""
    gap = max(1, better.grade - worse.grade)
    grade_p = math.sqrt(max(better.grade_propensity, 1e-9) * max(worse.grade_propensity, 1e-9))
    chance = max(better.explore_propensity * worse.explore_propensity * grade_p, 1e-9)
    weight = gap * (HARD_NEGATIVE_WEIGHT if hard else 1.0) * min(IPS_CAP, 1.0 / chance)
    weight *= (_agreement(better) + _agreement(worse)) / 2
    return min(MAX_RAW_WEIGHT, weight)


def normalised(pairs: list[Pair]) -> list[Pair]:
    """The pairs with their weights scaled so that their mean is 1 (the loss keeps its scale; the order of
    importance is the weights')."""
    total = sum(p.weight for p in pairs)
    if not pairs or total <= 0:
        return pairs
    scale = len(pairs) / total
    return [p._replace(weight=p.weight * scale) for p in pairs]


def make_pairs(rows: list[LabelRow], keys: set[str], *, min_gap: int, weighted: bool = True) -> list[Pair]:
    """The pairs of each query of `keys`: (a, b) whose grades differ by >= min_gap, and every memory graded at least
    as high as a hard negative (`!`, itself not one) against it, even at the same grade. Weights: `pair_weight`
    (`weighted` False: 1 each, e.g. pseudo-labels), normalised to mean 1."""
    out = []
    for key, group in by_query(rows, keys):
        for a in group:
            for b in group:
                if a is b or a.memory == b.memory:
                    continue
                hard = b.hard_negative and not a.hard_negative and a.grade >= b.grade
                if a.grade - b.grade >= min_gap or hard:
                    out.append(
                        Pair(key, a.query, a.memory, b.memory, pair_weight(a, b, hard=hard) if weighted else 1.0)
                    )
    return normalised(out)


def agreement(scorer: Scorer, pairs: list[Pair]) -> float:
    """Share of pairs the scorer orders like the grades (a tie counts half; every pair counts once, whatever its
    training weight)."""
    if not pairs:
        return float("nan")
    by_query: dict[str, tuple[str, dict[str, None]]] = {}  # key -> (query, its texts in order, each once)
    for key, query, better, worse, *_ in pairs:
        texts = by_query.setdefault(key, (query, {}))[1]
        texts.setdefault(better)
        texts.setdefault(worse)
    scores = {key: dict(zip(texts, scorer(query, list(texts)))) for key, (query, texts) in by_query.items()}
    won = 0.0
    for key, _, better, worse, *_ in pairs:
        s_b, s_w = scores[key][better], scores[key][worse]
        won += 1.0 if s_b > s_w else 0.5 if s_b == s_w else 0.0
    return won / len(pairs)


@dataclass
class Split:
    """The labels, split by query, and the pairs each side gives."""

    rows: list[LabelRow]
    data: str
    train_keys: set[str]
    held_keys: set[str]
    train_pairs: list[Pair]
    held_pairs: list[Pair]
    weak_pairs: list[Pair]

    def training(self) -> list[Pair]:
        """What the student learns from: the graded pairs and the pseudo-labels', weights normalised together."""
        return normalised(self.train_pairs + self.weak_pairs)


def prepare(settings: Settings, opts: TrainOptions) -> Split:
    """Export (unless --data), split by query, pair; engagement pseudo-labels join the TRAINING side only."""
    if opts.data is None:
        rows = graded_rows(settings, instance=opts.instance)
        write_jsonl(rows, silver_path())
        data = str(silver_path())
    else:
        rows = read_jsonl(opts.data)
        data = str(opts.data)
    train_keys, held_keys = split_by_query(rows, holdout=opts.holdout, seed=opts.seed)
    train_pairs = make_pairs(rows, train_keys, min_gap=opts.min_gap)
    held_pairs = make_pairs(rows, held_keys, min_gap=opts.min_gap)
    weak: list[Pair] = []
    if opts.engagement:
        pseudo = [
            r
            for r in engagement_rows(
                settings, min_pos=opts.engagement_min_pos, methods=opts.engagement_methods, instance=opts.instance
            )
            if r.query_key not in held_keys
        ]
        # pseudo-labels' 0/3 are not graded magnitudes: each of their pairs counts 1 before normalisation
        weak = make_pairs(pseudo, {r.query_key for r in pseudo}, min_gap=opts.min_gap, weighted=False)
        random.Random(opts.seed).shuffle(weak)
        weak = weak[: opts.engagement_max_pairs]
    if opts.max_train_pairs and len(train_pairs) > opts.max_train_pairs:
        train_pairs = random.Random(opts.seed).sample(train_pairs, opts.max_train_pairs)
    return Split(rows, data, train_keys, held_keys, train_pairs, held_pairs, weak)
