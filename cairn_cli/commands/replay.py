"""`cairn replay run|report|list`: the offline write-side A/B (core/replay/)."""

from __future__ import annotations

from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
from cairn_cli.commands._common import Json, Since, opened_settings
from cairn_cli.commands._options import option_values


class BackendKind(str, Enum):
    anthropic = "anthropic"
    openai = "openai"
    command = "command"


def run(
    transcripts: Annotated[
        str | None,
        typer.Option(
            help="A folder (searched recursively) or a glob of Claude Code transcripts (default ~/.claude/projects)."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many sessions (the newest).")] = None,
    since: Since = None,
    a: Annotated[
        str | None, typer.Option("--a", help="Arm A's generation-rule version (default: the live rules).")
    ] = None,
    b: Annotated[
        str | None,
        typer.Option("--b", help="Arm B's version (default: the live experiment's B, else the first queued)."),
    ] = None,
    b_instruction: Annotated[
        str | None, typer.Option("--b-instruction", help="An ad-hoc candidate: this instruction added to A's rules.")
    ] = None,
    backend: Annotated[BackendKind, typer.Option(case_sensitive=False)] = BackendKind.anthropic,
    cmd: Annotated[
        str | None, typer.Option(help="--backend command: the program, reading the prompt on stdin (e.g. 'claude -p').")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="The API's base URL (openai: any compatible).")
    ] = None,
    writer_model: Annotated[
        str | None, typer.Option("--writer-model", help="Default CAIRN_REPLAY_WRITER_MODEL.")
    ] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Default CAIRN_REPLAY_JUDGE_MODEL.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=32, help="Sessions replayed at once.")] = 1,
    timeout: Annotated[float, typer.Option(min=1.0, help="Seconds a call may take before it is retried.")] = 120.0,
    retries: Annotated[int, typer.Option(min=0, max=10, help="Retries of a call on 429 / 5xx / timeouts.")] = 3,
    max_calls: Annotated[
        int | None, typer.Option("--max-calls", min=0, help="Stop cleanly after this many paid calls.")
    ] = None,
    max_cost_usd: Annotated[
        float | None, typer.Option("--max-cost-usd", min=0.0, help="Stop cleanly before spending more than this.")
    ] = None,
    price_in: Annotated[float | None, typer.Option("--price-in", min=0.0, help="USD per million input tokens.")] = None,
    price_out: Annotated[
        float | None, typer.Option("--price-out", min=0.0, help="USD per million output tokens.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the blinding draws and the bootstrap.")] = 13,
    no_redact: Annotated[
        bool, typer.Option("--no-redact", help="Send transcripts unredacted (default: secrets are redacted first).")
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue RUN with its configuration (caps: this invocation's own); every call it paid is cached."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="The plan (sessions, calls, tokens, cost); no call.")
    ] = False,
    json: Json = False,
) -> None:
    """Replay real sessions through two generation rules: each arm's writer writes the memories of every turn,
    a judge compares them blind, position-swapped and pairwise (findability, self-sufficiency, fitness); per arm,
    the dedup rate, a findability backtest and cold-read scores. The unit is the session cohort. An analysis: it
    never promotes.

    Example: cairn replay run --backend command --cmd 'claude -p' --limit 20 --dry-run
    """
    from cairn_cli.core.replay import run as replay
    from cairn_cli.core.replay import setup

    s = opened_settings()  # a dry run too: the arms are machine-managed state (a fresh home gets its empty stores)
    given = option_values(replay.ReplayConfig, locals(), redact=not no_redact)
    cfg, arms, found = setup.configure(s, given, resume=resume, b_instruction=b_instruction)
    if dry_run:
        p = replay.plan(found, arms, cfg)
        if json:
            output.json_out({**p.as_dict(), "arms": {"A": arms[0].version, "B": arms[1].version}})
        else:
            _render.replay_plan(p, arms, cfg)
        return

    def embed(texts: list[str]):
        from cairn_cli.daemon import dispatch

        return dispatch.embed_daemon_first(texts)[1]

    with ExitStack() as stack:
        tick = None if json else stack.enter_context(output.progress(len(found), "replay", unit="session"))
        report = setup.launch(
            found, arms, cfg, s, timeout=timeout, retries=retries, embed=embed, run_id=resume, progress=tick
        )
    output.json_out(report) if json else _render.replay_report(report)


def report(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id (cairn replay list).")],
    plot: Annotated[
        Path | None,
        typer.Option("--plot", dir_okay=False, help="Write B's win rate per criterion with intervals (PNG)."),
    ] = None,
    json: Json = False,
) -> None:
    """A replay run's report: per criterion win / tie / loss, B's win rate with its interval, the flip rate and the
    verdict; per arm the dedup rate, findability and cold-read means with n.

    Example: cairn replay report replay-20261204T090000
    """
    from cairn_cli.core.replay import run as replay

    opened_settings(read_only=True)
    row = replay.get_run(run_id)
    data = row.report or {"run": row.id, "status": row.status, "note": "no report yet (the run did not finish)"}
    if plot is not None and row.report:
        replay.plot(row.report, plot)
    if json:
        output.json_out(data)
    elif row.report:
        _render.replay_report(row.report)
    else:
        output.message(f"run {row.id} is {row.status}: no report yet (continue it with --resume {row.id})")
    if plot is not None and row.report:
        output.message(f"plot written to {plot}")


def list_(json: Json = False) -> None:
    """The replay runs, newest first, with their arms, sessions and verdicts.

    Example: cairn replay list --json
    """
    from cairn_cli.core.replay import run as replay

    opened_settings(read_only=True)
    runs = replay.list_runs()
    output.json_out(runs) if json else _render.replay_runs(runs)
