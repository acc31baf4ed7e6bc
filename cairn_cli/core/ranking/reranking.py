"""Which cross-encoder is live: the resolution chain with this machine's facts and the floors in force.

Floors: a calibrated floor in machine-managed state (`reranker_floor:<model>`, written by calibrate-floor) wins
over the configured default (CAIRN_RERANKER_FLOOR_*, and CAIRN_CROSS_ENCODER_STUDENT_FLOOR for a student, whose
model name is its resolved version directory).
"""

from __future__ import annotations

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.store import state

FLOOR_KEY = "reranker_floor:{}"


def floors(settings: Settings) -> dict[str, float]:
    from cairn_cli.ml.reranker import BGE, MSMARCO

    out = {MSMARCO: settings.RERANKER_FLOOR_MSMARCO, BGE: settings.RERANKER_FLOOR_BGE}
    for name in list(out):
        calibrated = state.get(FLOOR_KEY.format(name), settings)
        if calibrated is not None:
            out[name] = float(calibrated)
    return out


def resolve(settings: Settings, facts=None, probe=None):
    """The live reranker's Resolution (see ml/reranker.py), with the device facts injectable for tests."""
    from cairn_cli.ml import reranker as rr

    kwargs = {"probe": probe} if probe is not None else {}
    resolution = rr.resolve_reranker(
        enabled=settings.RERANKER_ENABLED,
        student_path=config.student_path(settings.CROSS_ENCODER_STUDENT_PATH),
        student_floor=settings.CROSS_ENCODER_STUDENT_FLOOR,
        bge_enabled=settings.RERANKER_BGE_ENABLED,
        min_vram_gb=settings.RERANKER_MIN_VRAM_GB,
        floors=floors(settings),
        facts=facts,
        **kwargs,
    )
    if resolution.role == rr.STUDENT:  # a floor calibrated for this very student version wins
        calibrated = state.get(FLOOR_KEY.format(resolution.name), settings)
        if calibrated is not None:
            resolution.floor = float(calibrated)
    return resolution


def load_reranker(settings: Settings, resolution=None, *, measure: bool = False):
    """(a loaded reranker or None, notes). A model that fails to load falls back to none with a note.

    With a budget (CAIRN_RERANK_BUDGET_MS > 0) the reranker gets its plan (core/ranking/plan.py): the one measured
    on this machine before (machine state), or, with `measure` (the daemon), measured now. Without either it runs
    as configured and says so."""
    from cairn_cli.ml.reranker import NONE, CrossEncoderReranker

    resolution = resolution or resolve(settings)
    notes = list(resolution.warnings)
    if resolution.role == NONE:
        return None, notes
    try:
        reranker = CrossEncoderReranker(
            resolution, dtype=settings.RERANKER_DTYPE, max_length=settings.RERANKER_MAX_LENGTH
        )
    except Exception as exc:
        notes.append(f"{resolution.name} failed to load ({type(exc).__name__}: {exc}); composite only")
        return None, notes
    if settings.RERANK_BUDGET_MS > 0:
        from cairn_cli.core.ranking.plan import plan_for

        plan = plan_for(reranker, settings, measure=measure)  # None: not measured here yet, run as configured
        if plan is not None:
            reranker.plan = plan.as_dict()
            # the precisions the plan does not use are dropped (all but fp32 when it skips the stage), and the
            # memory they and the measuring took is handed back
            reranker.keep_only(plan.precision or "fp32")
            from cairn_cli.ml.device import release_freed_memory

            release_freed_memory()
            if plan.skipped:
                notes.append(plan.reason)
    return reranker, notes


def adapt(reranker, settings: Settings) -> str | None:
    """After a ranked request: once the planned stage has run OBSERVE_MIN calls, choose its plan again with the
    margin they show (core/ranking/plan.py `replan`). Returns the plan's reason when its margin changed."""
    from cairn_cli.core.ranking.plan import OBSERVE_MIN, replan

    plan = getattr(reranker, "plan", None)
    calls = getattr(reranker, "observed", None)
    if not plan or not calls or len(calls) < OBSERVE_MIN or settings.RERANK_BUDGET_MS <= 0:
        return None
    new = replan(plan, calls, settings)
    reranker.observed = []  # the next margin is learnt from calls under the plan now in force
    if new is None:
        return None
    reranker.plan = new.as_dict()
    return new.reason if new.margin != plan.get("margin") else None
