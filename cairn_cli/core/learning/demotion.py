"""Teacher demotion (the seed's Phase 4): once a learner is auto-promote-safe, the prompt hook asks the agent to
grade only a sampled share of turns; the rate rises back to 1.0 when the live learner stops agreeing with the fresh
grades (the drift alarm). `CAIRN_GRADE_RATE` always wins. The method is written out in docs/learning.md.

The prompt hook's part (`decide`, `ungraded_rules`) is on the hot path: stdlib only, and it reads nothing but the
machine-managed values the turn's A/B draw reads already in one query (KEYS). The drift check runs after a Stop that
applied grades (off the hot path) and writes the alarm to machine state only when it changes."""

from __future__ import annotations

import hashlib
import re

from cairn_cli.config import Settings
from cairn_cli.errors import ConfigError

DEMOTED_RATE = 0.3  # the auto rate once a learner is auto-promote-safe (1.0 before, and on drift)
DRIFT_KEY = "grade_drift"  # the drift alarm in force: {learner, alarm, agreement, threshold, pairs, turns, at}
DEPLOY_KEY = "reranker_student"  # = core/learning/deploy.py's (not imported: that module is off the hot path)
KEYS = (DEPLOY_KEY, DRIFT_KEY)  # what `decide` reads (with the A/B's keys, in the turn's one query)
DRIFT_TURNS = 50  # the drift check reads the grades of the live learner's last this many graded turns
DRIFT_MIN_PAIRS = 20  # fewer pairs than this: no verdict (the alarm stays as it is)
DRIFT_MIN_GAP = 2  # a pair is two memories of one turn whose grades differ by at least this (training's default)
DRIFT_TOLERANCE = 0.08  # the alarm rises below the learner's held-out agreement minus this ...
DRIFT_CLEAR = 0.04  # ... and clears at or above the held-out agreement minus this (no flapping at the edge)

AUTO, ENV, DRIFT = "auto", "env", "drift"  # why a rate is what it is


class GradeDecision:
    """One turn's grading: the rate in force, why (auto | env | drift), and whether this turn asks for grades.
    `propensity` is the probability the turn was asked (= the rate): what inverse-propensity weighting divides by."""

    __slots__ = ("asked", "rate", "reason")

    def __init__(self, rate: float, reason: str, asked: bool):
        self.rate, self.reason, self.asked = rate, reason, asked

    @property
    def propensity(self) -> float:
        return self.rate

    def as_dict(self) -> dict:
        return {"grade_rate": self.rate, "grade_rate_reason": self.reason, "grade_asked": self.asked}


def rate_setting(settings: Settings) -> float | None:
    """CAIRN_GRADE_RATE as a number in 0..1, or None when it is `auto` (the default). Raises ConfigError."""
    raw = str(settings.GRADE_RATE).strip().lower()
    if raw in ("", "auto"):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # nan fails both
        raise ConfigError(
            f"CAIRN_GRADE_RATE={settings.GRADE_RATE!r} is not auto or a number between 0 and 1",
            "set CAIRN_GRADE_RATE=auto, or e.g. CAIRN_GRADE_RATE=0.3 (1: grade every turn)",
        )
    return value


def safe_learner(values: dict) -> str | None:
    """The deployed learner's version name when its model card says it is auto-promote-safe, else None."""
    record = values.get(DEPLOY_KEY)
    if not isinstance(record, dict) or not record.get("version"):
        return None
    card = record.get("card")
    if not isinstance(card, dict) or card.get("auto_promote_safe") is not True:
        return None
    return version_name(str(record["version"]))


def version_name(path: str) -> str:
    """A student version's name (its directory's): the same on every machine of a team, wherever it is installed."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def auto_rate(values: dict) -> tuple[float, str]:
    """(the automatic rate, why): 1.0 until a learner is auto-promote-safe, DEMOTED_RATE after, 1.0 on drift."""
    learner = safe_learner(values)
    if learner is None:
        return 1.0, AUTO
    drift = values.get(DRIFT_KEY)
    if isinstance(drift, dict) and drift.get("alarm") and drift.get("learner") == learner:
        return 1.0, DRIFT
    return DEMOTED_RATE, AUTO


def rate(values: dict, settings: Settings) -> tuple[float, str]:
    """(the grade rate in force, why): CAIRN_GRADE_RATE when set, else the automatic rate."""
    forced = rate_setting(settings)
    return (forced, ENV) if forced is not None else auto_rate(values)


def sampled(session_id: str, turn: int, rate: float) -> bool:
    """Whether the turn is asked for grades at `rate`: a hash of (session, turn), so a retried hook decides the
    same, and a share `rate` of turns is asked."""
    if rate >= 1.0:
        return True
    digest = hashlib.sha256(f"grade?\0{session_id}\0{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def decide(values: dict, settings: Settings, session_id: str, turn: int) -> GradeDecision:
    """The turn's grading from machine-managed `values` (state.get_many of at least KEYS)."""
    r, why = rate(values, settings)
    return GradeDecision(r, why, sampled(session_id, turn, r))


_RG_LINE = re.compile(r"^[ \t]*-[ \t]*rg[ \t]*:.*(?:\n|$)", re.MULTILINE)
_RG_EXAMPLE = re.compile(r',?[ \t]*"rg"[ \t]*:[ \t]*\[[^\]]*\]')
NOT_ASKED = '- rg: not asked this turn; leave "rg" out of the [cm] block.'


def ungraded_rules(text: str) -> str:
    """The rules of a turn that asks for no grades: the rg instruction and the "rg" of the example are left out,
    and one line says so (the agent saw the instruction in earlier turns of the conversation)."""
    stripped = _RG_EXAMPLE.sub("", _RG_LINE.sub("", text)).replace("[cm]{, ", "[cm]{")
    return f"{stripped.rstrip()}\n{NOT_ASKED}"


# -- the drift alarm (off the hot path) -------------------------------------------------------------------------


def fresh_agreement(learner: str, *, turns: int = DRIFT_TURNS, min_gap: int = DRIFT_MIN_GAP) -> tuple[float, int, int]:
    """(pairwise agreement, pairs, turns) of the live learner's logged scores with the grades of its last `turns`
    graded turns: within a turn, each two graded deliveries whose grades differ by >= min_gap are a pair, won when
    the learner's logged score (score_components' reranker_score) orders them like the grades (a tie counts half).
    nan when there is no pair."""
    from peewee import fn

    from cairn_cli.db.tables import MemoryDelivery as D

    # the learner's name as the pipeline logs it: "student:<its resolved version directory>"
    graded = D.grade.is_null(False) & D.reranker_model.startswith("student:") & D.reranker_model.endswith(f"/{learner}")
    recent = (  # the newest graded turns, by their newest delivery
        D.select(D.session_id, D.turn)
        .where(graded)
        .group_by(D.session_id, D.turn)
        .order_by(fn.MAX(D.id).desc())
        .limit(turns)
    )
    chosen = {(r.session_id, r.turn) for r in recent}
    if not chosen:
        return float("nan"), 0, 0
    by_turn: dict[tuple[str, int], list[tuple[int, float]]] = {}
    sessions = sorted({s for s, _ in chosen})
    for r in D.select(D.session_id, D.turn, D.grade, D.score_components).where(graded & D.session_id.in_(sessions)):
        if (r.session_id, r.turn) not in chosen:
            continue
        score = (r.score_components or {}).get("reranker_score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            by_turn.setdefault((r.session_id, r.turn), []).append((int(r.grade), float(score)))
    won = pairs = 0.0
    for rows in by_turn.values():
        for ga, sa in rows:
            for gb, sb in rows:
                if ga - gb >= min_gap:
                    pairs += 1
                    won += 1.0 if sa > sb else 0.5 if sa == sb else 0.0
    return (won / pairs if pairs else float("nan")), int(pairs), len(chosen)


def held_agreement(values: dict) -> float | None:
    """The deployed learner's own held-out pairwise agreement (its model card's), or None."""
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
    prior = values.get(DRIFT_KEY) if isinstance(values.get(DRIFT_KEY), dict) else {}
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
    prior = values.get(DRIFT_KEY) if isinstance(values.get(DRIFT_KEY), dict) else {}
    if bool(prior.get("alarm")) == status["alarm"] and prior.get("learner") == status["learner"]:
        return status
    why = (
        f"agreement {status['agreement']:.3f} on {status['pairs']} fresh pairs "
        + (f"< {status['threshold']:.3f}: grade every turn again" if status["alarm"] else "recovered: demoted again")
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
    in_force = values.get(DRIFT_KEY) if isinstance(values.get(DRIFT_KEY), dict) else None
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
