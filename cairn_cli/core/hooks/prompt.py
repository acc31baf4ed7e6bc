"""One prompt turn (`cairn hook prompt`, and `cairn rank`), in the order ../shared/DESIGN.md draws it: the A/B arm
(core/experiment/turn.py), the context window, ranking (core/ranking/rank.py, pure), the rules and memories
rendered into the injection block, and the delivery log. The daemon and the in-process fallback both run
`prompt_turn`; the caller prints `RankResult.injection` (the hook) or the block (`cairn rank`)."""

from __future__ import annotations

import _thread  # threading's lock without threading's import (the fallback's hot path logs through here)
import time
from dataclasses import dataclass, field

from cairn_cli import db
from cairn_cli.config import Settings
from cairn_cli.core.experiment import grading
from cairn_cli.core.experiment import rules as generation_rules
from cairn_cli.core.experiment.turn import TurnArm, draw
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking.context import ContextWindow, build_context_window
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.injection import format_block
from cairn_cli.core.ranking.rank import Clock, Ranking, RankQuery, rank
from cairn_cli.core.redact import scrub
from cairn_cli.core.store import deliveries
from cairn_cli.errors import DeadlineExceeded, InvalidInput, NotFound


@dataclass(kw_only=True)
class RankResult(Ranking):
    """The turn's ranking (its items: those the block holds; its notes: the turn's) and what the turn made of it."""

    session_id: str
    turn: int
    context: ContextWindow
    block: str
    delivery_ids: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the models' (daemon status shows them too)
    timings_ms: dict = field(default_factory=dict)
    rules: str = ""
    generation_version: str | None = None
    arm: str | None = None
    arm_instruction: str = ""
    grade_propensity: float | None = None  # a hook's prompt: the probability it asks for grades (the grade rate)
    grade_asked: bool | None = None  # whether this turn's rules ask for rg grades
    grade_rate_reason: str | None = None  # auto | env | drift

    @property
    def injection(self) -> str:
        """What the prompt hook prints: the rules, the memories, and last (after the part of the context that
        stays the same turn to turn) arm B's instruction; bounded by INJECTION_MAX_CHARS together."""
        return "\n".join(part for part in (self.rules, self.block, self.arm_instruction) if part)

    def as_dict(self) -> dict:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "context_key": self.context.key,
            "context_window": self.context.text,
            "reranker_model": self.reranker_model,
            "embed_model": self.embed_model,
            "ranker": self.ranker,
            "candidates": self.candidates,
            "dropped": self.dropped,
            "delivery_ids": self.delivery_ids,
            "notes": self.notes,
            "warnings": self.warnings,
            "timings_ms": self.timings_ms,
            "block": self.block,
            "rules": self.rules,
            "injection": self.injection,
            "generation_version": self.generation_version,
            "arm": self.arm,
            "grade_propensity": self.grade_propensity,
            "grade_asked": self.grade_asked,
            "grade_rate_reason": self.grade_rate_reason,
            "memories": [vars(i) for i in self.items],
        }


def prompt_turn(request: PromptRequest, settings: Settings, engine: RankEngine) -> RankResult:
    """Rank the memories in scope for the prompt (+ transcript), render the injection, and log each delivery."""
    clock = Clock()  # the arm's read counts into the "context" lap
    k = _checked_k(request, settings)
    turn = request.turn if request.turn is not None else deliveries.next_turn(request.session_id, settings)
    arm = _arm(request, turn, settings)
    notes: list[str] = []
    context = _context(request, settings, notes)
    clock.lap("context")
    query = RankQuery(context, k, request.scope, request.strict_scope, explore=request.hook is not None)
    ranking = rank(query, settings, engine, clock)
    result = _render(request, settings, turn, arm, ranking, context, notes, engine)
    if request.commit_deadline is not None and time.time() > request.commit_deadline:
        raise DeadlineExceeded(
            "the caller stopped waiting before the deliveries were logged", "raise CAIRN_DAEMON_TIMEOUT_MS"
        )
    if request.log:
        try:
            log_turn(request, result, ranking.scope or GLOBAL_SCOPE, settings)
        except db.errors() as exc:  # a read-only or broken delivery log: inject anyway, say what was not logged
            result.delivery_ids = []
            result.notes.append(scrub(f"not logged (deliveries, hook state): {type(exc).__name__}: {exc}"))
    clock.lap("log")
    result.timings_ms = clock.laps
    return result


def _checked_k(request: PromptRequest, settings: Settings) -> int:
    """The request's k (else CAIRN_RANK_K), once the request and the exploration rate are known to be sane."""
    k = request.k if request.k is not None else settings.RANK_K
    if k < 1:
        raise InvalidInput(f"-k must be at least 1 (got {k})", "pass -k 5")
    if not request.session_id or not request.session_id.strip():
        raise InvalidInput("the session id is empty", "pass --session NAME")
    if not 0.0 <= settings.EXPLORE_RATE <= 1.0:
        raise InvalidInput(
            f"CAIRN_EXPLORE_RATE must be between 0 and 1 (got {settings.EXPLORE_RATE:g})",
            "set CAIRN_EXPLORE_RATE=0.1, or 0 to turn exploration off",
        )
    grading.rate_setting(settings)  # a bad CAIRN_GRADE_RATE is refused before anything is ranked
    return k


def _arm(request: PromptRequest, turn: int, settings: Settings) -> TurnArm | None:
    """The live rules and this prompt's A/B arm (the hook's prompts: the write-side A/B), when the turn prints the
    rules or is logged (the version its memories carry); None otherwise."""
    if not (request.with_rules or request.log):
        return None
    is_subagent = bool(request.hook.get("is_subagent")) if request.hook is not None else False
    return draw(request.session_id, turn, hook=request.hook is not None, is_subagent=is_subagent, settings=settings)


def _context(request: PromptRequest, settings: Settings, notes: list[str]) -> ContextWindow:
    """The context window; for a hook, an unreadable transcript is a note and the prompt alone is ranked."""
    try:
        return build_context_window(
            request.prompt,
            request.transcript,
            max_turns=settings.CONTEXT_MAX_TURNS,
            max_chars=settings.CONTEXT_MAX_CHARS,
            max_bytes=settings.TRANSCRIPT_MAX_BYTES,
        )
    except NotFound as exc:
        if request.hook is None:
            raise
        notes.append(f"transcript ignored: {exc.message}")
        return build_context_window(
            request.prompt, None, max_turns=settings.CONTEXT_MAX_TURNS, max_chars=settings.CONTEXT_MAX_CHARS
        )


def _render(
    request: PromptRequest,
    settings: Settings,
    turn: int,
    arm: TurnArm | None,
    ranking: Ranking,
    context: ContextWindow,
    notes: list[str],
    engine: RankEngine,
) -> RankResult:
    """The result: the rules, the memories and the block within the injection limit (a memory the block cannot
    hold is not delivered), arm B's instruction last."""
    grade = arm.grade if arm else None
    rules_text = ""
    if request.with_rules and arm:
        live = arm.live
        if grade is not None and not grade.asked:  # a turn the teacher is not asked to grade: no rg instruction
            live = generation_rules.Rules(live.version, grading.ungraded_rules(live.text))
        rules_text = generation_rules.render(live, request.scope or GLOBAL_SCOPE)
    b_text = arm.b_text if arm else ""
    budget = settings.INJECTION_MAX_CHARS - sum(len(t) + 1 for t in (rules_text, b_text) if t)
    block = format_block(
        [vars(i) for i in ranking.items],
        session=request.session_id,
        turn=turn,
        context_key=context.key,
        max_chars=budget,
    )
    return RankResult(
        **{
            **vars(ranking),
            "items": ranking.items[: block.count("<memory ")],
            # scrubbed here, once: a note can quote a scope, a path or an error, and the hook logs them unscanned
            "notes": [scrub(n) for n in (*engine.notes, *context.notes, *notes, *ranking.notes)],
        },
        session_id=request.session_id,
        turn=turn,
        context=context,
        block=block,
        warnings=list(engine.warnings),
        rules=rules_text,
        generation_version=arm.version if arm else None,
        arm=arm.arm if arm else None,
        arm_instruction=b_text,
        grade_propensity=grade.propensity if grade else None,
        grade_asked=grade.asked if grade else None,
        grade_rate_reason=grade.reason if grade else None,
    )


_LOGGING = _thread.allocate_lock()  # one turn logged at a time in a process (the daemon ranks many at once)


def log_turn(request: PromptRequest, result: RankResult, scope: str, settings: Settings) -> None:
    """The one place a ranking is written: a delivery per shown memory with its provenance, and the turn's
    hook_state (prompt, scope, rules version, arm: what Stop and engagement need later), in one transaction.

    One turn at a time in a process: SQLite has one writer, and a transaction that reads before it writes (the
    hook_state upsert) fails at once, instead of waiting, when another connection committed in between. Nothing is
    committed past `request.commit_deadline` (the caller has given up on us and logs the turn itself): the wait
    for the turn is bounded by it and it is checked again, the rows written, before the commit."""
    deadline = request.commit_deadline
    if not _LOGGING.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.time())):
        raise DeadlineExceeded("the caller stopped waiting while another turn was being logged")
    try:
        _write_turn(request, result, scope, settings)
    finally:
        _LOGGING.release()


def _write_turn(request: PromptRequest, result: RankResult, scope: str, settings: Settings) -> None:
    from cairn_cli.core.store import hookstate

    with db.transaction("ephemeral"):
        if result.items:
            result.delivery_ids = deliveries.record(
                [
                    deliveries.DeliveryInput(
                        session_id=request.session_id,
                        turn=result.turn,
                        memory_id=i.id,
                        context_window=result.context.text,
                        context_key=result.context.key,
                        rank=i.rank,
                        final_score=i.score,
                        score_components=i.components,
                        reranker_model=result.reranker_model,
                        ranker=result.ranker,
                        layer=request.layer,
                        scope=scope,
                        arm=result.arm,
                        grade_propensity=result.grade_propensity,
                        grade_asked=result.grade_asked,
                        agent=request.agent,
                    )
                    for i in result.items
                ],
                settings,
            )
        hookstate.record_turn(
            request.session_id,
            result.turn,
            context_key=result.context.key,
            hook={
                **(request.hook or {}),
                "arm": result.arm,
                "prompt": result.context.prompt,
                "scope": request.scope,
                "generation_version": result.generation_version,
                "source_ref": result.generation_version,
                "delivered": [i.id for i in result.items],
                # the turn's grading: the probability it asked for grades (inverse-propensity weights) and whether
                **(
                    {"grade_propensity": result.grade_propensity, "grade_asked": result.grade_asked}
                    if result.grade_propensity is not None
                    else {}
                ),
                # a prompt that injects nothing says why, so that stats can count abstentions
                "abstained": None
                if result.items
                else next((n for n in result.notes if n.startswith("abstained")), "abstained: no memory in scope"),
            },
        )
        if request.commit_deadline is not None and time.time() > request.commit_deadline:
            raise DeadlineExceeded("the caller stopped waiting before the turn was committed")  # rolled back
