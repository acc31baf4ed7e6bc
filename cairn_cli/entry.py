"""The `cairn` console script. `cairn rank` and `cairn hook prompt|stop` — the shell hooks' hot path — are parsed
here (by hand: `parse_rank`) and sent to the daemon without importing Typer, rich or any model; every other command
goes to the Typer app."""

from __future__ import annotations

import sys

_RANK_VALUES = {
    "--session": "session",
    "--scope": "scope",
    "--transcript": "transcript",
    "-k": "k",
    "--layer": "layer",
    "--turn": "turn",
}
_RANK_FLAGS = {"--no-log": "no_log", "--json": "json", "--autostart": "autostart"}


def parse_rank(argv: list[str]) -> dict | None:
    """`cairn rank`'s arguments, parsed by hand (argparse costs ~10 ms of imports on the hot path): the prompt and
    the options as Typer's `rank` takes them (`--opt value`, `--opt=value`, `-k5`, `--` before a prompt that
    starts with a dash). None for anything else (an unknown option, a missing or bad value, a second prompt):
    Typer words the usage error."""
    out: dict = {
        "prompt": None,
        "session": "cli",
        "scope": None,
        "transcript": None,
        "k": None,
        "layer": "prompt",
        "turn": None,
        "no_log": False,
        "json": False,
        "autostart": False,
    }
    args = iter(argv)
    options = True
    for arg in args:
        if options and arg == "--":
            options = False
            continue
        if options and arg.startswith("-") and arg != "-":
            value: str | None  # None: the option's value is missing (the end of argv)
            name, eq, value = arg.partition("=")
            if name in _RANK_FLAGS and not eq:
                out[_RANK_FLAGS[name]] = True
                continue
            if name not in _RANK_VALUES:
                if not (arg.startswith("-k") and not arg.startswith("--")):
                    return None
                name, eq, value = "-k", "=", arg[2:]
            if not eq:
                value = next(args, None)
                if value is None:
                    return None
            out[_RANK_VALUES[name]] = value
            continue
        if out["prompt"] is not None:
            return None
        out["prompt"] = arg
    for key in ("k", "turn"):
        if out[key] is not None:
            try:
                out[key] = int(out[key])
            except ValueError:
                return None
    return out


def fast_rank(argv: list[str]) -> int:
    from cairn_cli.core.ids import MAX_TURN
    from cairn_cli.errors import CairnError
    from cairn_cli.hotpath import unexpected

    try:
        args = parse_rank(argv)
        if (
            args is None
            or (args["k"] is not None and not 1 <= args["k"] <= 100)
            or (args["turn"] is not None and not 0 <= args["turn"] <= MAX_TURN)
        ):
            return _typer(["rank", *argv])  # let Typer word the usage error
        from cairn_cli.core.hooks.request import PromptRequest
        from cairn_cli.daemon import dispatch
        from cairn_cli.hotpath import emit_rank, read_prompt

        request = PromptRequest.from_cli(
            read_prompt(args["prompt"]),
            **{k: args[k] for k in ("session", "scope", "transcript", "k", "layer", "turn")},
            log=not args["no_log"],
        )
        result = dispatch.rank(request, {}, autostart=args["autostart"])
        emit_rank(result, args["json"])
        return 0
    except CairnError as exc:
        sys.stderr.write(f"error: {exc.one_line()}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        return unexpected(exc)


def _typer(argv: list[str]) -> int:
    from cairn_cli.cli import app

    try:
        app(argv, prog_name="cairn")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"]:  # without Typer: what a wrapper script or a bug report asks first
        from cairn_cli import __version__

        sys.stdout.write(f"cairn {__version__}\n")
        sys.exit(0)
    if argv[:1] == ["rank"] and "--help" not in argv and "-h" not in argv:
        sys.exit(fast_rank(argv[1:]))
    if argv[:1] == ["hook"] and argv[1:] in (["prompt"], ["stop"]):
        from cairn_cli import hook_entry

        sys.exit(hook_entry.run_prompt() if argv[1] == "prompt" else hook_entry.run_stop())
    if argv == ["daemon", "serve"]:
        _hold_daemon_lock()
    sys.exit(_typer(argv))


def _hold_daemon_lock() -> None:
    """A second daemon (an autostart racing another) exits here, before Typer or any model is imported; the first
    keeps the lock for its whole life (server.serve finds it held)."""
    from cairn_cli.config import home_dir
    from cairn_cli.daemon import singleton

    if not singleton.hold(home_dir()):
        sys.stderr.write(
            "error: a cairn daemon is already running for this CAIRN_HOME (hint: see `cairn daemon status`)\n"
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
