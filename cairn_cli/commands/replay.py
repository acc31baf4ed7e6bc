"""`cairn replay run|report|list`: the offline write-side A/B (core/replay/)."""

from __future__ import annotations

from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json, Since, opened_settings


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
    from cairn_cli.core import stats
    from cairn_cli.core.replay import run as replay
    from cairn_cli.core.replay.sessions import sessions as find_sessions

    s = opened_settings()  # a dry run too: the arms are machine-managed state (a fresh home gets its empty stores)
    if resume is not None:
        cfg = replay.ReplayConfig(**replay.get_run(resume).config)
        cfg.max_calls, cfg.max_cost_usd = max_calls, max_cost_usd  # a cap is this invocation's, never inherited
        arm_a, arm_b = (replay.ArmSpec(**{k: d[k] for k in ("arm", "version", "rules")}) for d in (cfg.a, cfg.b))
    else:
        arm_a, arm_b = replay.resolve_arms(s, a, b, b_instruction)
        cfg = replay.ReplayConfig(
            transcripts=transcripts,
            limit=limit,
            since=since,
            backend=backend.value,
            cmd=cmd,
            base_url=base_url,
            writer_model=writer_model or s.REPLAY_WRITER_MODEL,
            judge_model=judge_model or s.REPLAY_JUDGE_MODEL,
            a=vars(arm_a),
            b={**vars(arm_b), "instruction": b_instruction},
            seed=seed,
            concurrency=concurrency,
            redact=not no_redact,
            max_calls=max_calls,
            max_cost_usd=max_cost_usd,
            price_in=price_in,
            price_out=price_out,
        )
    if cfg.backend == "command" and not cfg.cmd:
        from cairn_cli.errors import InvalidInput

        raise InvalidInput("--backend command needs --cmd", "pass --cmd 'PROGRAM ARGS' (it reads the prompt on stdin)")
    found = find_sessions(cfg.transcripts, since=stats.parse_since(cfg.since), limit=cfg.limit)
    if dry_run:
        p = replay.plan(found, (arm_a, arm_b), cfg)
        if json:
            output.json_out({**p.as_dict(), "arms": {"A": arm_a.version, "B": arm_b.version}})
            return
        cost = "unknown" if p.cost_usd is None else f"${p.cost_usd:.2f}"
        output.key_values(
            {
                "arms": f"A {arm_a.version} vs B {arm_b.version}",
                "backend": cfg.backend + (f" ({cfg.cmd})" if cfg.cmd else ""),
                "models": f"writer {cfg.writer_model}, judge {cfg.judge_model}",
                "sessions": p.sessions,
                "turns": p.turns,
                **{
                    f"{r} calls": f"{p.calls[r]} (~{p.input_tokens[r]:,} in / {p.output_tokens[r]:,} out tokens)"
                    for r in p.calls
                },
                "estimated cost": cost,
            },
            title="replay plan (dry run: no call made)",
        )
        for note in p.notes:
            output.message(note)
        return
    from cairn_cli.core.replay.backends import make_backend
    from cairn_cli.daemon import dispatch

    made = make_backend(cfg.backend, cmd=cfg.cmd, base_url=cfg.base_url, timeout_s=timeout, retries=retries)

    def embed(texts: list[str]):
        return dispatch.embed_daemon_first(texts)[1]

    with ExitStack() as stack:
        tick = None if json else stack.enter_context(output.progress(len(found), "replay", unit="session"))
        report = replay.execute(found, (arm_a, arm_b), cfg, s, backend=made, embed=embed, run_id=resume, progress=tick)
    if json:
        output.json_out(report)
    else:
        _show(report)


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
        _show(row.report)
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
    if json:
        output.json_out(runs)
    elif not runs:
        output.message("no replay runs yet (cairn replay run)")
    else:
        output.table(
            [{**r, "verdicts": "; ".join(f"{c}: {v}" for c, v in r["verdicts"].items())} for r in runs],
            ["run", "status", "created_at", "a", "b", "sessions", "verdicts"],
            title="replay runs (offline analyses: they never promote)",
        )


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _show(report: dict) -> None:
    status = report["status"] + (f": {report['stopped']}" if report.get("stopped") else "")
    output.key_values(
        {
            "run": report["run"],
            "status": status.upper() if report["status"] == "partial" else status,
            "arms": f"A {report['arms']['A']['version']} vs B {report['arms']['B']['version']}",
            "models": f"writer {report['models']['writer']}, judge {report['models']['judge']} ({report['models']['backend']})",
            "prompts": ", ".join(f"{k} {v}" for k, v in report["prompts"].items()),
            "sessions": f"{report['sessions']} of {report['sessions_planned']}",
            "turns judged": f"{report['judged_turns']} of {report['turns']}",
            "calls made": f"{report['calls']['made']} (${report['calls']['cost_usd']:.4f})",
            "judge answers unparsed": report["judge_unparsed"],
        },
        title="replay (offline: never promotes)",
    )
    rows = []
    for criterion, c in report["criteria"].items():
        interval = "-" if c.get("low") is None else f"[{c['low']:.2f}, {c['high']:.2f}]"
        rows.append(
            {
                "criterion": criterion,
                "B wins / ties / A wins": f"{c['wins_b']} / {c['ties']} / {c['wins_a']}",
                "B win rate [95%]": f"{_pct(c.get('win_rate'))} {interval}",
                "sign test p": "-" if c.get("p_value") is None else f"{c['p_value']:.3f}",
                "flip rate": _pct(c.get("flip_rate")),
                "sessions": c.get("sessions"),
                "verdict": c.get("verdict"),
            }
        )
    output.table(rows, list(rows[0]) if rows else ["criterion"], title="judge, per criterion (unit: the session)")
    arm_rows = []
    for arm, m in report["arms_metrics"].items():
        cold = "-" if m["coldread_mean"] is None else f"{m['coldread_mean']:.2f}"
        arm_rows.append(
            {
                "arm": f"{arm} {report['arms'][arm]['version']}",
                "memories": m["memories"],
                "dedup rate": f"{_pct(m['dedup_rate'])} ({m['duplicates']})",
                "findability": f"{_pct(m['findability'])} (n {m['findability_n']})",
                "cold-read mean": f"{cold} (n {m['coldread_n']})",
            }
        )
    output.table(arm_rows, list(arm_rows[0]), title="per arm, beside the judge")
