"""`rank()`: one ranking from request to result, and the one place a ranking is logged.

context window -> the engine's warm table -> the pure pipeline (core/ranking/pipeline.py) -> the injection block
(the live generation rules, the memories, arm B's instruction) -> `log_turn`: the deliveries with their
provenance and the turn's hook_state, in one transaction.
"""

from __future__ import annotations

import _thread  # threading's lock without threading's import (the fallback's hot path logs through here)
import time
from dataclasses import dataclass, field

from cairn_cli import db
from cairn_cli.config import Settings
from cairn_cli.core.ranking.context import ContextWindow, build_context_window
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.injection import format_block
from cairn_cli.core.ranking.pipeline import Selection, rerank, shortlist
from cairn_cli.core.ranking.profiles import composite_floor
from cairn_cli.core.ranking.profiles import profile as get_profile
from cairn_cli.core.store import deliveries
from cairn_cli.core.text import GLOBAL_SCOPE
from cairn_cli.errors import DeadlineExceeded, InvalidInput, NotFound


@dataclass
class RankRequest:
    prompt: str
    session_id: str = "cli"
    scope: str | None = None
    transcript: str | None = None
    k: int | None = None
    layer: str = "prompt"
    turn: int | None = None
    log: bool = True
    commit_deadline: float | None = None  # epoch seconds: past it, log nothing (the caller has fallen back)
    hook: dict | None = None  # set by `cairn hook prompt`: recorded in hook_state; a bad transcript is a note
    strict_scope: bool = True  # False: an unknown scope ranks the global memories (a new project) instead of failing
    with_rules: bool = False  # prepend the live generation rules to the block (what the hook prints)


@dataclass
class RankedMemory:
    id: int
    content: str
    kind: str
    scope: str
    confidence: float
    source_ref: str | None
    rank: int
    score: float
    components: dict


@dataclass
class RankResult:
    session_id: str
    turn: int
    context: ContextWindow
    items: list[RankedMemory]
    block: str
    reranker_model: str
    ranker: str
    embed_model: str | None
    candidates: int
    dropped: dict = field(default_factory=dict)
    delivery_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the models' (daemon status shows them too)
    timings_ms: dict = field(default_factory=dict)
    rules: str = ""
    generation_version: str | None = None
    arm: str | None = None
    arm_instruction: str = ""

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
            "memories": [vars(i) for i in self.items],
        }


def rank(request: RankRequest, settings: Settings, engine: RankEngine) -> RankResult:
    """Rank the memories in scope for the prompt (+ transcript), format the block, and log each delivery."""
    clock = _Clock()
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
    notes: list[str] = []
    context = _context(request, settings, notes)
    clock.lap("context")
    entry = engine.table(settings)
    clock.lap("table")
    scope = request.scope
    if scope and scope not in entry.scopes:
        if request.strict_scope:
            raise InvalidInput(
                f"unknown scope {scope!r} (known: {', '.join(entry.scopes)})",
                "pass one of the known scopes or add memories with --scope first",
            )
        notes.append(f"scope {scope!r} has no memories yet: global memories only")
        scope = GLOBAL_SCOPE
    query_vec = None
    if engine.encoder is not None and len(entry.table):
        query_vec = engine.embed([context.text])[0]
        clock.lap("embed")
    profile = get_profile(settings)
    floor, _ = composite_floor(settings, profile.name, engine.embed_model)
    with engine.reading(entry):  # the table as it is: no refresh applies rows while the composite reads it
        short = shortlist(
            entry.table,
            context.text,
            None if query_vec is None else entry.table.similarities(query_vec),
            scope=scope,
            k=k,
            settings=settings,
            reranker=engine.reranker,
            ranker=engine.ranker,
            prompt=context.prompt,
            profile=profile,
            floor=floor,
            explore=settings.EXPLORE_RATE if request.hook is not None else 0.0,  # hook prompts only: they get graded
        )
        prefiltered, in_scope = entry.prefiltered(scope), entry.in_scope_count(scope)
    selection = rerank(short)  # the cross-encoder's stage, the table no longer held
    clock.lap("score")
    if selection.reranked:  # the composite's scoring and the rerank stage apart: the plan's budget bounds the latter
        clock.split("score", "rerank", selection.rerank_ms)
    notes.extend(selection.notes)
    dropped = {"prefilter": prefiltered, **selection.dropped}
    result = _compose(request, settings, context, selection, dropped, in_scope + prefiltered, engine, notes)
    if request.commit_deadline is not None and time.time() > request.commit_deadline:
        raise DeadlineExceeded(
            "the caller stopped waiting before the deliveries were logged", "raise CAIRN_DAEMON_TIMEOUT_MS"
        )
    if request.log:
        try:
            log_turn(request, result, scope or GLOBAL_SCOPE, settings)
        except db.errors() as exc:  # a read-only or broken delivery log: inject anyway, say what was not logged
            result.delivery_ids = []
            result.notes.append(f"not logged (deliveries, hook state): {type(exc).__name__}: {exc}")
    clock.lap("log")
    result.timings_ms = clock.laps
    return result


def _context(request: RankRequest, settings: Settings, notes: list[str]) -> ContextWindow:
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


class _Clock:
    """Per-stage wall time, reported with every ranking (where the hot path's milliseconds go)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round((now - self.last) * 1000, 2)
        self.last = now

    def split(self, name: str, part: str, part_ms: float) -> None:
        """Move `part_ms` of lap `name` into a lap of its own, `part`."""
        self.laps[part] = round(part_ms, 2)
        self.laps[name] = round(max(0.0, self.laps[name] - part_ms), 2)


def _compose(
    request: RankRequest,
    settings: Settings,
    context: ContextWindow,
    selection: Selection,
    dropped: dict,
    total: int,
    engine: RankEngine,
    notes: list[str],
) -> RankResult:
    """The result: the turn, this prompt's A/B arm, the rules, the memories and the block within the injection
    limit (a memory the block cannot hold is not delivered)."""
    from cairn_cli.core.experiment import rules as generation_rules

    turn = request.turn if request.turn is not None else deliveries.next_turn(request.session_id, settings)
    rules_text, version, arm, b_text = "", None, None, ""
    if request.with_rules or request.log:
        live = generation_rules.live(settings)
        version = live.version
        if request.hook is not None:  # the write-side A/B: this prompt's arm, and the version its memories carry
            from cairn_cli.core.experiment import ab

            arm, version, instruction = ab.assign(
                request.session_id,
                turn,
                is_subagent=bool(request.hook.get("is_subagent")),
                settings=settings,
                live=live,
            )
            b_text = ab.render_b(instruction, version) if instruction else ""
        if request.with_rules:
            rules_text = generation_rules.render(live, request.scope or GLOBAL_SCOPE)
    embed_model = engine.encoder.name if engine.encoder else None
    items = []
    for position, s in enumerate(selection.chosen, start=1):
        c = s.candidate
        s.components["embed_model"] = embed_model
        s.components["weights"] = selection.weights
        items.append(
            RankedMemory(
                id=c.id,
                content=c.content,
                kind=c.kind,
                scope=c.scope,
                confidence=c.confidence,
                source_ref=c.source_ref,
                rank=position,
                score=round(s.score, 6),
                components=s.components,
            )
        )
    budget = settings.INJECTION_MAX_CHARS - sum(len(t) + 1 for t in (rules_text, b_text) if t)
    block = format_block(
        [vars(i) for i in items], session=request.session_id, turn=turn, context_key=context.key, max_chars=budget
    )
    return RankResult(
        session_id=request.session_id,
        turn=turn,
        context=context,
        items=items[: block.count("<memory ")],
        block=block,
        reranker_model=selection.reranker_model,
        ranker=engine.ranker,
        embed_model=embed_model,
        candidates=total,
        dropped=dropped,
        notes=list(engine.notes) + context.notes + notes,
        warnings=list(engine.warnings),
        rules=rules_text,
        generation_version=version,
        arm=arm,
        arm_instruction=b_text,
    )


_LOGGING = _thread.allocate_lock()  # one turn logged at a time in a process (the daemon ranks many at once)


def log_turn(request: RankRequest, result: RankResult, scope: str, settings: Settings) -> None:
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


def _write_turn(request: RankRequest, result: RankResult, scope: str, settings: Settings) -> None:
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
                # a prompt that injects nothing says why, so that stats can count abstentions
                "abstained": None
                if result.items
                else next((n for n in result.notes if n.startswith("abstained")), "abstained: no memory in scope"),
            },
        )
        if request.commit_deadline is not None and time.time() > request.commit_deadline:
            raise DeadlineExceeded("the caller stopped waiting before the turn was committed")  # rolled back
