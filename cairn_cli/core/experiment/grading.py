"""One prompt's grading (teacher demotion, the seed's Phase 4): once a learner is auto-promote-safe the prompt hook
asks the agent for rg grades on a sampled share of turns only, and on the others leaves the rg instruction out of the
rules. The rate is CAIRN_GRADE_RATE when set, else 1 until a deployed learner is auto-promote-safe, DEMOTED_RATE
after, and 1 again while the drift alarm (core/learning/demotion.py) is up. The method: docs/learning.md.

On the hot path: stdlib only, and it reads nothing but the machine-managed values the turn's A/B draw reads already
in one query (KEYS)."""

from __future__ import annotations

import hashlib
import re

from cairn_cli.config import Settings
from cairn_cli.errors import ConfigError

DEMOTED_RATE = 0.3  # the auto rate once a learner is auto-promote-safe (1.0 before, and on drift)
DRIFT_KEY = "grade_drift"  # the drift alarm in force: {learner, alarm, agreement, threshold, pairs, turns, at}
DEPLOY_KEY = "reranker_student"  # = core/learning/deploy.py's (a later stage, off the hot path: not imported)
EMBEDDER_KEY = "embedder"  # = core/store/embedders.py's: the live learned embedder and its card
KEYS = (DEPLOY_KEY, EMBEDDER_KEY, DRIFT_KEY)  # what `decide` reads (with the A/B's keys, in the turn's one query)

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
    """The deployed learner whose model card says it is auto-promote-safe, else None: the student (its version's
    name), else the live learned embedder (its name, <base>@<version>; not while another one is being re-embedded:
    the card then is the pending one's)."""
    record = values.get(DEPLOY_KEY)
    if isinstance(record, dict) and record.get("version"):
        card = record.get("card")
        if isinstance(card, dict) and card.get("auto_promote_safe") is True:
            return version_name(str(record["version"]))
    embedder = values.get(EMBEDDER_KEY)
    if isinstance(embedder, dict) and embedder.get("live") and not embedder.get("pending"):
        card = embedder.get("card")
        if isinstance(card, dict) and card.get("auto_promote_safe") is True and card.get("name") == embedder["live"]:
            return str(embedder["live"])
    return None


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


def drift_in_force(values: dict) -> dict | None:
    """The drift alarm in force (machine state DRIFT_KEY), or None."""
    value = values.get(DRIFT_KEY)
    return value if isinstance(value, dict) else None
