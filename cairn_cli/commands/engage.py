"""`cairn engage`: decide which of a turn's delivered memories the response actually used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, ResponseFile, opened_settings, read_response, settings
from cairn_cli.core.ids import MAX_TURN


def engage(
    response: Annotated[str | None, typer.Argument(help="The response text; '-' or omitted reads stdin.")] = None,
    *,  # --session is required (no default) after the optional argument: Typer passes every parameter by name
    session: Annotated[str, typer.Option(help="The session whose deliveries are judged.")],
    turn: Annotated[
        int | None, typer.Option(min=0, max=MAX_TURN, help="The turn (default: the session's latest delivered turn).")
    ] = None,
    file: ResponseFile = None,
    transcript: Annotated[
        Path | None,
        typer.Option(help="Read the response from a Claude Code transcript (the assistant text of its last turn)."),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            help="The user's prompt, whose terms do not count as use (default: the one the prompt hook recorded)."
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Mark each delivery of the turn engaged or not: distinctive-term overlap (lexical), else memory/response
    cosine via the daemon's embedder (semantic second chance); the method is recorded on every row.

    Example: cairn engage --session s1 --turn 3 --file response.txt
    """
    from cairn_cli.core.labels.engagement import apply_engagement
    from cairn_cli.daemon import dispatch

    text = _response_text(response, file, transcript)
    report = apply_engagement(
        session, text, opened_settings(), turn=turn, prompt=prompt, embed=dispatch.embed_with_model
    )
    output.json_out(report.as_dict()) if json else _show(report)


def _response_text(response: str | None, file: Path | None, transcript: Path | None) -> str:
    """The response judged: the argument, --file or stdin, or the last assistant text of --transcript."""
    from cairn_cli.errors import InvalidInput, NotFound

    if file is not None and transcript is not None:
        raise InvalidInput("--file and --transcript both given", "pass one source of the response")
    if transcript is not None:
        from cairn_cli.core.transcript import NotARegularFile, read_transcript

        hint = "pass the session's .jsonl path"
        try:
            text = read_transcript(transcript, max_bytes=settings().TRANSCRIPT_MAX_BYTES).last_response() or ""
        except FileNotFoundError:
            raise NotFound(f"no such transcript: {transcript}", hint) from None
        except (NotARegularFile, IsADirectoryError):
            raise InvalidInput(f"the transcript {transcript} is not a regular file (never read)", hint) from None
        except OSError as exc:
            raise NotFound(f"cannot read the transcript {transcript}: {exc.strerror or exc}", hint) from None
    else:
        text = read_response(response, file)
    if not text.strip():
        raise InvalidInput("the response is empty", "pass the response text the memories were delivered for")
    return text


def _show(report) -> None:
    output.text_out(
        f"session {report.session_id} turn {report.turn}: "
        f"{sum(d.engaged for d in report.decisions)}/{len(report.decisions)} engaged"
    )
    for d in report.decisions:
        semantic = "" if d.semantic is None else f" cosine {d.semantic:.2f}"
        output.text_out(
            f"  memory {d.memory_id}: {'engaged' if d.engaged else 'not engaged'} ({d.method} "
            f"{d.score:.3f}; overlap {d.lexical:.3f}{semantic})"
        )
    for note in report.notes:
        output.message(note)
