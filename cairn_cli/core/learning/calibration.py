"""Thresholds set from data, not taste: the reranker floor and the semantic-engagement threshold, from grades. More
in docs/learning.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.config import Settings
from cairn_cli.core.labels.engagement import ENGAGEMENT_KEY, SEMANTIC, SEMANTIC_BACKFILL, engagement_semantic_min
from cairn_cli.core.store import state
from cairn_cli.errors import InvalidInput, NotFound

GRADES = (0, 1, 2, 3)
RERANKER, ENGAGEMENT = "reranker", "engagement"
COMPOSITE = "composite"  # --model composite: the composite floor of the profile and embedding model in force
APPLIED_BY = "cairn calibrate-floor"


def current_floor(model: str, settings: Settings) -> float | None:
    """The floor in force for `model`: calibrated, else configured; None for a model with no floor (external)."""
    from cairn_cli.core.ranking.reranking import FLOOR_KEY, floors
    from cairn_cli.ml.reranker import STUDENT

    calibrated = state.get(FLOOR_KEY.format(model), settings)
    if calibrated is not None:
        return float(calibrated)
    if model.startswith(STUDENT + ":"):
        return settings.CROSS_ENCODER_STUDENT_FLOOR
    return floors(settings).get(model)


def propose_floor(scores_by_grade: dict[int, list[float]], keep: float, *, min_grade3: int = 1) -> float:
    """The highest floor such that at least `keep` of the grade-3 scores are >= it. Refuses thin data."""
    top = sorted(scores_by_grade.get(3, ()), reverse=True)
    needed = max(1, min_grade3)
    if len(top) < needed:
        raise InvalidInput(
            f"only {len(top)} grade-3 score(s); calibrating needs at least {needed}",
            "grade more deliveries first, or lower --min-grade3",
        )
    if not 0.0 < keep <= 1.0:
        raise InvalidInput(f"keep must be in (0, 1], not {keep}", "pass --keep 0.95")
    kept = max(1, math.ceil(keep * len(top) - 1e-9))  # tolerance for float error: 0.55 * 100 = 55.00000000000001
    return float(top[kept - 1])


def drop_table(scores_by_grade: dict[int, list[float]], floor: float | None) -> dict[int, dict]:
    """Per grade: n, how many score under `floor` (dropped), their share (None when n = 0). No floor drops none."""
    out = {}
    for grade in GRADES:
        scores = scores_by_grade.get(grade, [])
        dropped = 0 if floor is None else sum(s < floor for s in scores)
        out[grade] = {"n": len(scores), "dropped": dropped, "share": dropped / len(scores) if scores else None}
    return out


@dataclass
class CalibrationReport:
    target: str
    model: str | None
    key: str
    keep: float
    current: float | None
    proposal: float
    now: dict[int, dict]
    proposed: dict[int, dict]
    notes: list[str] = field(default_factory=list)
    scores: dict[int, list[float]] = field(default_factory=dict, repr=False)

    @property
    def counts(self) -> dict[int, int]:
        return {g: row["n"] for g, row in self.now.items()}

    def as_dict(self) -> dict:
        """JSON-ready (string grade keys, no raw scores)."""
        return {
            "target": self.target,
            "model": self.model,
            "key": self.key,
            "keep": self.keep,
            "current": self.current,
            "proposal": self.proposal,
            "counts": {str(g): n for g, n in self.counts.items()},
            "now": {str(g): row for g, row in self.now.items()},
            "proposed": {str(g): row for g, row in self.proposed.items()},
            "notes": self.notes,
        }


def _of(query, instance: str | None):
    """Only the deliveries `instance` made (a store several machines share), else all of them."""
    from cairn_cli.db.tables import MemoryDelivery

    return query.where(MemoryDelivery.instance == instance) if instance else query


def _reranker_scores(model: str, instance: str | None = None) -> dict[int, list[float]]:
    from cairn_cli.db.tables import MemoryDelivery

    out: dict[int, list[float]] = {g: [] for g in GRADES}
    rows = _of(
        MemoryDelivery.select(MemoryDelivery.grade, MemoryDelivery.score_components).where(
            (MemoryDelivery.reranker_model == model) & MemoryDelivery.grade.is_null(False)
        ),
        instance,
    )
    for row in rows:
        score = (row.score_components or {}).get("reranker_score")
        if row.grade in out and isinstance(score, (int, float)) and not isinstance(score, bool):
            out[row.grade].append(float(score))
    return out


def _composite_scores(profile: str, embed_model: str, instance: str | None = None) -> dict[int, list[float]]:
    """Per grade, the relevance part of the composite of the graded deliveries this profile and model ranked."""
    from cairn_cli.core.store.embedders import base_of
    from cairn_cli.db.tables import MemoryDelivery

    out: dict[int, list[float]] = {g: [] for g in GRADES}
    rows = _of(
        MemoryDelivery.select(MemoryDelivery.grade, MemoryDelivery.score_components).where(
            MemoryDelivery.grade.is_null(False) & (MemoryDelivery.ranker == "cairn")
        ),
        instance,
    )
    for row in rows:
        comps = row.score_components or {}
        score = comps.get("relevance")
        if (
            row.grade in out
            and isinstance(score, (int, float))
            and base_of(str(comps.get("embed_model") or "")) == embed_model  # its learned versions: its scale
            and comps.get("profile", "default") == profile
        ):
            out[row.grade].append(float(score))
    return out


def _composite_profile(settings: Settings, embed_model: str, instance: str | None) -> str:
    """The profile whose floor `--model composite` calibrates without --profile: the one in force, or under auto
    (each scope its kind's) the one profile the graded deliveries were ranked with."""
    from cairn_cli.core.ranking.profiles import AUTO, PROFILES

    if settings.RANK_PROFILE != AUTO:
        return settings.RANK_PROFILE
    graded = [p for p in PROFILES if any(_composite_scores(p, embed_model, instance).values())]
    if len(graded) > 1:
        raise InvalidInput(
            f"graded deliveries were ranked with the profiles {', '.join(graded)} (one floor each)",
            "pass --profile " + " or --profile ".join(graded),
        )
    return graded[0] if graded else "default"


def _engagement_scores(method: str, instance: str | None = None) -> dict[int, list[float]]:
    """The graded deliveries' cosines of one basis: the live second chance's (`semantic`) or the backfill's
    (`semantic-backfill`, every row a backfill run examined): never both in one calibration."""
    from cairn_cli.db.tables import MemoryDelivery

    out: dict[int, list[float]] = {g: [] for g in GRADES}
    basis = (
        MemoryDelivery.engaged_backfill.is_null(False)
        if method == SEMANTIC_BACKFILL
        else MemoryDelivery.engaged_backfill.is_null()
    )
    rows = _of(
        MemoryDelivery.select(MemoryDelivery.grade, MemoryDelivery.engaged_semantic).where(
            MemoryDelivery.grade.is_null(False) & MemoryDelivery.engaged_semantic.is_null(False) & basis
        ),
        instance,
    )
    for row in rows:
        if row.grade in out and row.engaged_semantic is not None:
            out[row.grade].append(float(row.engaged_semantic))
    return out


def _graded_models() -> list[str]:
    from cairn_cli.db.tables import MemoryDelivery

    return [
        r.reranker_model
        for r in MemoryDelivery.select(MemoryDelivery.reranker_model)
        .distinct()
        .where(MemoryDelivery.grade.is_null(False))
        .order_by(MemoryDelivery.reranker_model)
    ]


def calibrate(
    settings: Settings,
    *,
    target: str = RERANKER,
    model: str | None = None,
    keep: float = 0.95,
    min_grade3: int = 20,
    method: str | None = None,
    instance: str | None = None,
    profile: str | None = None,
) -> CalibrationReport:
    """Propose a threshold for `target` from the graded deliveries (reranker: of `model`, default the live one;
    engagement: of the `method` basis, semantic or semantic-backfill; the composite: of `profile`, the kind of
    store's, default the one in force or, under auto, the one the graded deliveries were ranked with)."""
    from cairn_cli.core.ranking.reranking import FLOOR_KEY
    from cairn_cli.ml.reranker import NONE

    notes: list[str] = []
    current: float | None
    if method is not None and target != ENGAGEMENT:
        raise InvalidInput("--method is a basis of engagement", "pass --target engagement --method ...")
    if target == ENGAGEMENT:
        method = method or SEMANTIC
        if method not in (SEMANTIC, SEMANTIC_BACKFILL):
            raise InvalidInput(
                f"the engagement threshold of {method!r} cannot be calibrated (only cosines are)",
                f"pass --method {SEMANTIC} or --method {SEMANTIC_BACKFILL}",
            )
        if method == SEMANTIC_BACKFILL:
            from cairn_cli.core.labels.engagement import THRESHOLD_KEY, backfill_threshold

            model, key, current = None, THRESHOLD_KEY, backfill_threshold(settings)[0]
        else:
            model, key, current = None, ENGAGEMENT_KEY, engagement_semantic_min(settings)
        scores = _engagement_scores(method, instance)
        if not any(scores.values()):
            hint = (
                "run `cairn backfill-semantic` over graded deliveries first"
                if method == SEMANTIC_BACKFILL
                else "run `cairn grade` and `cairn engage` with the daemon's embedder first"
            )
            raise NotFound(f"no graded deliveries with a {method} cosine", hint)
        notes.append(f"basis: {method} (its own threshold, machine state {key})")
    elif target == RERANKER and model == COMPOSITE:
        from cairn_cli.core.ranking.profiles import FLOOR_KEY as COMPOSITE_KEY
        from cairn_cli.core.ranking.profiles import composite_floor
        from cairn_cli.core.ranking.profiles import profile as get_profile

        embed_model = settings.EMBED_MODEL
        profile = profile or _composite_profile(settings, embed_model, instance)
        get_profile(settings, profile)  # an unknown name fails here, with the fix
        key = COMPOSITE_KEY.format(profile, embed_model)
        current, source = composite_floor(settings, profile, embed_model)
        scores = _composite_scores(profile, embed_model, instance)
        if not any(scores.values()):
            raise NotFound(
                f"no graded deliveries ranked by the {profile} profile with {embed_model}",
                "grade deliveries of the daemon's ranking first (cairn grade, the Stop hook)",
            )
        notes.append(
            f"the composite floor in force is {current:g} ({source}); it reads the relevance part of the score"
        )
    elif profile is not None:
        raise InvalidInput("--profile is a kind of store's composite floor", "pass --model composite --profile ...")
    elif target == RERANKER:
        if model is None:
            from cairn_cli.core.ranking.reranking import resolve

            model = resolve(settings).name
        if model == NONE:
            raise InvalidInput(
                "the live reranker is none: there is no floor to calibrate",
                "pass --model with the reranker_model of graded deliveries",
            )
        key, current = FLOOR_KEY.format(model), current_floor(model, settings)
        scores = _reranker_scores(model, instance)
        if not any(scores.values()):
            graded = ", ".join(_graded_models()) or "none"
            raise NotFound(
                f"no graded deliveries with a reranker_score for {model}",
                f"pass --model; models with graded deliveries: {graded}",
            )
        if current is None:
            notes.append(f"{model} has no configured floor: nothing is dropped now")
    else:
        raise InvalidInput(f"unknown target {target!r}", f"pass --target {RERANKER} or --target {ENGAGEMENT}")
    if instance:
        notes.append(f"only the deliveries of instance {instance} (the floor, once applied, is the team's)")
    proposal = propose_floor(scores, keep, min_grade3=min_grade3)
    return CalibrationReport(
        target,
        model,
        key,
        keep,
        current,
        proposal,
        drop_table(scores, current),
        drop_table(scores, proposal),
        notes,
        scores,
    )


def apply(report: CalibrationReport, settings: Settings) -> bool:
    """Write the proposal to machine state with its evidence; False when it was already the value."""
    g3, g0 = report.proposed[3], report.proposed[0]
    reason = (
        f"keeps {g3['n'] - g3['dropped']}/{g3['n']} grade-3 (target {report.keep:.0%}) and drops "
        f"{g0['dropped']}/{g0['n']} grade-0; was {report.current}"
    )
    d = report.as_dict()
    evidence = {k: d[k] for k in ("counts", "keep", "current", "now", "proposed")}
    return state.put(report.key, report.proposal, settings, by=APPLIED_BY, reason=reason, evidence=evidence)


def plot(report: CalibrationReport, path: Path) -> Path:
    """Score histograms per grade on shared bins, the current threshold (dashed) and the proposal marked; PNG."""
    import numpy as np

    from cairn_cli.core.plotting import figure

    fig, path = figure(path, (8, 9))
    values = [s for g in GRADES for s in report.scores.get(g, [])]
    edges = np.histogram_bin_edges(values or [report.proposal], bins=30)
    lo, hi = float(edges[0]), float(edges[-1])
    span = (hi - lo) or 1.0
    lines = [(report.current, "--", "grey", "current"), (report.proposal, "-", "red", "proposed")]
    lines = [ln for ln in lines if ln[0] is not None and lo - span <= ln[0] <= hi + span]  # off-scale: in the title

    axes = fig.subplots(len(GRADES), 1, sharex=True)
    for ax, grade in zip(axes, sorted(GRADES, reverse=True)):
        ax.hist(report.scores.get(grade, []), bins=edges, color="tab:blue")
        for x, style, color, label in lines:
            ax.axvline(x, linestyle=style, color=color, label=f"{label} {x:.6g}")
        ax.set_ylabel(f"grade {grade} (n={report.now[grade]['n']})")
    axes[0].legend(loc="upper right")
    axes[-1].set_xlabel("engaged_semantic (cosine)" if report.target == ENGAGEMENT else "reranker_score (native)")
    what = "semantic-engagement threshold" if report.target == ENGAGEMENT else f"floor of {report.model}"
    current = "none" if report.current is None else f"{report.current:.6g}"
    counts = ", ".join(f"g{g}={report.now[g]['n']}" for g in sorted(GRADES, reverse=True))
    fig.suptitle(
        f"{what}\ncurrent {current} -> proposed {report.proposal:.6g} (keep {report.keep:.0%} of grade 3); {counts}",
        fontsize=10,
    )
    fig.savefig(path, format="png", dpi=100)
    return path


def calibrate_floor(
    settings: Settings, *, plot_to: Path | None, apply_it: bool, **asked
) -> tuple[CalibrationReport, bool | None]:
    """`cairn calibrate-floor`: the proposal (calibrate's `asked`), its plot when `plot_to`, applied when `apply_it`.
    Returns the report and whether applying changed the state (None: not applied)."""
    report = calibrate(settings, **asked)
    if plot_to is not None:
        plot(report, plot_to)
    return report, apply(report, settings) if apply_it else None
