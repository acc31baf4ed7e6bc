"""`cairn rank`: which memories fit this context; prints the injection block and logs each delivery.

The shell hook reaches `rank` through cairn_cli/entry.py (parsed by hand, no Typer); both share cairn_cli/hotpath.py.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli.commands._common import globals_overrides
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ids import MAX_TURN
from cairn_cli.hotpath import emit_rank, read_prompt


def rank(
    prompt: Annotated[str | None, typer.Argument(help="The prompt; '-' or omitted reads stdin.")] = None,
    session: Annotated[str, typer.Option(help="Session id the deliveries are logged under.")] = "cli",
    scope: Annotated[str | None, typer.Option(help="Rank this scope's memories plus global ones.")] = None,
    transcript: Annotated[str | None, typer.Option(help="Claude Code transcript JSONL for earlier turns.")] = None,
    k: Annotated[int | None, typer.Option("-k", min=1, max=100, help="How many memories to inject.")] = None,
    layer: Annotated[str, typer.Option(help="Provenance label of the injection point.")] = "prompt",
    turn: Annotated[
        int | None, typer.Option(min=0, max=MAX_TURN, help="Turn number (default: the session's next).")
    ] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not log deliveries.")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print the ranking with its score components as JSON.")] = False,
    autostart: Annotated[
        bool, typer.Option("--autostart", help="Spawn the daemon for next time if it is down.")
    ] = False,
) -> None:
    """Rank the memories for a prompt and print the injection block (in the daemon when it runs).

    Example: cairn rank "why does the daemon not start?" --scope cairn --session s1
    """
    from cairn_cli.daemon import dispatch

    text = read_prompt(prompt)
    request = PromptRequest.from_cli(
        text, session=session, scope=scope, transcript=transcript, k=k, layer=layer, turn=turn, log=not no_log
    )
    result = dispatch.rank(request, globals_overrides(), autostart=autostart)
    emit_rank(result, json)
