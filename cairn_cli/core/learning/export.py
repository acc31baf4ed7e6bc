"""The labels the student learns from, in and out: graded deliveries and engagement pseudo-labels as label rows, and
the `relevance_silver.jsonl` file (`cairn train-reranker --export`, or `--data FILE` of the same shape)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.errors import InvalidInput, NotFound
from cairn_cli.files import atomic_write, private_dir

SILVER_NAME = "relevance_silver.jsonl"
SILVER_FIELDS = ("query", "memory", "grade", "hard_negative", "query_key", "delivery_id", "grade_propensity")


@dataclass
class LabelRow:
    query: str
    memory: str
    grade: int
    hard_negative: bool = False
    query_key: str = ""
    delivery_id: int | None = None
    source: str = "grade"  # grade | engagement
    memory_id: int | None = None  # a graded delivery's memory (the ranking gate finds it in the store's ranking)
    scope: str | None = None  # the scope the delivery was ranked in
    prompt: str | None = None  # the window's prompt, as the hook kept it (hook_state): the gate's prompt-alone form
    engaged: bool | None = None  # a graded delivery's engagement decision too (None: none): agreement weighting
    explore_propensity: float = 1.0  # the chance exploration showed it (score_components; 1: ranked into view)
    grade_propensity: float = 1.0  # the chance its turn was asked for grades (teacher demotion; 1: every turn)


def observed_propensity(propensity: float | None, asked: bool | None) -> float:
    """A graded delivery's propensity as the weights read it: its turn's grade rate when the turn asked for grades;
    1 when it predates demotion (NULL) or the agent graded a turn that asked none (observed whatever the draw)."""
    return 1.0 if propensity is None or asked is False else float(propensity)


def _texts(rows) -> dict[int, str]:
    """The current text of each delivery's memory (none asked for no rows)."""
    from cairn_cli.db.tables import Memory

    if not rows:
        return {}
    return {
        m.id: m.content
        for m in Memory.select(Memory.id, Memory.content).where(Memory.id.in_({r.memory_id for r in rows}))
    }


def silver_path() -> Path:
    return config.home() / "training_data" / SILVER_NAME


def query_key(query: str) -> str:
    from cairn_cli.core.text import context_key

    return context_key(query)


def graded_rows(settings: Settings, *, instance: str | None = None) -> list[LabelRow]:
    """Every graded delivery as a label row (the memory's current text; query = the delivery's context window);
    `instance`: only that instance's (default: every instance sharing the store, pooled)."""
    from cairn_cli.db.tables import MemoryDelivery

    query = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False))
    if instance:
        query = query.where(MemoryDelivery.instance == instance)
    rows = list(query.order_by(MemoryDelivery.id))
    texts = _texts(rows)
    prompts = _prompts(rows)
    return [
        LabelRow(
            r.context_window,
            texts[r.memory_id],
            int(r.grade or 0),
            bool(r.hard_negative),
            r.context_key,
            r.id,
            memory_id=r.memory_id,
            scope=r.scope,
            grade_propensity=observed_propensity(r.grade_propensity, r.grade_asked),
            prompt=prompts.get((r.session_id, r.turn)),
            engaged=bool(r.engaged) if r.engaged is not None and r.engaged_method else None,
            explore_propensity=_explore_propensity(r.score_components),
        )
        for r in rows
        if r.memory_id in texts and r.context_window  # '': expired (core/store/retention.py), no query to pair
    ]


def _prompts(rows) -> dict[tuple[str, int], str]:
    """The prompt hook_state kept for each delivery's turn (none for a turn whose state expired)."""
    from cairn_cli.db.tables import HookState

    sessions = sorted({r.session_id for r in rows})
    out = {}
    for start in range(0, len(sessions), 500):  # under SQLite's bound on a statement's variables
        chunk = sessions[start : start + 500]
        for h in HookState.select(HookState.session_id, HookState.turn, HookState.data).where(
            HookState.session_id.in_(chunk)
        ):
            prompt = (h.data or {}).get("prompt")
            if isinstance(prompt, str) and prompt:
                out[(h.session_id, h.turn)] = prompt
    return out


def _explore_propensity(components) -> float:
    """The logged chance that exploration showed this memory (core/ranking/pipeline.py `explored`); 1.0 for a
    memory the ranking itself put in view."""
    value = (components or {}).get("explore_propensity") if isinstance(components, dict) else None
    return float(value) if isinstance(value, (int, float)) and 0 < value <= 1 else 1.0


DEFAULT_ENGAGEMENT_METHODS = ("lexical", "semantic")  # semantic-backfill's weaker labels are opt-in


def engagement_methods(text: str) -> tuple[str, ...]:
    """The engagement bases of `--engagement-methods` (a comma list of engagement.METHODS)."""
    from cairn_cli.core.labels.engagement import METHODS

    asked = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in asked if m not in METHODS]
    if unknown or not asked:
        raise InvalidInput(
            f"unknown engagement method {unknown[0] if unknown else text!r}",
            f"pass a comma list of {', '.join(METHODS)}, e.g. --engagement-methods lexical,semantic",
        )
    return asked


def engagement_rows(
    settings: Settings,
    *,
    min_pos: float,
    methods: tuple[str, ...] = DEFAULT_ENGAGEMENT_METHODS,
    instance: str | None = None,
) -> list[LabelRow]:
    """Ungraded deliveries with an engagement decision of one of `methods`, as 0/3 pseudo-grades. A lexical row is
    a positive only when its overlap reaches `min_pos` (lexical engaged rows under it are left out); semantic and
    semantic-backfill rows are positives as decided."""
    from cairn_cli.core.labels.engagement import LEXICAL
    from cairn_cli.db.tables import MemoryDelivery

    query = MemoryDelivery.select().where(
        MemoryDelivery.grade.is_null()
        & MemoryDelivery.engaged.is_null(False)
        & MemoryDelivery.engaged_method.in_(list(methods))
    )
    if instance:
        query = query.where(MemoryDelivery.instance == instance)
    rows = list(query.order_by(MemoryDelivery.id))
    texts = _texts(rows)
    out = []
    for r in rows:
        if r.memory_id not in texts or not r.context_window:  # '': expired (core/store/retention.py)
            continue
        if r.engaged and r.engaged_method == LEXICAL and (r.engaged_score or 0.0) < min_pos:
            continue
        out.append(
            LabelRow(
                r.context_window, texts[r.memory_id], 3 if r.engaged else 0, False, r.context_key, r.id, "engagement"
            )
        )
    return out


def write_jsonl(rows: list[LabelRow], path: Path) -> None:
    """The label rows as JSONL, written atomically and private (they hold prompts and memories), scrubbed: a
    window or memory stored by a version before redaction leaves no secret in the file."""
    from cairn_cli.core.redact import scrub

    private_dir(path.parent)
    atomic_write(
        path,
        "".join(
            json.dumps(
                {k: scrub(v) if k in ("query", "memory") else v for k, v in asdict(r).items() if k in SILVER_FIELDS},
                ensure_ascii=False,
            )
            + "\n"
            for r in rows
        ),
    )


def read_jsonl(path: Path) -> list[LabelRow]:
    """Rows of the silver shape; `query_key` defaults to the query's hash. A bad line is an error naming it."""
    if not path.is_file():
        raise NotFound(f"no training data at {path}", "run `cairn train-reranker --export` or pass --data FILE")
    out = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise InvalidInput(f"{path}:{n}: not valid JSON", "one JSON object a line") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}:{n}: not a JSON object", "one JSON object a line")
            query, memory, grade = obj.get("query"), obj.get("memory"), obj.get("grade")
            if not isinstance(query, str) or not query.strip() or not isinstance(memory, str) or not memory.strip():
                raise InvalidInput(f"{path}:{n}: query and memory must be non-empty strings", "fix that line")
            if not isinstance(grade, int) or isinstance(grade, bool) or not 0 <= grade <= 3:
                raise InvalidInput(f"{path}:{n}: grade must be an integer 0-3", "fix that line")
            propensity = obj.get("grade_propensity", 1.0)
            if isinstance(propensity, bool) or not isinstance(propensity, (int, float)) or not 0 < propensity <= 1:
                raise InvalidInput(f"{path}:{n}: grade_propensity must be a number in (0, 1]", "fix that line")
            out.append(
                LabelRow(
                    query,
                    memory,
                    grade,
                    bool(obj.get("hard_negative", False)),
                    str(obj.get("query_key") or query_key(query)),
                    obj.get("delivery_id"),
                    grade_propensity=float(propensity),
                )
            )
    return out
