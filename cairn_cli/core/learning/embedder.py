"""The learned embedder: the bundled bi-encoder fine-tuned on the graded pairs (ml/tuning.py), judged by the same gate
as every learner (the held-out queries ranked by `rank()` in both forms, over the whole store re-embedded by the
candidate in memory), deployed as a new embedder version that the store is re-embedded with before it ranks
(core/store/embedders.py). It moves no work onto the hot path: the prompt is embedded once, as before, by a model
of the same size. Why it, and not the student alone: bench/learners.md (#27's ablation). More in docs/learning.md.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from cairn_cli import config
from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.learning import gate
from cairn_cli.core.learning.attempt import TrainOptions
from cairn_cli.core.learning.export import query_key
from cairn_cli.core.learning.pairs import Pair, Split, agreement, make_pairs, normalised
from cairn_cli.errors import InvalidInput
from cairn_cli.files import atomic_write

CALIBRATION_SAMPLE = 2000  # memories whose cosines (to the queries, to each other) the calibration is fit on
CALIBRATION_QUERIES = 400  # label queries (both forms) of the calibration


@dataclass
class EmbedderReport:
    rows: int
    train_queries: int
    held_queries: int
    train_pairs: int = 0  # both forms: each graded pair of a training query on its window and on its prompt
    outcome: str = "dry-run"  # dry-run | deployed | refused | trained (no deploy)
    reason: str = ""
    name: str | None = None  # the candidate version's embedder name (<base>@<version>)
    base: str | None = None
    live: str | None = None  # the embedder live when it was judged
    embedder_agreement: float | None = None  # held-out pairs ordered by the tuned cosine like the grades
    live_agreement: float | None = None
    ranking_queries: int | None = None
    embedder_r5: float | None = None
    live_r5: float | None = None
    embedder_ndcg10: float | None = None
    live_ndcg10: float | None = None
    forms: dict = field(default_factory=dict)
    queries_better: int | None = None
    queries_worse: int | None = None
    deploy_margin: float | None = None
    recall_tolerance: float | None = None
    auto_promote_safe: bool | None = None
    reembedded: str | None = None  # what the deploy's re-embedding did (core/store/embedders.finish_pending)
    train_stats: dict = field(default_factory=dict)
    seconds: float | None = None

    def as_dict(self) -> dict:
        return {"learner": "embedder", **asdict(self)}

    def held_out(self) -> dict:
        return {
            "learner": "embedder",
            "ranking_queries": self.ranking_queries,
            "embedder_agreement": self.embedder_agreement,
            "live_agreement": self.live_agreement,
            "embedder_r5": self.embedder_r5,
            "live_r5": self.live_r5,
            "embedder_ndcg10": self.embedder_ndcg10,
            "live_ndcg10": self.live_ndcg10,
            "forms": self.forms,
        }


def both_forms(split: Split, min_gap: int) -> list[Pair]:
    """The training pairs in both forms users send a query: each training query's pairs on its hook window (as
    logged) and on its prompt alone (a window that is its prompt gives its pairs once), with the
    engagement pseudo-labels' pairs; weights normalised together. A model taught on windows alone learns the
    window's form, not relevance (#27: the student that lifted windows ranked bare questions worse)."""
    from cairn_cli.core.ranking.context import window_of

    prompts = []
    for r in split.rows:
        prompt = window_of(r.query, r.prompt).prompt  # as the gate reads the prompt-alone form
        if r.query_key in split.train_keys and prompt and prompt != r.query:
            prompts.append(replace(r, query=prompt, query_key="p:" + query_key(prompt)))
    prompt_pairs = make_pairs(prompts, {r.query_key for r in prompts}, min_gap=min_gap)
    return normalised(split.train_pairs + prompt_pairs + split.weak_pairs)


def train(
    settings: Settings,
    opts: TrainOptions,
    split: Split,
    *,
    progress: Callable[[int, str], Callable[[int], None]] | None = None,
) -> EmbedderReport:
    """Tune the configured base embedder on the split's training pairs (both forms), judge it against the live ranking
    on the held-out queries, and when it passes deploy it: a new version, the store re-embedded with it (the old
    vectors rank until the new ones are complete), published to a team store."""
    from cairn_cli.core.learning.incumbent import incumbent
    from cairn_cli.core.store import embedders
    from cairn_cli.ml.models import BUNDLED_EMBEDDER, SentenceEncoder, get_encoder
    from cairn_cli.ml.tuning import TuneOptions, tune_encoder

    if opts.data is not None:
        raise InvalidInput(
            "the embedder learner ranks the memory store, not --data rows",
            "drop --data, or pass --learner student",
        )
    t0 = time.perf_counter()
    report = EmbedderReport(len(split.rows), len(split.train_keys), len(split.held_keys))
    pairs = both_forms(split, opts.min_gap)
    report.train_pairs = len(pairs)
    if opts.dry_run:
        return report
    if not pairs or not split.held_pairs:
        raise InvalidInput(
            f"not enough labels for the embedder: {len(pairs)} training and {len(split.held_pairs)} held-out pairs "
            f"with a grade gap of {opts.min_gap}",
            "collect more graded deliveries, or lower --min-gap / --holdout",
        )
    base = get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE)
    if not isinstance(base, SentenceEncoder):
        raise InvalidInput(
            f"the embedder learner tunes a sentence-transformers model; {settings.EMBED_MODEL!r} has no weights",
            f"set CAIRN_EMBED_MODEL={BUNDLED_EMBEDDER}, or pass --learner student or fusion",
        )
    version = _new_version()
    name = embedders.learned_name(base.name, version)
    report.name, report.base, report.live = name, base.name, embedders.live_name(settings)
    tune = TuneOptions(seed=opts.seed, epochs=opts.epochs or TuneOptions().epochs)
    callback = progress(len(pairs) * tune.epochs, "tuning the embedder") if progress else None
    tuned, stats = tune_encoder(
        base, [(p.query, p.better, p.worse) for p in pairs], [p.weight for p in pairs], name, tune, progress=callback
    )
    report.train_stats = {**asdict(stats), **asdict(tune)}
    calibration = fit_calibration(base, tuned, settings, split)
    inc = incumbent(settings)
    live_encoder = embedders.live_encoder(settings)
    report.embedder_agreement = round(agreement(_cosine_scorer(tuned), split.held_pairs), 4)
    report.live_agreement = round(agreement(_cosine_scorer(live_encoder), split.held_pairs), 4)
    judge(tuned, calibration, inc.reranker, split, opts, report, settings)
    if report.outcome == "passed" and opts.deploy:
        deploy(tuned, calibration, report, settings, progress=progress)
    elif report.outcome == "passed":
        report.outcome = "trained"
    report.seconds = round(time.perf_counter() - t0, 1)
    return report


def judge(tuned, calibration, reranker, split: Split, opts: TrainOptions, report: EmbedderReport, settings) -> None:
    """The gate (core/learning/gate.py), the candidate's side ranked by an engine whose table is the whole store
    embedded by the candidate in memory (nothing written) with its calibration, the live side as served."""
    from cairn_cli.core.ranking.engine import RankEngine

    cases = gate.ranking_cases(split.rows, split.held_keys, from_store=True)
    scratch = RankEngine(tuned, None)
    scratch.scratch, scratch.calibration = True, calibration
    mine, live = gate.rank_forms(
        cases, settings, gate.STORE_FORMS, candidate=(reranker, None, scratch), live=(reranker, None, None)
    )
    v = gate.compare(mine, live, opts, mine_name="embedder", live_name="live")
    report.ranking_queries, report.forms = v.queries, v.forms
    report.embedder_r5, report.live_r5 = _round(v.mine.r5), _round(v.live.r5)
    report.embedder_ndcg10, report.live_ndcg10 = _round(v.mine.ndcg10), _round(v.live.ndcg10)
    report.queries_better, report.queries_worse = v.better, v.worse
    report.deploy_margin, report.recall_tolerance = opts.deploy_margin, opts.recall_tolerance
    report.auto_promote_safe = (report.embedder_agreement or 0.0) >= gate.AUTO_PROMOTE_SAFE
    passed, report.reason = v.passed, v.reason
    report.outcome = "passed" if passed else "refused"


def fit_calibration(base, tuned, settings: Settings, split: Split):
    """The tuned embedder's cosines mapped onto the base's scale (core/store/embedders.Calibration), fit on this
    store: the label queries (both forms) against a sample of memories, and the sampled memories against each
    other, embedded by both models. Every threshold fitted on the base's cosines (the composite floor, the
    near-duplicate skip, write-time dedup, engagement's semantic test) then reads the tuned model's cosines on the
    scale it was fitted on."""
    import numpy as np

    from cairn_cli.core.store import embedders
    from cairn_cli.core.store.embeddings import embedding_text
    from cairn_cli.db.tables import Memory

    live = list(Memory.select(Memory.content, Memory.keywords).where(Memory.superseded_by.is_null()))
    rng = random.Random(13)
    sample = rng.sample(live, min(CALIBRATION_SAMPLE, len(live)))
    texts = [embedding_text(m.content, m.keywords) for m in sample]
    queries = list(dict.fromkeys(q for r in split.rows for q in (r.query, r.prompt) if q))
    queries = rng.sample(queries, min(CALIBRATION_QUERIES, len(queries)))
    mb, mt = base.encode(texts), tuned.encode(texts)
    qb, qt = base.encode(queries), tuned.encode(queries)
    upper = np.triu_indices(len(texts), k=1)
    return embedders.Calibration.fit((qb @ mb.T).ravel(), (qt @ mt.T).ravel(), (mb @ mb.T)[upper], (mt @ mt.T)[upper])


def deploy(tuned, calibration, report: EmbedderReport, settings: Settings, *, progress=None) -> None:
    """The version directory written whole under a temporary name and renamed (a killed run publishes nothing),
    requested live (the old vectors rank until the store is re-embedded), published to a team store, and the store
    re-embedded now with the model this process holds (the daemon resumes it if this run is killed)."""
    from cairn_cli.core.store import embedders
    from cairn_cli.ml.tuning import save_encoder

    version = embedders.version_of(report.name or "")
    assert version is not None
    root = config.embedder_versions_dir()
    target = root / version
    tmp = root / f".{version}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_encoder(tuned, tmp)
    atomic_write(tmp / embedders.CALIBRATION_FILE, calibration.to_json() + "\n")
    card = model_card(report)
    atomic_write(tmp / "model_card.json", json.dumps(card, indent=2) + "\n")
    os.replace(tmp, target)
    embedders.request(tuned.name, settings, card=card)
    embedders.publish(target, settings)
    report.outcome = "deployed"
    callback = None
    if progress:
        from cairn_cli.db.tables import Memory

        callback = progress(Memory.select().where(Memory.superseded_by.is_null()).count(), "re-embedding the store")
    report.reembedded = embedders.finish_pending(settings, encoder=tuned, progress=callback)


def model_card(report: EmbedderReport) -> dict:
    return {
        "learner": "embedder",
        "name": report.name,
        "base": report.base,
        "created_at": iso_now(),
        "rows": report.rows,
        "split": {"train_queries": report.train_queries, "held_queries": report.held_queries},
        "pairs": {"train": report.train_pairs},
        "held_out": report.held_out(),
        "gate": {"deploy_margin": report.deploy_margin, "recall_tolerance": report.recall_tolerance},
        "auto_promote_safe": report.auto_promote_safe,
        "train": report.train_stats,
    }


def _cosine_scorer(encoder):
    def score(query: str, texts: list[str]) -> list[float]:
        vecs = encoder.encode([query, *texts])
        return [float(v) for v in vecs[1:] @ vecs[0]]

    return score


def _new_version() -> str:
    import datetime as dt

    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)
