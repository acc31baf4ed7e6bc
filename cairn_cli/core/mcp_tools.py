"""What an agent does with the store over MCP (`cairn mcp`): search it, show one memory, write one, grade what a
search showed. One connection is one session and each search is a turn of it, ranked and logged as a prompt is
(layer `mcp`, agent `mcp`), so that a grade lands on exactly the deliveries of the search it names; a write takes
the Stop's path (validation, dedup, provenance). Every text that comes in is scrubbed first (docs/privacy.md).

Plain dicts out, no MCP here: the server (cairn_cli/mcp_server.py) declares the tools, opens the stores, runs one
call at a time and turns a CairnError into a tool error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from cairn_cli.config import Settings
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ids import GLOBAL_SCOPE, MAX_TURN, clean_text, session_key
from cairn_cli.core.redact import scrub
from cairn_cli.errors import InvalidInput, NotFound

LAYER = AGENT = "mcp"  # the deliveries' injection point, and the agent they went to


def new_session_id() -> str:
    """A session of its own for a connection whose client named none."""
    import uuid

    return f"mcp-{uuid.uuid4().hex[:12]}"


class ToolSession:
    """One MCP connection: its session id, its defaults, and the turn of its latest search (what a grade without a
    turn applies to). `rank(request)` -> RankResult.as_dict() ranks where `cairn rank` would (the daemon, else this
    process); `embed_with_model(texts)` -> (model, vectors) | None embeds a new memory as the Stop does. Not
    thread-safe: the caller runs one call at a time."""

    def __init__(
        self,
        session_id: str | None,
        *,
        scope: str | None,
        k: int | None,
        rank: Callable[[PromptRequest], dict],
        embed_with_model: Callable,
    ):
        self.session_id = session_key(session_id) if session_id and session_id.strip() else new_session_id()
        self.scope = _scope(scope)
        self.k = k
        self.rank = rank
        self.embed_with_model = embed_with_model
        self.last_turn: int | None = None

    def search(self, settings: Settings, query: str, *, scope: str | None = None, k: int | None = None) -> dict:
        """The memories for `query`, ranked and logged as this session's next turn."""
        text = scrub(clean_text(query)).strip()
        if not text:
            raise InvalidInput(
                "the query is empty (or only a <private> span)", "say what to look up: a question, an error, a name"
            )
        request = PromptRequest(
            text,
            self.session_id,
            scope=_scope(scope) or self.scope,
            k=k or self.k,
            layer=LAYER,
            strict_scope=False,  # a project with no memories yet ranks the global ones
            agent=AGENT,
        )
        result = self.rank(request)
        self.last_turn = result["turn"]
        shown = [
            {
                "id": m["id"],
                "content": m["content"],
                "kind": m["kind"],
                "scope": m["scope"],
                "score": round(m["score"], 4),
                "rank": m["rank"],
            }
            for m in result["memories"]
        ]
        abstained = None
        if not shown:  # say why: the agent knows the store had nothing, not that the search failed
            abstained = next(
                (n for n in result["notes"] if n.startswith("abstained")),
                f"abstained: none of {result['candidates']} candidates fits"
                if result["candidates"]
                else "abstained: no memory in scope",
            )
        return {
            "session": self.session_id,
            "turn": result["turn"],
            "memories": shown,
            "abstained": abstained,
            "notes": [n for n in result["notes"] if not n.startswith("abstained")],
        }

    def show(self, settings: Settings, memory_id: int) -> dict:
        """One memory with its provenance and every write merged into it."""
        from cairn_cli.core.store import memories, merges

        try:
            view = memories.get_memory(memory_id, settings)
        except NotFound as exc:
            raise NotFound(exc.message, "use an id that search_memories returned") from None
        return {**asdict(view), "merges": [asdict(m) for m in merges.merges_of(memory_id, settings)]}

    def write(
        self,
        settings: Settings,
        content: str,
        *,
        keywords: list[str] | None = None,
        scope: str | None = None,
        kind: str = "fact",
    ) -> dict:
        """Add a memory, or merge it into the one it repeats (exact or semantic dedup), stamped as a Stop stamps the
        memories of a [cm] block: the live generation rules' version and this session."""
        from cairn_cli.core.experiment.rules import live
        from cairn_cli.core.redact import holds_placeholder
        from cairn_cli.core.store.dedup import add_memories, precomputed_embedder
        from cairn_cli.core.store.memories import validate_entry
        from cairn_cli.db import retry_conflicts

        source_ref = live(settings).version
        entry = validate_entry(  # scrubs the text and keywords; a memory that is mostly a secret is refused
            {
                "content": content,
                "keywords": keywords or [],
                "scope": _scope(scope) or self.scope or GLOBAL_SCOPE,
                "kind": kind,
                "source_ref": source_ref,
                "session_id": self.session_id,
            }
        )
        if holds_placeholder(entry.content):  # as core/labels/cm.py: an agent's memory never keeps a credential
            raise InvalidInput(
                "the memory holds a credential and was not stored",
                "write it again without the secret: say where it lives, not what it is",
            )
        notes: list[str] = []
        embedder = precomputed_embedder([entry], self.embed_with_model, notes)
        before = list(notes)

        def attempt():
            notes[:] = before  # a retried attempt reports once
            return add_memories([entry], settings, embed=embedder, notes=notes)[0]

        result = retry_conflicts(attempt, budget_s=settings.STOP_WRITE_BUDGET_S)
        return {
            "id": result.id,
            "action": result.action,
            "method": result.method,
            "similarity": result.similarity,
            "keywords_added": result.keywords_added,
            "source_ref": source_ref,
            "session": self.session_id,
            "notes": notes,
        }

    def grade(self, settings: Settings, grades: list[dict], *, turn: int | None = None) -> dict:
        """Grade (0-3; a hard negative is a 0 with `hard_negative`) what one search of this session showed: the
        latest unless `turn` names another. A memory that search did not show is rejected, never written."""
        from cairn_cli.core.labels.cm import CmBlock, Grade, parse_grade
        from cairn_cli.core.labels.grades import apply_relevance_grades
        from cairn_cli.db import retry_conflicts

        if not grades:
            raise InvalidInput("no grades given", 'pass grades like [{"id": 12, "grade": 3}] for what a search showed')
        if turn is None:
            turn = self.last_turn
        if turn is None:
            raise InvalidInput(
                "no search on this connection to grade yet", "call search_memories first, or pass the turn it returned"
            )
        if not 0 <= turn <= MAX_TURN:
            raise InvalidInput(f"turn {turn} is out of range", "pass the turn a search returned")
        cm = CmBlock(found=True)
        seen: dict[int, Grade] = {}
        for item in grades:
            try:
                g = parse_grade(item)
            except ValueError as exc:
                cm.problems.append(str(exc))
                continue
            seen[g.memory_id] = g  # graded twice: the last grade is kept, as in a [cm] block
        cm.grades = list(seen.values())
        report = retry_conflicts(
            lambda: apply_relevance_grades(cm, self.session_id, settings, turn=turn),
            budget_s=settings.STOP_WRITE_BUDGET_S,
        )
        return {
            "session": self.session_id,
            "turn": report.turn,
            "applied": [
                {"id": a["memory_id"], "grade": a["grade"], "hard_negative": a["hard_negative"]} for a in report.applied
            ],
            "rejected": [{"id": r["memory_id"], "grade": r["grade"], "reason": r["reason"]} for r in report.rejected],
            "problems": report.problems,
        }


def _scope(scope: str | None) -> str | None:
    """A scope as it came in, scrubbed as every text is; None for none."""
    text = scrub(clean_text(scope)).strip() if scope else ""
    return text or None
