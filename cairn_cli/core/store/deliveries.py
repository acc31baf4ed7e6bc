"""The delivery log: one row per memory shown once, in one turn, for one context window, with provenance."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE, MAX_TURN, session_key
from cairn_cli.errors import InvalidInput, NotFound

MAX_ROW_ID = 2**63 - 1  # a database row id


@dataclass
class DeliveryInput:
    session_id: str
    turn: int
    memory_id: int
    context_window: str
    context_key: str
    rank: int
    final_score: float
    score_components: dict
    reranker_model: str
    layer: str
    scope: str
    ranker: str = "cairn"
    arm: str | None = None
    grade_propensity: float | None = None  # the probability the turn asked for grades (None: not a hook's turn)
    grade_asked: bool | None = None  # whether the turn's rules asked for rg grades (None: not a hook's turn)
    agent: str | None = None  # the agent whose hook asked (core/hooks/agents.py); None: not a hook's turn


@dataclass
class DeliveryView:
    id: int
    session_id: str
    turn: int
    memory_id: int
    context_key: str
    rank: int
    final_score: float
    reranker_model: str
    ranker: str
    layer: str
    scope: str
    delivered_at: str
    score_components: dict = field(default_factory=dict)
    grade: int | None = None
    hard_negative: bool | None = None
    graded_at: str | None = None
    engaged: bool | None = None
    engaged_score: float | None = None
    engaged_method: str | None = None
    engaged_lexical: float | None = None
    engaged_semantic: float | None = None
    arm: str | None = None
    grade_propensity: float | None = None
    grade_asked: bool | None = None
    agent: str | None = None
    instance: str | None = None  # the machine that delivered (a store several machines share)


def next_turn(session_id: str, settings: Settings) -> int:
    from cairn_cli.db import turn_log

    return turn_log.last_turn(session_id) + 1


def record(rows: list[DeliveryInput], settings: Settings) -> list[int]:
    """Insert the rows in one transaction; every memory id must exist. Returns the new delivery ids. Plain SQL:
    the hot path logs through the lean connection too."""
    import orjson

    from cairn_cli import db
    from cairn_cli.db import turn_log
    from cairn_cli.db.instance import writing_instance

    ids = sorted({r.memory_id for r in rows})
    known = turn_log.known_memories(ids)
    missing = sorted(set(ids) - known)
    if missing:
        raise NotFound(f"unknown memory id(s) {missing}", "see `cairn memory list`; nothing was logged")
    stamp = {"delivered_at": db.timestamp("ephemeral", utcnow()), "instance": writing_instance()}
    out = []
    with db.transaction("ephemeral"):
        for row in rows:
            values = {**asdict(row), **stamp}
            values["score_components"] = orjson.dumps(values["score_components"]).decode()
            out.append(db.insert("ephemeral", "memory_deliveries", values, returning="id"))
    return out


@dataclass
class Logged:
    """What `log_external` did: the rows it wrote, and those of the record that were logged before."""

    ids: list[int]
    already: list[int]  # the earlier rows' ids (same session, turn, memory and context window)


def log_external(rows: list[DeliveryInput], settings: Settings) -> Logged:
    """Record another ranker's deliveries (`cairn log-delivery`, one turn's, as parse_external makes them),
    idempotently: a (session, turn, memory, context window) already in the log is not logged again, so a client
    that resends a record after a timeout does not count its deliveries twice. On PostgreSQL two clients sending
    the same turn at once are serialised (a transaction advisory lock on the turn); SQLite has one writer."""
    from cairn_cli import db
    from cairn_cli.db import advisory, turn_log

    if not rows:
        return Logged([], [])
    first = rows[0]
    if any((r.session_id, r.turn, r.context_key) != (first.session_id, first.turn, first.context_key) for r in rows):
        raise InvalidInput("a record holds one turn's deliveries", "send one record per session, turn and window")
    with db.transaction("ephemeral"):
        advisory.transaction_lock("ephemeral", f"log:{first.session_id}:{first.turn}")
        ids = [r.memory_id for r in rows]
        logged = turn_log.logged(first.session_id, first.turn, first.context_key, ids)
        fresh = [r for r in rows if r.memory_id not in logged]
        return Logged(record(fresh, settings) if fresh else [], [logged[i] for i in ids if i in logged])


def _view(row) -> DeliveryView:
    return DeliveryView(
        id=row.id,
        session_id=row.session_id,
        turn=row.turn,
        memory_id=row.memory_id,
        context_key=row.context_key,
        rank=row.rank,
        final_score=row.final_score,
        reranker_model=row.reranker_model,
        ranker=row.ranker,
        layer=row.layer,
        scope=row.scope,
        delivered_at=row.delivered_at.isoformat(timespec="seconds"),
        score_components=row.score_components,
        grade=row.grade,
        hard_negative=row.hard_negative,
        graded_at=row.graded_at.isoformat(timespec="microseconds") if row.graded_at else None,
        engaged=row.engaged,
        engaged_score=row.engaged_score,
        engaged_method=row.engaged_method,
        engaged_lexical=row.engaged_lexical,
        engaged_semantic=row.engaged_semantic,
        arm=row.arm,
        grade_propensity=row.grade_propensity,
        grade_asked=row.grade_asked,
        agent=row.agent,
        instance=row.instance,
    )


def list_deliveries(
    settings: Settings, *, session_id: str | None = None, turn: int | None = None, limit: int | None = None
) -> list[DeliveryView]:
    from cairn_cli.db.tables import MemoryDelivery

    query = MemoryDelivery.select().order_by(MemoryDelivery.id.desc())
    if session_id:
        query = query.where(MemoryDelivery.session_id == session_id)
    if turn is not None:
        query = query.where(MemoryDelivery.turn == turn)
    if limit:
        query = query.limit(limit)
    return [_view(r) for r in reversed(list(query))]


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "session_id": str,
    "turn": int,
    "context_window": str,
    "reranker_model": str,
    "memories": list,
}
_MEMORY_REQUIRED: dict[str, type | tuple[type, ...]] = {"id": int, "rank": int, "score": (int, float)}


def _type_error(where: str, name: str, expected) -> InvalidInput:
    names = "/".join(t.__name__ for t in expected) if isinstance(expected, tuple) else expected.__name__
    return InvalidInput(f"{where}{name} must be {names}", "see `cairn log-delivery --help` for the JSON shape")


def payload_from_flags(session, turn, context, reranker_model, memories: list[str], layer, scope) -> dict:
    """The same record as the JSON shape, from `--memory ID:SCORE` flags (rank = their order)."""
    items = []
    for rank, item in enumerate(memories, start=1):
        mem_id, _, score = item.partition(":")
        try:
            items.append({"id": int(mem_id), "rank": rank, "score": float(score or 0.0)})
        except ValueError:
            raise InvalidInput(f"--memory {item!r} is not ID:SCORE", "write --memory 12:0.83") from None
    payload = {
        "session_id": session,
        "turn": turn,
        "context_window": context,
        "reranker_model": reranker_model,
        "memories": items,
        "layer": layer,
        "scope": scope,
    }
    return {k: v for k, v in payload.items() if v is not None}


def parse_external(payload: object, *, default_layer: str = "external") -> list[DeliveryInput]:
    """Validate strictly a delivery record made by another ranker (see `cairn log-delivery --help`)."""
    from cairn_cli.core.text import context_key

    if not isinstance(payload, dict):
        raise InvalidInput("the delivery must be a JSON object", "see `cairn log-delivery --help` for the shape")
    for name, typ in _REQUIRED.items():
        if name not in payload:
            raise InvalidInput(f"missing field {name!r}", "see `cairn log-delivery --help` for the JSON shape")
        if not isinstance(payload[name], typ) or isinstance(payload[name], bool):
            raise _type_error("", name, typ)
    allowed = set(_REQUIRED) | {"layer", "scope", "ranker", "context_key"}
    unknown = set(payload) - allowed
    if unknown:
        raise InvalidInput(f"unknown field(s) {sorted(unknown)}", f"allowed: {sorted(allowed)}")
    if (
        not 0 <= payload["turn"] <= MAX_TURN
        or not payload["session_id"].strip()
        or not payload["context_window"].strip()
    ):
        raise InvalidInput(
            f"session_id and context_window must be non-empty and turn within 0..{MAX_TURN}", "fix the record"
        )
    if not payload["memories"]:
        raise InvalidInput("memories is empty", "log at least one delivered memory")
    for name, longest in (
        ("layer", 100),
        ("scope", 200),
        ("ranker", 200),
        ("context_key", 64),
        ("reranker_model", 200),
    ):
        value = payload.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > longest):
            raise InvalidInput(f"{name} must be a string of at most {longest} characters", "fix the record")
    from cairn_cli.core.redact import scrub

    window = scrub(payload["context_window"])  # logged as every window is: secrets redacted, <private> spans out
    if not window.strip():
        raise InvalidInput("context_window is only a <private> span", "send the window the ranker ranked")
    key = payload.get("context_key") or context_key(window)
    rows, seen = [], set()
    for i, mem in enumerate(payload["memories"]):
        where = f"memories[{i}]."
        if not isinstance(mem, dict):
            raise InvalidInput(f"memories[{i}] must be an object", 'write {"id": 1, "rank": 1, "score": 0.5}')
        for field_name, field_type in _MEMORY_REQUIRED.items():
            value = mem.get(field_name)
            if field_name not in mem or isinstance(value, bool) or not isinstance(value, field_type):
                raise _type_error(where, field_name, field_type)
        extra = set(mem) - set(_MEMORY_REQUIRED) - {"score_components"}
        if extra:
            raise InvalidInput(
                f"{where} unknown field(s) {sorted(extra)}", "allowed: id, rank, score, score_components"
            )
        comps = mem.get("score_components", {})
        if not isinstance(comps, dict):
            raise _type_error(where, "score_components", dict)
        if not 0 < mem["id"] <= MAX_ROW_ID or not 0 <= mem["rank"] <= MAX_TURN or not math.isfinite(mem["score"]):
            raise InvalidInput(f"{where} id, rank or score is out of range", 'write {"id": 1, "rank": 1, "score": 0.5}')
        if mem["id"] in seen:
            raise InvalidInput(f"memory {mem['id']} is listed twice", "log each memory once per turn")
        seen.add(mem["id"])
        rows.append(
            DeliveryInput(
                session_id=session_key(payload["session_id"]),
                turn=payload["turn"],
                memory_id=mem["id"],
                context_window=window,
                context_key=key,
                rank=mem["rank"],
                final_score=float(mem["score"]),
                score_components=comps,
                reranker_model=payload["reranker_model"],
                layer=str(payload.get("layer") or default_layer),
                scope=str(payload.get("scope") or GLOBAL_SCOPE),
                ranker=str(payload.get("ranker") or "external"),
            )
        )
    return rows


def as_dict(view: DeliveryView) -> dict:
    return asdict(view)
