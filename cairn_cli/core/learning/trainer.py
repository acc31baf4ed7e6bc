"""`cairn train-reranker`'s run: prepare the split, train a student on the pairs, judge it at the gate, deploy it
when it passes, record the attempt."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from cairn_cli import config
from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.learning import gate
from cairn_cli.core.learning.attempt import TrainOptions, TrainReport, record_attempt
from cairn_cli.core.learning.card import card
from cairn_cli.core.learning.deploy import DEPLOY_KEY, deploy, new_version_dir
from cairn_cli.core.learning.incumbent import Incumbent, incumbent
from cairn_cli.core.learning.pairs import Split, prepare
from cairn_cli.core.store import state
from cairn_cli.errors import InvalidInput, NotFound
from cairn_cli.files import atomic_write

LEARNERS = {  # --learner: the learners it runs, in this order, on one split
    "student": ("student",),
    "fusion": ("fusion",),
    "embedder": ("embedder",),
    "both": ("fusion", "student"),
    "fusion+embedder": ("fusion", "embedder"),  # --auto's: few labels, nothing added to the hot path
    "all": ("fusion", "embedder", "student"),
}


def train_learners(
    settings: Settings, opts: TrainOptions, *, progress: Callable[[int, str], Callable[[int], None]] | None = None
) -> dict:
    """The learners `opts.learner` names (LEARNERS), on one split, each judged against the ranking the ones before
    it left live: the fusion learner (core/learning/fusion.py: seconds, from few labels), the learned embedder
    (core/learning/embedder.py), the student (train_reranker). One JSON-ready outcome: the last learner's at the
    top, the others' under their names; a learner without pairs enough yet is `skipped` with the reason, unless
    none had anything to learn from (then the last one's error is raised)."""
    from cairn_cli.core.learning import embedder, fusion

    names = LEARNERS[opts.learner]
    if names == ("student",):
        return train_reranker(settings, opts, progress=progress).as_dict()
    split = prepare(settings, opts)
    results: dict[str, dict] = {}
    failure: InvalidInput | None = None
    report: fusion.FusionReport | embedder.EmbedderReport
    for name in names:
        try:
            if name == "fusion":
                report = fusion.train(settings, opts, split)
                results[name] = report.as_dict()
            elif name == "embedder":
                report = embedder.train(settings, opts, split, progress=progress)
                results[name] = report.as_dict()
            else:
                results[name] = train_reranker(settings, opts, progress=progress, split=split).as_dict()
                continue  # train_reranker records its own attempt
        except InvalidInput as exc:
            failure = exc
            results[name] = {"learner": name, "outcome": "skipped", "reason": f"{name}: {exc.one_line()}"}
            continue
        if not opts.dry_run:
            record_attempt(report, settings)
    if failure is not None and all(r["outcome"] in ("skipped", "unchanged") for r in results.values()):
        raise failure
    last = names[-1]
    return {**results[last], **{n: r for n, r in results.items() if n != last}}


def train_reranker(
    settings: Settings,
    opts: TrainOptions,
    *,
    progress: Callable[[int, str], Callable[[int], None]] | None = None,
    split: Split | None = None,
) -> TrainReport:
    """Prepare (unless `split` is given), and unless a dry run: train, judge against the incumbent on the same
    held-out queries, deploy when the gate passes, and record the attempt. `progress(total, what)` gives a callback."""
    split = split or prepare(settings, opts)
    report = TrainReport(
        split.data,
        len(split.rows),
        len(split.train_keys | split.held_keys),
        len(split.train_keys),
        len(split.held_keys),
        len(split.train_pairs),
        len(split.weak_pairs),
        len(split.held_pairs),
        opts.min_gap,
        opts.seed,
    )
    report.engagement_methods = list(opts.engagement_methods) if opts.engagement else []
    report.instance = opts.instance
    if opts.dry_run:
        return report
    if not split.train_pairs + split.weak_pairs or not split.held_pairs:
        raise InvalidInput(
            f"not enough labels: {len(split.train_pairs) + len(split.weak_pairs)} training and "
            f"{len(split.held_pairs)} held-out pairs with a grade gap of {opts.min_gap}",
            "collect more graded deliveries, or lower --min-gap / --holdout",
        )
    inc = incumbent(settings)
    model = _train_student(settings, opts, split, inc, report, progress)
    passed = gate.judge(model, inc, split, opts, report, settings)
    if passed and opts.deploy:
        _deploy_student(model, settings, report)
    else:
        report.outcome = "refused" if not passed else "trained"
    record_attempt(report, settings)
    return report


AUTO_PAIR_PASSES = 3000  # auto epochs: about this many pairs seen in all
AUTO_EPOCHS = (3, 10)


def epochs_for(pairs: int) -> int:
    """Epochs scaled to the training pairs: few labels need more passes. Measured on the LoCoMo loop (bench/loop.md):
    472 pairs at 2 epochs, lr 3e-5 reached agreement 0.65 and lost R@5; 5-10 epochs at lr 5e-5 reached 0.84-0.86."""
    lo, hi = AUTO_EPOCHS
    return max(lo, min(hi, math.ceil(AUTO_PAIR_PASSES / max(1, pairs))))


def _train_student(settings: Settings, opts: TrainOptions, split: Split, inc: Incumbent, report: TrainReport, progress):
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    base = (
        bundled_base()
        if opts.base == "bundled" or (opts.base == "incumbent" and inc.base is None)
        else (inc.base if opts.base == "incumbent" else Path(opts.base).expanduser())
    )
    if base is None or not Path(base).is_dir():
        raise NotFound(f"base model {base} does not exist", "pass --base bundled, incumbent or a model directory")
    report.incumbent, report.base, report.layers = inc.name, str(base), opts.layers
    model = CrossEncoderModel(
        base, device=opts.device, max_length=opts.max_length or settings.RERANKER_MAX_LENGTH, layers=opts.layers
    )
    pairs = split.training()
    triples = [(p.query, p.better, p.worse) for p in pairs]
    epochs = opts.epochs or epochs_for(len(triples))
    callback = progress(len(triples) * epochs, "training") if progress else None
    stats = model.train_pairwise(
        triples,
        weights=[p.weight for p in pairs],
        epochs=epochs,
        batch_size=opts.batch_size,
        lr=opts.lr,
        margin=opts.margin,
        seed=opts.seed,
        progress=callback,
    )
    report.train_stats = {**asdict(stats), "epochs": epochs, "lr": opts.lr}
    return model.serve_mode()


def _deploy_student(model, settings: Settings, report: TrainReport) -> None:
    """A new version directory, then one atomic symlink swap; the previous version is kept for --rollback."""
    student = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    version = new_version_dir(student)
    model.save(version)
    atomic_write(version / "model_card.json", json.dumps(card(report), indent=2) + "\n")
    previous = deploy(version, student)
    report.outcome, report.student_dir = "deployed", str(version)
    state.put(
        DEPLOY_KEY,
        {
            "version": str(version),
            "previous": str(previous) if previous else None,
            "deployed_at": iso_now(),
            "card": card(report),
        },
        settings,
        by="cairn train-reranker",
        reason=report.reason,
    )
    from cairn_cli.core.learning import team

    team.publish(version, settings)  # a store machines share: every instance's daemon installs it
