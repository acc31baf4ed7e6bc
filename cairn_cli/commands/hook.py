"""`cairn hook prompt|stop` (what Claude Code, Codex CLI and Gemini CLI run; entry.py runs them without Typer on the
hot path) and `cairn hook install|uninstall` (cairn's hooks in each agent's settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json

Where = Annotated[
    bool,
    typer.Option(
        "--project/--user", help="Edit the project's settings (default, e.g. ./.claude/settings.json) or the user's."
    ),
]
Agent = Annotated[
    str,
    typer.Option(
        "--agent",
        help="claude (.claude/settings.json), codex (.codex/hooks.json) or gemini (.gemini/settings.json).",
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the unified diff on stdout and write nothing.")]


def _run(*, remove: bool, project: bool, dry_run: bool, json: bool, agent: str, command: str | None = None) -> None:
    from cairn_cli.core.hooks import agent_settings as cs

    plan = cs.plan_install(
        "project" if project else "user",
        command or cs.default_command(),
        cwd=Path.cwd(),
        home=Path.home(),
        remove=remove,
        agent=agent,
    )
    if not dry_run:
        cs.apply(plan)
    if json:
        output.json_out({"path": str(plan.path), "changed": plan.changed, "dry_run": dry_run, "diff": plan.diff})
    elif dry_run:
        output.text_out(plan.diff)
    if not plan.changed:
        output.message(f"{plan.path} is already up to date")
    elif not dry_run:
        output.message(f"{'removed cairn hooks from' if remove else 'installed cairn hooks in'} {plan.path}")


def install(
    project: Where = True,
    agent: Agent = "claude",
    dry_run: DryRun = False,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help="The cairn command written into the hooks, before `hook prompt|stop` (default: the running python "
            "without site on cairn's launcher.py, the fastest start).",
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Install cairn's prompt and Stop hooks into the agent's settings (Claude Code: UserPromptSubmit and Stop; Codex
    CLI: the same events in .codex/hooks.json; Gemini CLI: BeforeAgent and AfterAgent), keeping everything else.

    Example: cairn hook install --user --dry-run · cairn hook install --agent gemini
    """
    _run(remove=False, project=project, dry_run=dry_run, json=json, agent=agent, command=command)


def uninstall(project: Where = True, agent: Agent = "claude", dry_run: DryRun = False, json: Json = False) -> None:
    """Remove cairn's hooks from the agent's settings, keeping everyone else's.

    Example: cairn hook uninstall --project --agent codex
    """
    _run(remove=True, project=project, dry_run=dry_run, json=json, agent=agent)


def prompt() -> None:
    """Prompt hook (Claude Code and Codex CLI: UserPromptSubmit; Gemini CLI: BeforeAgent): reads the agent's JSON
    on stdin, prints the rules and memories to inject (for Gemini, as the JSON it injects).

    Never fails the prompt: errors go to $CAIRN_HOME/logs/hook.log and the exit code is 0.
    Example: echo '{"session_id": "s1", "prompt": "why do the tests fail?", "cwd": "/src/webshop"}' | cairn hook prompt
    """
    from cairn_cli.hook_entry import run_prompt

    _globals_to_environ()
    raise typer.Exit(run_prompt())


def stop() -> None:
    """Stop hook (Claude Code and Codex CLI: Stop; Gemini CLI: AfterAgent): applies the response's [cm] block
    (memories, grades, cu / -!) and engagement; prints nothing.

    Never fails the session: errors go to $CAIRN_HOME/logs/hook.log and the exit code is 0.
    Example: echo '{"session_id": "s1", "last_assistant_message": "... [cm]{}[/cm]"}' | cairn hook stop
    """
    from cairn_cli.hook_entry import run_stop

    _globals_to_environ()
    raise typer.Exit(run_stop())


def _globals_to_environ() -> None:
    """`cairn --db-url X hook ...`: the hooks' lean entry reads the stores' URLs from the environment alone."""
    import os

    from cairn_cli.commands._common import globals_overrides

    os.environ.update({f"CAIRN_{name}": value for name, value in globals_overrides().items()})
