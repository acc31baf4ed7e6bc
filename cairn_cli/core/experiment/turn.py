"""One prompt's side of the experiment: the live generation rules and, for a hook's prompt, its A/B arm (ab.py)
and whether it asks the agent for grades (core/learning/grading.py), read from machine-managed state in one
query."""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.experiment import grading
from cairn_cli.core.experiment import rules as generation_rules
from cairn_cli.core.store import state


@dataclass(frozen=True)
class TurnArm:
    live: generation_rules.Rules
    arm: str | None  # "A", "B", or None (no A/B for this prompt)
    version: str  # the version the turn's memories carry (source_ref)
    b_text: str  # arm B's instruction block, "" unless B
    grade: grading.GradeDecision | None = None  # a hook's prompt: the grade rate and whether this turn asks


def draw(session_id: str, turn: int, *, hook: bool, is_subagent: bool, settings: Settings) -> TurnArm:
    """The live rules, and for a hook's prompt (`hook`: the write-side A/B) its arm, the version its memories
    carry and its grading (a subagent's prompt is never graded: none asked); any other prompt is stamped with the
    live rules' version."""
    if not hook:
        live = generation_rules.live(settings)
        return TurnArm(live, None, live.version, "")
    from cairn_cli.core.experiment import ab

    values = state.get_many(generation_rules.KEYS + ab.KEYS + grading.KEYS, settings)
    live = generation_rules.live_from(values)
    arm, version, instruction = ab.draw(
        ab.arms_from(values, settings, live), session_id, turn, is_subagent=is_subagent, settings=settings
    )
    grade = None if is_subagent else grading.decide(values, settings, session_id, turn)
    return TurnArm(live, arm, version, ab.render_b(instruction, version) if instruction else "", grade)
