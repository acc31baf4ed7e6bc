"""The root Typer app: the table of commands, the one error-mapping decorator, and main().

Command modules are light at import (typer + stdlib); everything heavy is imported inside the command body.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from cairn_cli.commands import (
    ab,
    backfill,
    calibrate,
    config,
    daemon,
    db,
    deliveries,
    doctor,
    engage,
    hook,
    labels,
    mcp,
    memory,
    privacy,
    rank,
    replay,
    stats,
    train,
)
from cairn_cli.commands._common import set_globals
from cairn_cli.errors import CairnError

app = typer.Typer(
    name="cairn",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # help is plain text: no rich markup, so "[cm]" and other bracketed literals are shown as written
    rich_markup_mode=None,
    help="Decide which long-term memories an agent sees, label every delivery, learn from the labels.",
)


def _group(help: str) -> typer.Typer:
    return typer.Typer(no_args_is_help=True, help=help, rich_markup_mode=None)


memory_app = _group(help="The persistent memory store.")
daemon_app = _group(help="The model daemon that keeps the hot path fast.")
hook_app = _group(help="The agent hooks (Claude Code, Codex CLI, Gemini CLI) and their installation.")
ab_app = _group(help="The write-side live A/B of the generation rules.")
replay_app = _group(
    help="The offline write-side A/B: real sessions replayed through two rules, judged (never promotes)."
)
ab_queue_app = _group(help="Candidate instructions for arm B.")
db_app = _group(help="The stores themselves: make one on purpose, copy one between SQLite and PostgreSQL.")
config_app = _group(help="The settings: what is in force and where it came from.")
stats_app = _group(
    help="What the labels say: deliveries, label volume, floors, abstentions, write-side dedup; how big the stores are."
)


def handle_errors(fn: Callable) -> Callable:
    """Turn CairnError into one stderr line + its exit code; anything unexpected into exit 1 with a hint."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            _check_text(kwargs)
            return fn(*args, **kwargs)
        except CairnError as exc:
            sys.stderr.write(f"error: {exc.one_line()}\n")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as exc:  # the one place that maps the unknown (the lean entry shares it)
            from cairn_cli.hotpath import unexpected

            raise typer.Exit(unexpected(exc)) from None

    return wrapper


def _check_text(params: dict) -> None:
    """Refuse a text argument that is not UTF-8 (Python hands undecodable argv bytes over as lone surrogates, which
    nothing can store or send): one line naming it, instead of an UnicodeEncodeError from deep inside. Paths are
    exempt (a file name may be any bytes)."""
    from cairn_cli.errors import InvalidInput

    for name, value in params.items():
        for text in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raw = text[exc.start : exc.end].encode(
                    "utf-8", "surrogateescape" if text[exc.start] >= "\udc80" else "surrogatepass"
                )
                label = name.rstrip("_").replace("_", "-")
                raise InvalidInput(
                    f"{label} is not valid UTF-8 text (bytes {raw.hex(' ')} at character {exc.start})",
                    "pass UTF-8 text: check the shell's locale, or the file it came from",
                ) from None


def _print_version(value: bool) -> None:
    if value:
        from cairn_cli import __version__

        sys.stdout.write(f"cairn {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    db_url: Annotated[str | None, typer.Option("--db-url", help="Memory store URL (overrides CAIRN_DB_URL).")] = None,
    ephemeral_db_url: Annotated[
        str | None, typer.Option("--ephemeral-db-url", help="Delivery log URL (overrides CAIRN_EPHEMERAL_DB_URL).")
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print cairn's version and exit."),
    ] = False,
) -> None:
    """cairn: memory injection with provenance, labels and a learned reranker."""
    set_globals(DB_URL=db_url, EPHEMERAL_DB_URL=ephemeral_db_url)


# -- the table of commands ------------------------------------------------------------------------------------
COMMANDS: list[tuple[typer.Typer, str, Callable]] = [
    (app, "rank", rank.rank),
    (app, "log-delivery", deliveries.log_delivery),
    (app, "deliveries", deliveries.list_deliveries),
    (app, "grade", labels.grade),
    (app, "engage", engage.engage),
    (app, "backfill-semantic", backfill.backfill_semantic),
    (app, "train-reranker", train.train_reranker),
    (app, "calibrate-floor", calibrate.calibrate_floor),
    (app, "doctor", doctor.doctor),
    (app, "forget", privacy.forget),
    (app, "redact", privacy.redact),
    (app, "mcp", mcp.mcp),
    (memory_app, "add", memory.add),
    (memory_app, "import", memory.import_),
    (memory_app, "list", memory.list_),
    (memory_app, "show", memory.show),
    (memory_app, "supersede", memory.supersede),
    (memory_app, "corroborate", memory.corroborate),
    (memory_app, "contradict", memory.contradict),
    (memory_app, "embed", memory.embed),
    (memory_app, "export", memory.export),
    (memory_app, "edit", memory.edit),
    (daemon_app, "start", daemon.start),
    (daemon_app, "stop", daemon.stop),
    (daemon_app, "status", daemon.status),
    (daemon_app, "serve", daemon.serve),
    (hook_app, "prompt", hook.prompt),
    (hook_app, "stop", hook.stop),
    (hook_app, "install", hook.install),
    (hook_app, "uninstall", hook.uninstall),
    (ab_app, "assign", ab.assign),
    (ab_app, "status", ab.status),
    (ab_app, "promote", ab.promote),
    (ab_app, "selfmod", ab.selfmod),
    (ab_queue_app, "add", ab.queue_add),
    (ab_queue_app, "list", ab.queue_list),
    (replay_app, "run", replay.run),
    (replay_app, "report", replay.report),
    (replay_app, "list", replay.list_),
    (db_app, "init", db.init),
    (db_app, "copy", db.copy),
    (stats_app, "deliveries", stats.deliveries),
    (stats_app, "labels", stats.labels),
    (stats_app, "floors", stats.floors),
    (stats_app, "prompts", stats.prompts),
    (stats_app, "dedup", stats.dedup),
    (stats_app, "instances", stats.instances),
    (stats_app, "stores", stats.stores),
    (stats_app, "grading", stats.grading),
    (config_app, "show", config.show),
]
for _parent, _name, _fn in COMMANDS:
    _parent.command(_name)(handle_errors(_fn))
app.add_typer(memory_app, name="memory")
app.add_typer(daemon_app, name="daemon")
app.add_typer(hook_app, name="hook")
ab_app.add_typer(ab_queue_app, name="queue")
app.add_typer(ab_app, name="ab")
app.add_typer(replay_app, name="replay")
app.add_typer(stats_app, name="stats")
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
