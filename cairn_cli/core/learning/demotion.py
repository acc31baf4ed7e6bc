"""The drift alarm of teacher demotion (core/experiment/grading.py asks for grades on a share of turns once a
learner is auto-promote-safe): after a Stop that applied grades, the live learner's logged scores are compared with
the grades of its last DRIFT_TURNS graded turns; when its pairwise agreement falls under its own held-out agreement
minus DRIFT_TOLERANCE the alarm rises and every turn asks for grades again, until it recovers. The alarm is written
to machine state only when it changes. Also what `cairn stats grading` shows. The method: docs/learning.md."""

from __future__ import annotations

from cairn_cli.config import Settings
from cairn_cli.core.experiment.grading import (
    DEMOTED_RATE,
    DEPLOY_KEY,
    DRIFT_KEY,
    EMBEDDER_KEY,
    KEYS,
    auto_rate,
    drift_in_force,
    rate,
    safe_learner,
)

DRIFT_TURNS = 50  # the drift check reads the grades of the live learner's last this many graded turns
DRIFT_MIN_PAIRS = 20  # fewer pairs than this: no verdict (the alarm stays as it is)
DRIFT_MIN_GAP = 2  # a pair is two memories of one turn whose grades differ by at least this (training's default)
DRIFT_TOLERANCE = 0.08  # the alarm rises below the learner's held-out agreement minus this ...
DRIFT_CLEAR = 0.04  # ... and clears at or above the held-out agreement minus this (no flapping at the edge)


def fresh_agreement(learner: str, *, turns: int = DRIFT_TURNS, min_gap: int = DRIFT_MIN_GAP) -> tuple[float, int, int]:
    """(pairwise agreement, pairs, turns) of the live learner's logged scores with the grades of its last `turns`
    graded turns: within a turn, each two graded deliveries whose grades differ by >= min_gap are a pair, won when
    the learner's logged score orders them like the grades (a tie counts half): a student's reranker_score, a learned
    embedder's similarity (deliveries ranked with its vectors: score_components' embed_model). nan when there is no
    pair."""
    from peewee import fn

    from cairn_cli.db.tables import MemoryDelivery as D

    embedder = "@" in learner  # a learned embedder's name is <base>@<version>; a student's its version directory's
    if embedder:
        graded = D.grade.is_null(False)  # which were ranked with its vectors: read off each delivery below
        field = "similarity"
        depth = turns * 4  # the newest graded turns, some perhaps ranked before it went live
    else:  # the student's name as the pipeline logs it: "student:<its resolved version directory>"
        graded = (
            D.grade.is_null(False) & D.reranker_model.startswith("student:") & D.reranker_model.endswith(f"/{learner}")
        )
        field, depth = "reranker_score", turns
    recent = (  # the newest graded turns, by their newest delivery
        D.select(D.session_id, D.turn)
        .where(graded)
        .group_by(D.session_id, D.turn)
        .order_by(fn.MAX(D.id).desc())
        .limit(depth)
    )
    order = {(r.session_id, r.turn): i for i, r in enumerate(recent)}  # newest first
    chosen = set(order)
    if not chosen:
        return float("nan"), 0, 0
    by_turn: dict[tuple[str, int], list[tuple[int, float]]] = {}
    sessions = sorted({s for s, _ in chosen})
    for r in D.select(D.session_id, D.turn, D.grade, D.score_components).where(graded & D.session_id.in_(sessions)):
        if (r.session_id, r.turn) not in chosen:
            continue
        components = r.score_components or {}
        if embedder and components.get("embed_model") != learner:
            continue
        score = components.get(field)
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            by_turn.setdefault((r.session_id, r.turn), []).append((int(r.grade or 0), float(score)))
    if embedder:  # its newest `turns` graded turns
        by_turn = dict(sorted(by_turn.items(), key=lambda kv: order[kv[0]])[:turns])
    won = pairs = 0.0
    for rows in by_turn.values():
        for ga, sa in rows:
            for gb, sb in rows:
                if ga - gb >= min_gap:
                    pairs += 1
                    won += 1.0 if sa > sb else 0.5 if sa == sb else 0.0
    return (won / pairs if pairs else float("nan")), int(pairs), len(by_turn) if embedder else len(chosen)


def held_agreement(values: dict) -> float | None:
    """The auto-promote-safe learner's own held-out pairwise agreement (its model card's), or None."""
    learner = safe_learner(values)
    if learner is not None and "@" in learner:
        card = (values.get(EMBEDDER_KEY) or {}).get("card") or {}
        value = (card.get("held_out") or {}).get("embedder_agreement")
    else:
        card = (values.get(DEPLOY_KEY) or {}).get("card") or {}
        value = (card.get("held_out") or {}).get("student_agreement")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def drift_status(values: dict) -> dict | None:
    """The drift check of the auto-promote-safe learner now: its fresh agreement, the threshold, and whether the
    alarm should be up (None: no auto-promote-safe learner, or no held-out agreement to compare with). `alarm` is
    None when there are too few pairs for a verdict; the alarm in force then stays as it is."""
    learner, held = safe_learner(values), held_agreement(values)
    if learner is None or held is None:
        return None
    agreement, pairs, turns = fresh_agreement(learner)
    prior = drift_in_force(values) or {}
    was_up = bool(prior.get("alarm")) and prior.get("learner") == learner
    threshold = held - DRIFT_TOLERANCE
    if pairs < DRIFT_MIN_PAIRS:
        alarm = None
    elif was_up:
        alarm = agreement < held - DRIFT_CLEAR
    else:
        alarm = agreement < threshold
    return {
        "learner": learner,
        "held_agreement": round(held, 4),
        "agreement": None if pairs == 0 else round(agreement, 4),
        "threshold": round(threshold, 4),
        "clear_at": round(held - DRIFT_CLEAR, 4),
        "pairs": pairs,
        "turns": turns,
        "alarm": alarm,
    }


def check_drift(settings: Settings) -> dict | None:
    """The drift check after new grades: the alarm written to machine state (with its evidence) when it rises or
    clears. Returns the check (drift_status), or None when no auto-promote-safe learner is deployed."""
    from cairn_cli.clock import iso_now
    from cairn_cli.core.store import state

    values = state.get_many(KEYS, settings)
    status = drift_status(values)
    if status is None or status["alarm"] is None:
        return status
    prior = drift_in_force(values) or {}
    if bool(prior.get("alarm")) == status["alarm"] and prior.get("learner") == status["learner"]:
        return status
    why = f"agreement {status['agreement']:.3f} on {status['pairs']} fresh pairs " + (
        f"< {status['threshold']:.3f}: grade every turn again" if status["alarm"] else "recovered: demoted again"
    )
    state.put(DRIFT_KEY, {**status, "at": iso_now()}, settings, by="cairn hook stop", reason=why)
    return status


def grading_status(settings: Settings) -> dict:
    """What `cairn stats grading` shows: the rate in force and why, the learner it rests on, the drift alarm in
    force and the drift check as it would come out now."""
    from cairn_cli.core.store import state

    values = state.get_many(KEYS, settings)
    r, why = rate(values, settings)
    auto, auto_why = auto_rate(values)
    in_force = drift_in_force(values)
    learner = safe_learner(values)
    return {
        "grade_rate": r,
        "reason": why,
        "auto_rate": auto,
        "auto_reason": auto_why,
        "setting": str(settings.GRADE_RATE),
        "demoted_rate": DEMOTED_RATE,
        "learner": learner,
        "held_agreement": held_agreement(values) if learner else None,
        "drift_alarm": bool(in_force and in_force.get("alarm") and in_force.get("learner") == learner),
        "drift_in_force": in_force,
        "drift_now": drift_status(values),
    }
