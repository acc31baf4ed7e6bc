"""The split (by query, seeded) and the (better, worse) pairs each side gives; engagement pseudo-labels join the
training side only. Pairwise agreement of a scorer on such pairs."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import (
    LabelRow,
    engagement_rows,
    graded_rows,
    pair_weight,
    read_jsonl,
    silver_path,
    write_jsonl,
)

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


def make_pairs(rows: list[LabelRow], keys: set[str], *, min_gap: int) -> list[tuple[str, str, str, str]]:
    """(query_key, query, better, worse) for every pair of one query whose grades differ by >= min_gap."""
    out = []
    for key, group in by_query(rows, keys):
        for a in group:
            for b in group:
                if a.grade - b.grade >= min_gap:
                    out.append((key, a.query, a.memory, b.memory))
    return out


def pair_weights(rows: list[LabelRow], keys: set[str], *, min_gap: int) -> list[float]:
    """The inverse-propensity weight of each pair make_pairs(rows, keys, min_gap=...) gives, in its order (teacher
    demotion: a pair of a turn asked for grades at rate p weighs 1/p; export.pair_weight). Not wired into training
    yet: the trainer's per-pair weights take them."""
    out = []
    for _, group in by_query(rows, keys):
        for a in group:
            for b in group:
                if a.grade - b.grade >= min_gap:
                    out.append(pair_weight(a, b))
    return out


def agreement(scorer: Scorer, pairs: list[tuple[str, str, str, str]]) -> float:
    """Share of pairs the scorer orders like the grades (a tie counts half)."""
    if not pairs:
        return float("nan")
    by_query: dict[str, tuple[str, dict[str, None]]] = {}  # key -> (query, its texts in order, each once)
    for key, query, better, worse in pairs:
        texts = by_query.setdefault(key, (query, {}))[1]
        texts.setdefault(better)
        texts.setdefault(worse)
    scores = {key: dict(zip(texts, scorer(query, list(texts)))) for key, (query, texts) in by_query.items()}
    won = 0.0
    for key, _, better, worse in pairs:
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
    train_pairs: list[tuple[str, str, str, str]]
    held_pairs: list[tuple[str, str, str, str]]
    weak_pairs: list[tuple[str, str, str, str]]


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
    weak: list[tuple[str, str, str, str]] = []
    if opts.engagement:
        pseudo = [
            r
            for r in engagement_rows(
                settings, min_pos=opts.engagement_min_pos, methods=opts.engagement_methods, instance=opts.instance
            )
            if r.query_key not in held_keys
        ]
        weak = make_pairs(pseudo, {r.query_key for r in pseudo}, min_gap=opts.min_gap)
        random.Random(opts.seed).shuffle(weak)
        weak = weak[: opts.engagement_max_pairs]
    if opts.max_train_pairs and len(train_pairs) > opts.max_train_pairs:
        train_pairs = random.Random(opts.seed).sample(train_pairs, opts.max_train_pairs)
    return Split(rows, data, train_keys, held_keys, train_pairs, held_pairs, weak)
