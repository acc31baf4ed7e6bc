"""`cairn log-delivery` and `cairn deliveries`: the delivery log."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, opened_settings
from cairn_cli.core.ids import MAX_TURN
from cairn_cli.hotpath import read_text_arg

LOG_DELIVERY_HELP = """Record deliveries made by another ranker (JSON object on stdin or as the argument).

Idempotent: a memory already logged for the same session, turn and context window is reported, not logged again.

Shape: {"session_id": str, "turn": int, "context_window": str, "reranker_model": str,
"memories": [{"id": int, "rank": int, "score": float, "score_components": {...}}],
"layer": str?, "scope": str?, "ranker": str?, "context_key": str?}

Or with flags: cairn log-delivery --session s1 --turn 3 --context "..." --reranker-model bm25 --memory 12:3.2 --memory 7:1.1

Example: echo '{"session_id":"s1","turn":1,...}' | cairn log-delivery
"""


def log_delivery(
    payload: Annotated[str | None, typer.Argument(help="The JSON record; '-' or omitted reads stdin.")] = None,
    session: Annotated[str | None, typer.Option(help="With flags instead of JSON: the session id.")] = None,
    turn: Annotated[int | None, typer.Option(min=0, max=MAX_TURN, help="With flags: the turn.")] = None,
    context: Annotated[str | None, typer.Option(help="With flags: the context window the ranking used.")] = None,
    reranker_model: Annotated[str | None, typer.Option("--reranker-model", help="With flags: the model.")] = None,
    memory: Annotated[
        list[str] | None, typer.Option("--memory", help="With flags: ID:SCORE, repeated, best first (rank = order).")
    ] = None,
    layer: Annotated[str | None, typer.Option(help="With flags: the injection layer.")] = None,
    scope: Annotated[str | None, typer.Option(help="With flags: the scope.")] = None,
    json: Json = False,
) -> None:
    import orjson

    from cairn_cli.core.store import deliveries
    from cairn_cli.errors import InvalidInput

    if memory:
        data = deliveries.payload_from_flags(session, turn, context, reranker_model, memory, layer, scope)
    else:
        raw = read_text_arg(payload, "delivery JSON", "pipe the JSON record on stdin or use --memory flags")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(
                f"the delivery is not valid JSON ({exc.msg})", "see `cairn log-delivery --help`"
            ) from None
    logged = deliveries.log_external(deliveries.parse_external(data), opened_settings())
    if json:
        output.json_out({"delivery_ids": logged.ids, "already_logged": logged.already})
    else:
        again = f", {len(logged.already)} already logged (not logged again)" if logged.already else ""
        output.text_out(f"logged {len(logged.ids)} deliveries{again}")


log_delivery.__doc__ = LOG_DELIVERY_HELP


def list_deliveries(
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    turn: Annotated[int | None, typer.Option(min=0, max=MAX_TURN, help="Only this turn.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="The most recent N.")] = 50,
    json: Json = False,
) -> None:
    """Show logged deliveries with their provenance and labels.

    Example: cairn deliveries --session s1
    """
    from cairn_cli.core.store import deliveries

    views = deliveries.list_deliveries(opened_settings(read_only=True), session_id=session, turn=turn, limit=limit)
    output.json_out(views) if json else _show(views)


def _show(views) -> None:
    rows = [
        {
            **vars(v),
            "final_score": f"{v.final_score:.3f}",
            "sim": v.score_components.get("similarity"),
            "kw": v.score_components.get("keywords"),
        }
        for v in views
    ]
    output.table(
        rows,
        [
            "id",
            "session_id",
            "turn",
            "rank",
            "memory_id",
            "final_score",
            "sim",
            "kw",
            "reranker_model",
            "ranker",
            "layer",
            "scope",
            "context_key",
            "grade",
            "engaged",
            "engaged_method",
            "agent",
            "instance",
        ],
        title=f"{len(views)} deliveries",
    )
