"""`cairn rank`: which memories fit this context; prints the injection block and logs each delivery."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cairn_cli import output
from cairn_cli.commands._common import read_text_arg, settings


def rank(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt; '-' or omitted reads stdin.")] = None,
    session: Annotated[str, typer.Option(help="Session id the deliveries are logged under.")] = "cli",
    scope: Annotated[Optional[str], typer.Option(help="Rank this scope's memories plus global ones.")] = None,
    transcript: Annotated[Optional[str], typer.Option(help="Claude Code transcript JSONL for earlier turns.")] = None,
    k: Annotated[Optional[int], typer.Option("-k", min=1, max=100, help="How many memories to inject.")] = None,
    layer: Annotated[str, typer.Option(help="Provenance label of the injection point.")] = "prompt",
    turn: Annotated[Optional[int], typer.Option(min=0, help="Turn number (default: the session's next).")] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not log deliveries.")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print the ranking with its score components as JSON.")] = False,
) -> None:
    """Rank the memories for a prompt and print the injection block.

    Example: cairn rank "why does the daemon not start?" --scope cairn --session s1
    """
    from cairn_cli.core.ranking import RankRequest, rank as run_rank

    text = read_text_arg(prompt, "prompt", "pass the prompt as an argument or pipe it on stdin")
    result = run_rank(RankRequest(prompt=text, session_id=session, scope=scope, transcript=transcript, k=k,
                                  layer=layer, turn=turn, log=not no_log), settings())
    if json:
        output.json_out({
            "session_id": result.session_id, "turn": result.turn, "context_key": result.context.key,
            "context_window": result.context.text, "reranker_model": result.reranker_model,
            "embed_model": result.embed_model, "ranker": result.ranker, "candidates": result.candidates,
            "dropped": result.dropped, "delivery_ids": result.delivery_ids,
            "memories": [vars(i) for i in result.items],
        })
        return
    output.text_out(result.block)
    if not result.items:
        output.message(f"no memory above the threshold among {result.candidates} candidates")
