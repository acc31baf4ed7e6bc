"""The MCP face of cairn (`cairn mcp`): the official SDK's MCPServer over stdio, serving core/mcp_tools.py's
tools to agents without hooks and to agents that look something up mid-task. Here the tools are declared (names,
argument schemas, the descriptions the model reads), run one at a time off the event loop (a session's turns are
numbered in order; the stores are bound per process), and every error becomes a tool error of one line naming the
fix: the server itself never stops on one. stdout is the protocol's alone (the SDK moves fd 1 aside); stderr is
scrubbed as the daemon's is. The SDK is imported here only: nothing else in cairn loads it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from cairn_cli.core.ids import MAX_TURN

if TYPE_CHECKING:
    from cairn_cli.core.mcp_tools import ToolSession

INSTRUCTIONS = (
    "cairn is the long-term memory shared by the agents on this machine. Call search_memories when earlier "
    "knowledge may help (a convention, a past decision, why something failed). Then grade what it showed with "
    "grade_memories: 3 = it answered the question, 2 = useful, 1 = related but not needed, 0 = irrelevant. "
    "When you learn something a later session should know, write it with write_memory: one self-contained "
    "statement, never a secret."
)


class GradeItem(BaseModel):
    id: Annotated[int, Field(ge=1, description="A memory id the search returned.")]
    grade: Annotated[int, Field(ge=0, le=3, description="3 answered it, 2 useful, 1 related, 0 irrelevant.")]
    hard_negative: Annotated[
        bool, Field(description="A 0 that looked relevant but would mislead (only with grade 0).")
    ] = False


def serve(overrides: dict, *, session: str | None, scope: str | None, k: int | None) -> None:
    """Serve until the client closes stdin. `overrides`: the command's settings flags (--db-url ...)."""
    import sys

    from cairn_cli.core.mcp_tools import ToolSession
    from cairn_cli.core.redact import ScrubbingStream
    from cairn_cli.daemon import dispatch

    sys.stderr = ScrubbingStream(sys.stderr)  # a warning or a traceback may quote a query
    tools = ToolSession(
        session,
        scope=scope,
        k=k,
        rank=lambda request: dispatch.rank(request, overrides, autostart=True),
        embed_with_model=dispatch.embed_with_model,
    )
    build(tools, overrides).run("stdio")


def build(tools: ToolSession, overrides: dict):
    """The MCPServer with cairn's four tools bound to `tools`."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from cairn_cli import __version__

    server = MCPServer("cairn", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    one_at_a_time = anyio.CapacityLimiter(1)

    async def run(fn, *args, **kwargs) -> dict[str, Any]:
        call = functools.partial(_call, overrides, fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=one_at_a_time)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False))
    async def search_memories(
        query: Annotated[str, Field(description="What to look up: a question, an error message, a task.")],
        scope: Annotated[
            str | None, Field(description="The project whose memories to search (plus global ones).")
        ] = None,
        k: Annotated[int | None, Field(ge=1, le=100, description="At most this many memories.")] = None,
    ) -> dict[str, Any]:
        """Search the long-term memories for what fits the query, best first. Each search is a turn of this
        session: grade what it showed with grade_memories (its `turn`). `abstained` says why nothing was shown."""
        return await run(tools.search, query, scope=scope, k=k)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def show_memory(
        id: Annotated[int, Field(ge=1, description="The memory's id, as a search returned it.")],
    ) -> dict[str, Any]:
        """Show one memory whole: its text, keywords, scope, kind, confidence, where it came from (source_ref,
        session), when it was written, whether a newer memory supersedes it, and the writes merged into it."""
        return await run(tools.show, id)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def write_memory(
        content: Annotated[str, Field(description="One self-contained statement a later session can act on.")],
        keywords: Annotated[list[str] | None, Field(description="A few words it should be found by.")] = None,
        scope: Annotated[str | None, Field(description="The project it belongs to (default: global).")] = None,
        kind: Annotated[
            str,
            Field(description="fact, procedure, correction, preference, decision, pitfall or meta."),
        ] = "fact",
    ) -> dict[str, Any]:
        """Write a memory for later sessions. A memory that repeats one already stored is merged into it (its id is
        returned, `action` merged); one holding a secret is refused."""
        return await run(tools.write, content, keywords=keywords, scope=scope, kind=kind)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, open_world_hint=False))
    async def grade_memories(
        grades: Annotated[list[GradeItem], Field(description="One grade per memory the search showed.")],
        turn: Annotated[
            int | None, Field(ge=0, le=MAX_TURN, description="The search's turn (default: the latest search).")
        ] = None,
    ) -> dict[str, Any]:
        """Grade how useful each memory a search showed was; cairn learns its ranking from these grades. Only the
        memories that search showed can be graded: any other id is rejected and reported."""
        return await run(tools.grade, [g.model_dump() for g in grades], turn=turn)

    return server


def _call(overrides: dict, fn, *args, **kwargs) -> dict[str, Any]:
    """fn(settings, ...) with the stores bound (as a daemon request binds them: a store made meanwhile is found on
    the next call); any error becomes a ToolError of one line."""
    from mcp.server.mcpserver.exceptions import ToolError

    from cairn_cli.config import Settings
    from cairn_cli.core.store import open_stores
    from cairn_cli.errors import CairnError, explain
    from cairn_cli.hotpath import unexpected

    try:
        settings = Settings(**overrides)
        open_stores(settings)
        return fn(settings, *args, **kwargs)
    except Exception as exc:
        known = exc if isinstance(exc, CairnError) else explain(exc)
        if known is None:
            unexpected(exc)  # one line on stderr, the traceback under CAIRN_DEBUG
            known = CairnError(f"unexpected {type(exc).__name__}: {exc}", "see the server's stderr (CAIRN_DEBUG=1)")
        raise ToolError(known.one_line()) from None
