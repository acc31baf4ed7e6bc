"""Behavioural engagement: did the response actually USE a delivered memory? (the primary, non-circular label)

Lexical test: the memory's distinctive terms (stemmed, not stop words, not generic coding chatter) and the
response's terms, each minus the terms already in the user's prompt (echoing the user is not use); their overlap
coefficient (shared terms over the smaller set: for the usual reply, longer than the memory, the share of the
memory it uses) is `engaged_score`, engaged at ENGAGEMENT_LEXICAL_MIN. The defaults come from the LoCoMo benchmark
(scripts/bench_engagement.py, bench/engagement.md), not taste: on held-out conversations lexical 0.25 is the dev
pick (P 0.66 / R 0.59 against delivered-like negatives), and the combined rule with the semantic 0.55 is within
0.003 F1 of the dev pick (0.60).

Semantic second chance: when the lexical test fails, the cosine between the memory and the best-matching chunk
of the response (the daemon's embedder); engaged at ENGAGEMENT_SEMANTIC_MIN. The row's `engaged_method` says
which test decided it, because the two scores live on different scales and must never be pooled into one rate:
`semantic` rows are exactly the ones the second chance rescued (score = cosine); every other decided row is
`lexical` (score = the overlap ratio). Both raw measurements are kept (`engaged_lexical`, `engaged_semantic`) so
that thresholds can be calibrated against grades later.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.text import STOP_WORDS, stem, term_set

LEXICAL, SEMANTIC = "lexical", "semantic"
SEMANTIC_BACKFILL = "semantic-backfill"  # the second chance run late over history (core/hooks/backfill.py)
METHODS = (LEXICAL, SEMANTIC, SEMANTIC_BACKFILL)  # the measurement bases: a rate is never pooled across them
ENGAGEMENT_KEY = "engagement_semantic_min"  # machine state: the threshold calibrate-floor fitted to the grades
THRESHOLD_KEY = f"{ENGAGEMENT_KEY}:semantic-backfill"  # the backfill's, when calibrated on backfilled rows

# Words a coding agent's response contains whatever it is about: sharing them is not evidence of use.
GENERIC_WORDS = frozenset(
    [
        "add",
        "added",
        "adding",
        "also",
        "answer",
        "approach",
        "available",
        "back",
        "better",
        "call",
        "called",
        "case",
        "change",
        "changed",
        "changes",
        "check",
        "code",
        "command",
        "commands",
        "content",
        "current",
        "default",
        "different",
        "done",
        "error",
        "example",
        "fix",
        "fixed",
        "following",
        "good",
        "help",
        "here",
        "issue",
        "just",
        "keep",
        "know",
        "like",
        "line",
        "lines",
        "look",
        "looks",
        "make",
        "makes",
        "name",
        "new",
        "next",
        "note",
        "now",
        "number",
        "option",
        "output",
        "part",
        "point",
        "problem",
        "question",
        "read",
        "result",
        "right",
        "run",
        "running",
        "see",
        "set",
        "should",
        "show",
        "simple",
        "start",
        "step",
        "sure",
        "thing",
        "things",
        "think",
        "time",
        "try",
        "true",
        "false",
        "update",
        "used",
        "value",
        "values",
        "want",
        "way",
        "work",
        "works",
        "write",
    ]
)
_GENERIC_STEMS = frozenset(stem(w) for w in GENERIC_WORDS) | frozenset(stem(w) for w in STOP_WORDS)

# texts -> vectors, or (model name, vectors): then a learned embedder's cosines are calibrated to its base's scale
Embed = Callable[[list[str]], "Sequence[Sequence[float]] | tuple[str, Sequence[Sequence[float]]] | None"]


def distinctive_terms(content: str, keywords: Sequence[str] = ()) -> set[str]:
    """Stemmed content terms of a memory (its keywords included), generic and stop words dropped."""
    return {t for t in term_set(" ".join([content, *keywords])) if t not in _GENERIC_STEMS}


def lexical_overlap(
    memory_terms: set[str], response_terms: set[str], prompt_terms: set[str]
) -> tuple[float, list[str]]:
    """(overlap coefficient of the memory's distinctive terms and the response's terms, the prompt's removed from
    both; the terms used). The denominator is the smaller side: for a reply longer than the memory (the usual case)
    it is the share of the memory the reply uses; for a short reply, the share of what it says that came from the
    memory. A memory whose every term was in the prompt cannot show use lexically: 0."""
    candidates = memory_terms - prompt_terms
    said = response_terms - prompt_terms
    if not candidates or not said:
        return 0.0, []
    used = sorted(candidates & said)
    return len(used) / min(len(candidates), len(said)), used


_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")


def chunks(text: str, size: int) -> list[str]:
    """The response cut into chunks of at most `size` characters: sentences and lines joined within a paragraph,
    never across one (a paragraph is a unit of meaning); an over-long sentence is cut."""
    out: list[str] = []
    for paragraph in _PARAGRAPH.split(text or ""):
        current = ""
        for piece in (p.strip() for p in _SENTENCE.split(paragraph)):
            if not piece:
                continue
            if current and len(current) + 1 + len(piece) > size:
                out.append(current)
                current = ""
            while len(piece) > size:
                out.append(piece[:size])
                piece = piece[size:]
            current = f"{current} {piece}".strip()
        if current:
            out.append(current)
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(y * y for y in b) ** 0.5
    return dot / (na * nb) if na and nb else 0.0


@dataclass
class MemoryText:
    memory_id: int
    content: str
    keywords: list[str] = field(default_factory=list)
    delivery_id: int | None = None


@dataclass
class Engagement:
    """Whether one delivered memory was used by the response, which test decided it, and both measurements."""

    memory_id: int
    delivery_id: int | None
    engaged: bool
    score: float
    method: str
    lexical: float
    semantic: float | None
    terms_used: list[str] = field(default_factory=list)


def decide(
    memories: list[MemoryText],
    response: str,
    prompt: str,
    *,
    lexical_min: float,
    semantic_min: float,
    chunk_chars: int,
    embed: Embed | None = None,
) -> tuple[list[Engagement], list[str]]:
    """Decide engagement for each memory. `embed` (texts -> unit or raw vectors, or None when no embedder
    answers) enables the semantic second chance. Returns the decisions and notes."""
    notes: list[str] = []
    response_terms, prompt_terms = term_set(response), term_set(prompt or "")
    decisions = []
    for m in memories:
        ratio, used = lexical_overlap(distinctive_terms(m.content, m.keywords), response_terms, prompt_terms)
        decisions.append(
            Engagement(
                m.memory_id, m.delivery_id, ratio >= lexical_min, round(ratio, 6), LEXICAL, round(ratio, 6), None, used
            )
        )
    second = [i for i, d in enumerate(decisions) if not d.engaged]
    if second and embed is not None:
        best, why = semantic_best([memories[i].content for i in second], response, chunk_chars, embed)
        if why:
            notes.append(f"semantic second chance skipped: {why}")
        for i, cos in zip(second, best or []):
            d = decisions[i]
            d.semantic = round(cos, 6)
            if cos >= semantic_min:
                d.engaged, d.method, d.score = True, SEMANTIC, round(cos, 6)
    elif second and embed is None:
        notes.append("semantic second chance disabled")
    return decisions, notes


def semantic_best(
    contents: list[str], response: str, chunk_chars: int, embed: Embed
) -> tuple[list[float] | None, str | None]:
    """(each memory's cosine with its best-matching chunk of the response, None and why when it cannot be
    measured): the semantic test of the live second chance and of the backfill (core/hooks/backfill.py)."""
    parts = chunks(response, chunk_chars)
    if not contents or not parts:
        return None, None if not contents else "the response has no text to compare"
    got = embed(contents + parts)
    model = None
    if isinstance(got, tuple):  # (model, vectors): an embedder that names its model (dispatch.embed_with_model)
        model, got = got
    vectors = got
    if vectors is None:
        return None, "no embedder answered (lexical only)"
    if len(vectors) != len(contents) + len(parts):
        return None, f"the embedder answered {len(vectors)} vectors for {len(contents) + len(parts)} texts"
    mem_vecs, chunk_vecs = vectors[: len(contents)], vectors[len(contents) :]
    best = [max(cosine(vec, c) for c in chunk_vecs) for vec in mem_vecs]
    if model is not None:
        from cairn_cli.core.store.embedders import to_base

        # a learned embedder's cosines on its base's scale, the one ENGAGEMENT_SEMANTIC_MIN was fit on
        best = [float(to_base(model, cos, "query")) for cos in best]
    return best, None


@dataclass
class EngagementReport:
    session_id: str
    turn: int
    decisions: list[Engagement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "notes": self.notes,
            "engaged": sum(d.engaged for d in self.decisions),
            "decided": len(self.decisions),
            "decisions": [vars(d) for d in self.decisions],
        }


def turn_memories(session_id: str, turn: int) -> list[MemoryText]:
    """The memories delivered in that turn, with their delivery ids (stores already open)."""
    from cairn_cli.db.tables import Memory, MemoryDelivery

    rows = list(
        MemoryDelivery.select()
        .where((MemoryDelivery.session_id == session_id) & (MemoryDelivery.turn == turn))
        .order_by(MemoryDelivery.rank)
    )
    mems = {m.id: m for m in Memory.select().where(Memory.id.in_([r.memory_id for r in rows]))} if rows else {}
    return [
        MemoryText(r.memory_id, mems[r.memory_id].content, list(mems[r.memory_id].keywords), r.id)
        for r in rows
        if r.memory_id in mems
    ]


def engagement_semantic_min(settings: Settings) -> float:
    """The semantic-engagement threshold in force: the calibrated one in machine state, else the configured one."""
    from cairn_cli.core.store import state

    calibrated = state.get(ENGAGEMENT_KEY, settings)
    return settings.ENGAGEMENT_SEMANTIC_MIN if calibrated is None else float(calibrated)


def backfill_threshold(settings: Settings) -> tuple[float, str]:
    """(the threshold, where it came from): calibrated on backfilled rows, else the live second chance's."""
    from cairn_cli.core.store import state

    own = state.get(THRESHOLD_KEY, settings)
    if own is not None:
        return float(own), f"calibrated on backfilled rows ({THRESHOLD_KEY})"
    live = engagement_semantic_min(settings)
    calibrated = state.get(ENGAGEMENT_KEY, settings) is not None
    return live, "the live second chance's, calibrated" if calibrated else "CAIRN_ENGAGEMENT_SEMANTIC_MIN"


def engagement_decisions(
    memories: list[MemoryText], response: str, prompt: str, settings: Settings, embed: Embed | None
) -> tuple[list[Engagement], list[str]]:
    """`decide` with the thresholds in force (the semantic one calibrated, else configured; only when enabled)."""
    from cairn_cli.core.labels.cm import strip_block

    return decide(
        memories,
        strip_block(response),
        prompt,
        lexical_min=settings.ENGAGEMENT_LEXICAL_MIN,
        semantic_min=engagement_semantic_min(settings),
        chunk_chars=settings.ENGAGEMENT_CHUNK_CHARS,
        embed=embed if settings.ENGAGEMENT_SEMANTIC_ENABLED else None,
    )


def write_decisions(decisions: list[Engagement]) -> None:
    """Store each decision on its delivery row (the caller holds the transaction)."""
    from cairn_cli.db.tables import MemoryDelivery

    now = utcnow()
    for d in decisions:
        MemoryDelivery.update(
            engaged=d.engaged,
            engaged_score=d.score,
            engaged_method=d.method,
            engaged_lexical=d.lexical,
            engaged_semantic=d.semantic,
            engaged_at=now,
        ).where(MemoryDelivery.id == d.delivery_id).execute()


def apply_engagement(
    session_id: str,
    response: str,
    settings: Settings,
    *,
    turn: int | None = None,
    prompt: str | None = None,
    embed: Embed | None = None,
) -> EngagementReport:
    """Decide and store engagement for each delivery of the turn (default: the session's latest). Idempotent:
    the same response gives the same rows. The prompt defaults to the one the prompt hook recorded."""
    from cairn_cli.core.labels.grades import latest_turn
    from cairn_cli.core.store.hookstate import turn_prompt
    from cairn_cli.db.tables import ephemeral_proxy

    turn = latest_turn(session_id, settings) if turn is None else turn
    report = EngagementReport(session_id, turn)
    if prompt is None:
        prompt = turn_prompt(session_id, turn)
        if prompt is None:
            report.notes.append("no recorded prompt for this turn: prompt terms not removed (pass --prompt)")
    memories = turn_memories(session_id, turn)
    if not memories:
        report.notes.append(f"no deliveries in turn {turn}")
        return report
    report.decisions, notes = engagement_decisions(memories, response, prompt or "", settings, embed)
    report.notes.extend(notes)
    with ephemeral_proxy.atomic():
        write_decisions(report.decisions)
    return report
