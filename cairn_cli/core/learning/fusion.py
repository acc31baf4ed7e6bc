"""The fusion learner: the composite's own weights fit per kind of store from the graded deliveries (a learned
profile), judged by the same gate as the student, deployed as a small versioned JSON artifact, and served by the
rank path at no cost (core/ranking/learned.py). numpy only. The method is written out in docs/learning.md.

Features are what the hook ranks with: each graded memory's components for its query, recomputed by the scoring
table (`ScoringTable.features`: similarity, keywords, scope, confidence, recency, the joined keywords) and the same
for its two neighbours, so that a profile's score of a memory is w . f + neighbour_weight * max(w . f(neighbour)),
as `ScoringTable.score` computes it. The fit is a pairwise logistic regression on (better, worse) pairs of one
query, each query weighing as one, L2-regularised toward the shipped profile (with few or noisy labels it stays at
the shipped ranking), weights non-negative; confidence and recency stay at what the settings give them (invariant
1). It is kept only if it orders the training pairs better than the shipped weights do; then scaled so that its
relevance weights sum as the shipped ones do (the composite floor reads the same scale).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import LabelRow
from cairn_cli.core.learning.pairs import Split, by_query
from cairn_cli.core.ranking import learned
from cairn_cli.core.ranking.profiles import Profile
from cairn_cli.core.store import state
from cairn_cli.errors import InvalidInput, NotFound
from cairn_cli.files import atomic_write

if TYPE_CHECKING:
    from cairn_cli.core.ranking.scoring import ScoringTable

LEARNED_KEY = "learned_profile"  # machine state: the deployed learned profile, its previous version, its numbers
COMPONENT_NAMES = ("similarity", "keywords", "scope", "confidence", "recency")
# theta: the five component weights, context_keywords, neighbour_weight
FREE = np.array([1, 1, 1, 0, 0, 1, 1], dtype=bool)  # confidence and recency are held where the settings put them
RELEVANCE = np.array([1, 1, 0, 0, 0, 1, 0], dtype=bool)  # what the floor reads: scaled back to the shipped sum
SHARPNESS = 10.0  # score differences are multiplied by this in the logistic loss (components are 0..1)
PRIOR = 10.0  # the L2 pull toward the shipped weights, in queries' worth of evidence
MIN_QUERIES = 10  # fewer training queries of a kind of store: its shipped weights stay
MIN_GAIN = 0.01  # the fit must misorder this much less of the training pairs than the shipped weights
STEPS, LR = 1500, 0.01


@dataclass
class Pairs:
    """(better, worse) pairs of graded memories: each side's own features (n x 6) and its two neighbours' (n x 2 x 6,
    zero where none or out of scope), a weight per pair (each query's pairs sum to 1, a hard negative counts twice)."""

    better: np.ndarray
    better_nb: np.ndarray
    worse: np.ndarray
    worse_nb: np.ndarray
    weight: np.ndarray
    queries: int

    def __len__(self) -> int:
        return len(self.weight)


def theta_of(params: dict) -> np.ndarray:
    """A profile's parameters (learned.shipped_params' shape) as the vector the fit works on."""
    w = params["weights"]
    return np.array(
        [*(float(w.get(n, 0.0)) for n in COMPONENT_NAMES), params["context_keywords"], params["neighbour_weight"]]
    )


def params_of(theta: np.ndarray) -> dict:
    return {
        "weights": {n: round(float(v), 6) for n, v in zip(COMPONENT_NAMES, theta[:5])},
        "context_keywords": round(float(theta[5]), 6),
        "neighbour_weight": round(float(theta[6]), 6),
    }


def _scores(theta: np.ndarray, own: np.ndarray, nb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores, the better neighbour's base, its index) as ScoringTable.score ranks: w.f + nw * max(0, w.f(nb))."""
    w = theta[:6]
    base = own @ w
    nb_base = nb @ w  # n x 2
    which = nb_base.argmax(axis=1)
    best = np.maximum(nb_base[np.arange(len(which)), which], 0.0)
    return base + theta[6] * best, best, which


def misordered(theta: np.ndarray, pairs: Pairs) -> float:
    """The weighted share of pairs `theta` orders against the grades (a tie counts half)."""
    if not len(pairs):
        return float("nan")
    sb, _, _ = _scores(theta, pairs.better, pairs.better_nb)
    sw, _, _ = _scores(theta, pairs.worse, pairs.worse_nb)
    wrong = np.where(sb < sw, 1.0, np.where(sb == sw, 0.5, 0.0))
    return float((wrong * pairs.weight).sum() / pairs.weight.sum())


@dataclass
class Fit:
    params: dict  # the weights to serve (the shipped ones when not adopted)
    adopted: bool
    reason: str
    queries: int
    pairs: int
    error_shipped: float | None = None
    error_learned: float | None = None


def fit(pairs: Pairs, start: dict, *, prior: float = PRIOR, steps: int = STEPS) -> Fit:
    """The learned parameters of one kind of store from `pairs`, starting from (and pulled toward) `start`."""
    theta0 = theta_of(start)
    if pairs.queries < MIN_QUERIES or not len(pairs):
        why = f"{pairs.queries} training queries with a graded pair (< {MIN_QUERIES}): the shipped weights stay"
        return Fit(start, False, why, pairs.queries, len(pairs))
    theta = theta0.copy()
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    q = float(pairs.queries)
    for step in range(1, steps + 1):
        sb, bb, ib = _scores(theta, pairs.better, pairs.better_nb)
        sw, bw, iw = _scores(theta, pairs.worse, pairs.worse_nb)
        d = SHARPNESS * (sb - sw)
        # d/dd softplus(-d) = -sigmoid(-d)
        g_d = -pairs.weight * 0.5 * (1.0 - np.tanh(d / 2.0)) * SHARPNESS
        rows = np.arange(len(d))
        fb = pairs.better + theta[6] * (bb > 0)[:, None] * pairs.better_nb[rows, ib]
        fw = pairs.worse + theta[6] * (bw > 0)[:, None] * pairs.worse_nb[rows, iw]
        grad = np.zeros_like(theta)
        grad[:6] = g_d @ (fb - fw)
        grad[6] = g_d @ (bb - bw)
        grad = grad / q + 2.0 * prior / q * (theta - theta0)
        grad[~FREE] = 0.0
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta = theta - LR * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        theta = np.where(FREE, np.maximum(theta, 0.0), theta0)
    shipped_sum, fitted_sum = float(theta0[RELEVANCE].sum()), float(theta[RELEVANCE].sum())
    if shipped_sum > 0 and fitted_sum > 0:  # the same scale as the shipped weights: the order is unchanged
        scale = shipped_sum / fitted_sum
        theta[:6] = np.where(FREE[:6], theta[:6] * scale, theta0[:6])
    e0, e1 = misordered(theta0, pairs), misordered(theta, pairs)
    if e1 > e0 - MIN_GAIN:
        why = f"the fit misorders {e1:.3f} of the training pairs vs {e0:.3f} shipped: the shipped weights stay"
        return Fit(start, False, why, pairs.queries, len(pairs), round(e0, 4), round(e1, 4))
    why = f"misorders {e1:.3f} of the training pairs vs {e0:.3f} shipped"
    return Fit(params_of(theta), True, why, pairs.queries, len(pairs), round(e0, 4), round(e1, 4))


# -- features of the graded deliveries, through the scoring table ------------------------------------------------


def _neighbours(feats: dict[str, np.ndarray], slot: int) -> np.ndarray:
    """The features of `slot`'s two neighbours (zero where none, or out of scope: score() gives those 0)."""
    matrix, mask = feats["matrix"], feats["in_scope"]
    out = np.zeros((2, matrix.shape[1]))
    for j, side in enumerate((feats["prev"], feats["next"])):
        other = int(side[slot])
        if other >= 0 and mask[other]:
            out[j] = matrix[other]
    return out


@dataclass
class _Bucket:
    """The pairs of one kind of store as they are collected."""

    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]] = field(default_factory=list)
    queries: int = 0

    def add(self, feats: dict[str, np.ndarray], better: int, worse: int, weight: float) -> None:
        m = feats["matrix"]
        self.rows.append((m[better], _neighbours(feats, better), m[worse], _neighbours(feats, worse), weight))

    def pairs(self) -> Pairs:
        b, bn, w, wn, weight = (np.asarray(c) for c in zip(*self.rows))
        return Pairs(b, bn, w, wn, weight, self.queries)


def collect(
    settings: Settings, rows: list[LabelRow], keys: set[str], *, min_gap: int
) -> tuple[dict[str, Pairs], dict[str, Profile]]:
    """Per kind of store (the profile a query's scope ranks with): the (better, worse) pairs of the graded memories
    of the queries of `keys`, featured by the memory store's scoring table as the engine ranks it (the same query
    form the gate ranks: the delivery's context window). Also the shipped profile of each kind."""
    from cairn_cli.core.ids import GLOBAL_SCOPE
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.profiles import profile as get_profile

    groups = [(k, g) for k, g in by_query(rows, keys) if any(r.memory_id is not None for r in g)]
    if not groups:
        return {}, {}
    engine = RankEngine.in_process(settings, with_reranker=False)
    entry = engine.table(settings)
    table = cast("ScoringTable", entry.table)  # an engine with an embedder keeps a scoring table
    if not len(table):
        return {}, {}
    vecs = engine.embed([g[-1].query for _, g in groups])
    parts: dict[str, _Bucket] = {}
    profiles: dict[str, Profile] = {}
    for (_, group), vec in zip(groups, vecs):
        scope = group[-1].scope if group[-1].scope in entry.scopes else GLOBAL_SCOPE
        shipped = get_profile(settings, kind=table.kind(scope))
        feats = table.features(
            group[-1].query,
            table.similarities(np.asarray(vec)),
            scope=scope,
            half_life_days=settings.RECENCY_HALF_LIFE_DAYS,
        )
        if feats is None:
            continue
        grades: dict[int, tuple[int, bool]] = {}
        for r in group:  # the newest grade of a memory wins
            if r.memory_id is not None:
                grades[r.memory_id] = (r.grade, r.hard_negative)
        slots = {
            mid: slot
            for mid in grades
            if (slot := table.slot_of.get(mid)) is not None and feats["in_scope"][slot]  # superseded: not ranked
        }
        found = [(a, b) for a in slots for b in slots if grades[a][0] - grades[b][0] >= min_gap]
        if not found:
            continue
        profiles[shipped.name] = shipped
        bucket = parts.setdefault(shipped.name, _Bucket())
        bucket.queries += 1
        weights = np.array([2.0 if grades[b][1] else 1.0 for _, b in found])  # a misleading memory: a stronger negative
        for (a, b), weight in zip(found, weights / weights.sum()):  # each query weighs as one
            bucket.add(feats, slots[a], slots[b], float(weight))
    out = {name: bucket.pairs() for name, bucket in parts.items()}
    return out, profiles


# -- one attempt: fit, judge, deploy -----------------------------------------------------------------------------


@dataclass
class FusionReport:
    rows: int
    train_queries: int
    held_queries: int
    learner: str = "fusion"
    outcome: str = "dry-run"  # dry-run | deployed | refused | trained | unchanged
    reason: str = ""
    profiles: dict = field(default_factory=dict)  # kind of store -> the fit (params, adopted, why, pairs, errors)
    ranking_queries: int | None = None
    fusion_r5: float | None = None
    live_r5: float | None = None
    fusion_ndcg10: float | None = None
    live_ndcg10: float | None = None
    forms: dict = field(default_factory=dict)  # per query form (the hook's window, the prompt alone): both pipelines
    queries_better: int | None = None
    queries_worse: int | None = None
    deploy_margin: float | None = None
    recall_tolerance: float | None = None
    version: str | None = None
    seconds: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def held_out(self) -> dict:
        return {
            "learner": "fusion",
            "ranking_queries": self.ranking_queries,
            "fusion_r5": self.fusion_r5,
            "live_r5": self.live_r5,
            "fusion_ndcg10": self.fusion_ndcg10,
            "live_ndcg10": self.live_ndcg10,
            "forms": self.forms,
        }


def artifact_of(fits: dict[str, Fit], profiles: dict[str, Profile], settings: Settings, version: str) -> dict:
    """The JSON a deploy writes: the adopted fits, each with the shipped parameters it was fit from."""
    return {
        "format": learned.FORMAT,
        "version": version,
        "embed_model": settings.EMBED_MODEL,
        "created_at": iso_now(),
        "profiles": {
            name: {
                **f.params,
                "shipped": learned.shipped_params(profiles[name]),
                "queries": f.queries,
                "pairs": f.pairs,
                "train_misordered": {"shipped": f.error_shipped, "learned": f.error_learned},
            }
            for name, f in sorted(fits.items())
            if f.adopted
        },
    }


def train(settings: Settings, opts: TrainOptions, split: Split) -> FusionReport:
    """Fit each kind of store's weights on the training queries, judge the learned profile against the live ranking
    on the held-out queries (gate.py, ranked by the production pipeline under each profile), deploy when it passes."""
    from cairn_cli.core.learning import gate
    from cairn_cli.core.learning.incumbent import incumbent

    if opts.data is not None:
        raise InvalidInput(
            "the fusion learner fits on graded deliveries in the memory store, not on --data rows",
            "drop --data, or pass --learner student",
        )
    t0 = time.perf_counter()
    report = FusionReport(len(split.rows), len(split.train_keys), len(split.held_keys))
    pairs, profiles = collect(settings, split.rows, split.train_keys, min_gap=opts.min_gap)
    fits = {name: fit(p, learned.shipped_params(profiles[name])) for name, p in pairs.items()}
    report.profiles = {name: asdict(f) for name, f in fits.items()}
    if opts.dry_run:
        report.seconds = round(time.perf_counter() - t0, 2)
        return report
    if not any(f.adopted for f in fits.values()):
        report.outcome = "unchanged"
        report.reason = "; ".join(f"{n}: {f.reason}" for n, f in sorted(fits.items())) or (
            "no training query has a graded pair in the memory store: the shipped weights stay"
        )
        report.seconds = round(time.perf_counter() - t0, 2)
        return report
    version = learned_version_name()
    artifact = artifact_of(fits, profiles, settings, version)
    inc = incumbent(settings)
    cases = gate.ranking_cases(split.rows, split.held_keys, from_store=True)
    model = settings.EMBED_MODEL
    # the same reranker on both sides: the candidate weights against the live (served) ones, in both query forms
    mine, live = gate.rank_forms(
        cases,
        settings,
        gate.STORE_FORMS,
        candidate=(inc.reranker, lambda p: learned.apply(p, artifact, model)),
        live=(inc.reranker, None),
    )
    v = gate.compare(mine, live, opts, mine_name="fusion", live_name="live")
    report.ranking_queries, report.forms = v.queries, v.forms
    report.fusion_r5, report.live_r5 = _round(v.mine.r5), _round(v.live.r5)
    report.fusion_ndcg10, report.live_ndcg10 = _round(v.mine.ndcg10), _round(v.live.ndcg10)
    report.queries_better, report.queries_worse = v.better, v.worse
    report.deploy_margin, report.recall_tolerance = opts.deploy_margin, opts.recall_tolerance
    passed, report.reason = v.passed, v.reason
    if passed and opts.deploy:
        deploy_artifact(artifact, settings, report)
    else:
        report.outcome = "refused" if not passed else "trained"
    report.seconds = round(time.perf_counter() - t0, 2)
    return report


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


# -- versions: one JSON file per deploy, the live one a symlink swapped atomically -------------------------------


def learned_version_name() -> str:
    from cairn_cli.core.learning.deploy import new_version_dir

    return new_version_dir(learned.learned_path()).name


def deploy_artifact(artifact: dict, settings: Settings, report: FusionReport) -> Path:
    """Write the artifact as a new version file and point the live link at it (one atomic replacement); the
    previous version stays for --rollback. Recorded in machine state."""
    from cairn_cli.core.learning.deploy import deploy, versions_dir

    live = learned.learned_path()
    path = versions_dir(live) / f"{artifact['version']}.json"
    atomic_write(path, json.dumps(artifact, indent=2) + "\n")
    previous = deploy(path, live)
    report.outcome, report.version = "deployed", artifact["version"]
    state.put(
        LEARNED_KEY,
        {
            "version": str(path),
            "previous": str(previous) if previous else None,
            "deployed_at": iso_now(),
            "profiles": artifact["profiles"],
            "held_out": report.held_out(),
        },
        settings,
        by="cairn train-reranker --learner fusion",
        reason=report.reason,
    )
    return path


def rollback(settings: Settings) -> dict:
    """Point the live learned profile back at the version deployed before it; the first one deployed rolls back to
    the shipped weights (the live link removed)."""
    from cairn_cli.core.learning.deploy import deploy

    live = learned.learned_path()
    record = state.get(LEARNED_KEY, settings) or {}
    previous = record.get("previous")
    current = str(live.resolve()) if live.is_symlink() else None
    if previous and Path(previous).is_file():
        deploy(Path(previous), live)
        now = previous
    elif current:
        os.unlink(live)
        now = None
    else:
        raise NotFound("there is no learned profile to roll back", "run cairn train-reranker --learner fusion first")
    value = {**record, "version": now, "previous": current, "rolled_back_at": iso_now()}
    state.put(LEARNED_KEY, value, settings, by="cairn train-reranker --learner fusion --rollback", reason="rollback")
    return {"learner": "fusion", "version": now or "shipped weights", "previous": current}
