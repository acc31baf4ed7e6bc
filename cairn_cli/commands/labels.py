"""`cairn grade`: apply the agent's [cm] grades and evidence to a turn's deliveries."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
from cairn_cli.commands._common import Json, ResponseFile, opened_settings, read_response
from cairn_cli.core.ids import MAX_TURN


def grade(
    response: Annotated[
        str | None, typer.Argument(help="The response text holding the [cm] block; '-' or omitted reads stdin.")
    ] = None,
    *,  # --session is required (no default) after the optional argument: Typer passes every parameter by name
    session: Annotated[str, typer.Option(help="The session whose deliveries are graded.")],
    turn: Annotated[
        int | None, typer.Option(min=0, max=MAX_TURN, help="The turn (default: the session's latest delivered turn).")
    ] = None,
    file: ResponseFile = None,
    json: Json = False,
) -> None:
    """Apply the rg grades (0-3, '!' = hard negative) and cu / -! evidence of a [cm] block (docs/cm-block.md).

    Grades for memories not delivered in that turn are rejected with a reason; re-applying is idempotent.
    Exit 2 when the text has no [cm] block, or (after applying the rest) when an item was skipped or rejected.

    Example: cairn grade --session s1 --turn 3 '... [cm]{"rg": ["12:3", "15:0!"], "cu": [12]}[/cm]'
    """
    from cairn_cli.core.labels.cm import parse_cm
    from cairn_cli.core.labels.grades import apply_relevance_grades
    from cairn_cli.errors import InvalidInput

    cm = parse_cm(read_response(response, file))
    if not cm.found:
        raise InvalidInput("the response has no [cm] block", "see docs/cm-block.md for the format")
    report = apply_relevance_grades(cm, session, opened_settings(), turn=turn)
    if json:
        output.json_out(report.as_dict())
    else:
        _render.grade_report(report)
    if report.problems or report.rejected:
        # the well-formed rest is applied; the exit code tells a script that some of its input was not
        raise InvalidInput(
            f"{len(report.problems)} item(s) skipped and {len(report.rejected)} grade(s) rejected; "
            "the rest was applied",
            "see the report and docs/cm-block.md",
        )
