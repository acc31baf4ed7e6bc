"""`cairn mcp`: the memory store as an MCP server on stdio (cairn_cli/mcp_server.py), for agents without hooks and
for lookups mid-task."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli.commands._common import globals_overrides


def mcp(
    scope: Annotated[
        str | None,
        typer.Option(help="Default scope: searches rank it plus global memories, writes go to it (default global)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            envvar="CAIRN_MCP_SESSION",
            help="Session id the deliveries are logged under (default: mcp-<random>, one per server process). "
            "Give it an id of its own, not a hook's session: each search is a turn of it.",
        ),
    ] = None,
    k: Annotated[int | None, typer.Option("-k", min=1, max=100, help="How many memories a search returns.")] = None,
) -> None:
    """Serve search, show, write and grade over MCP (stdio): the same store, ranking, dedup and labels as the hooks.

    Tools: search_memories (a turn of the session, logged with layer mcp), show_memory, write_memory (dedup and
    provenance as a Stop), grade_memories (0-3, only what that search showed). stdout carries the protocol only.

    Example: claude mcp add cairn -- cairn mcp --scope myproject
    """
    from cairn_cli.mcp_server import serve

    serve(globals_overrides(), session=session, scope=scope, k=k)
