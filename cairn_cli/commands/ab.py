"""`cairn ab assign|status|promote|queue|selfmod`: the write-side live A/B of the generation rules."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
from cairn_cli.commands._common import DryRun, Json, opened_settings
from cairn_cli.core.ids import MAX_TURN


def assign(
    session: Annotated[str, typer.Option(help="The session of the prompt.")],
    turn: Annotated[
        int | None, typer.Option(min=0, max=MAX_TURN, help="The turn (default: the session's next).")
    ] = None,
    subagent: Annotated[bool, typer.Option("--subagent", help="A subagent's prompt: no arm.")] = False,
    json: Json = False,
) -> None:
    """Draw the arm of one prompt and record it in hook_state (what `cairn hook prompt` does for every prompt).

    Example: cairn ab assign --session s1 --json
    """
    from cairn_cli.core.experiment import ab

    result = ab.assign_turn(session, turn, is_subagent=subagent, settings=opened_settings())
    output.json_out(result) if json else output.text_out(
        f"turn {result['turn']}: arm {result['arm'] or '-'} ({result['version']})"
    )


def status(json: Json = False) -> None:
    """The A/B in force: versions, B's instruction, the queue, each arm's memories and how they fare later.

    Engagement is shown per method (never pooled), with Wilson 95% intervals; the decision is the gate's on the
    data so far. Example: cairn ab status
    """
    from cairn_cli.core.experiment import ab
    from cairn_cli.core.replay.run import latest_verdict, verdict_line

    s = opened_settings(read_only=True)
    current = ab.arms(s)
    decision = ab.evaluate(s)
    offline = latest_verdict(current.versions.get("B"))
    if json:
        output.json_out(
            {
                "enabled": s.AB_TEST_ENABLED,
                "versions": current.versions,
                "b_instruction": current.b_instruction,
                "queue": current.queue,
                "decision": decision.as_dict(),
                "offline_replay": offline,  # an analysis of replayed transcripts, not the live data: never promotes
            }
        )
        return
    line = verdict_line(offline) if current.versions.get("B") else None
    _render.ab_status(s.AB_TEST_ENABLED, current, decision, line)


def _decide(dry_run: bool, json: bool, by: str) -> None:
    from cairn_cli.core.experiment import ab

    outcome = ab.decide(opened_settings(), dry_run=dry_run, by=by)
    if json and outcome.locked:
        assert outcome.decision is not None
        output.json_out({"decision": outcome.decision.as_dict(), "applied": outcome.applied, "dry_run": dry_run})
    else:
        _render.ab_decision(outcome)


def promote(dry_run: DryRun = False, json: Json = False) -> None:
    """Promote B into A when it beats A on the pre-registered test (or retire it when it clearly loses).

    Never on thin data: the reason says what is missing. Example: cairn ab promote --dry-run
    """
    _decide(dry_run, json, "cairn ab promote")


def selfmod(dry_run: DryRun = False, json: Json = False) -> None:
    """The cron entry: evaluate the A/B and apply a promotion or retirement; idempotent, one at a time (a lock).

    Example (crontab): 17 * * * * cairn ab selfmod --json >> ~/.local/share/cairn/logs/ab.log
    """
    _decide(dry_run, json, "cairn ab selfmod")


def queue_add(
    instruction: Annotated[str, typer.Argument(help="The candidate instruction for a future arm B.")],
    json: Json = False,
) -> None:
    """Queue a candidate instruction; it becomes arm B when the current B is promoted or retired.

    Example: cairn ab queue add "Name the file a memory is about in its first sentence."
    """
    from cairn_cli.core.experiment import ab

    s = opened_settings()
    queue = ab.queue_add(instruction, s)
    current = ab.arms(s)
    output.json_out({"queue": queue, "b_instruction": current.b_instruction}) if json else output.message(
        f"queue: {len(queue)} candidate(s); arm B: {current.b_instruction}"
    )


def queue_list(json: Json = False) -> None:
    """List the queued candidate instructions. Example: cairn ab queue list"""
    from cairn_cli.core.experiment import ab
    from cairn_cli.core.replay.run import latest_verdict, verdict_line

    current = ab.arms(opened_settings(read_only=True))
    rows = []
    for i, text in enumerate(current.queue):
        version = ab.b_version(current.versions["A"], text)
        offline = latest_verdict(version)
        rows.append(
            {
                "#": i + 1,
                "instruction": text,
                "version": version,
                "offline_replay": offline if json else verdict_line(offline),
            }
        )
    output.json_out(rows) if json else output.table(
        rows, ["#", "instruction", "version", "offline_replay"], title="A/B candidate queue (replay verdicts: offline)"
    )
