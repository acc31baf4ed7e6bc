"""The `cairn` console script. `cairn rank` and `cairn hook prompt|stop` — the shell hooks' hot path — are parsed
here (argparse) and sent to the daemon without importing Typer, rich or any model; every other command goes to the
Typer app."""

from __future__ import annotations

import sys


def _rank_parser():
    import argparse

    p = argparse.ArgumentParser(prog="cairn rank", add_help=False)
    p.add_argument("prompt", nargs="?")
    p.add_argument("--session", default="cli")
    p.add_argument("--scope")
    p.add_argument("--transcript")
    p.add_argument("-k", type=int)
    p.add_argument("--layer", default="prompt")
    p.add_argument("--turn", type=int)
    p.add_argument("--no-log", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--autostart", action="store_true")
    return p


def fast_rank(argv: list[str]) -> int:
    from cairn_cli.errors import CairnError
    from cairn_cli.hotpath import MAX_TURN

    try:
        args, unknown = _rank_parser().parse_known_args(argv)
        if (
            unknown
            or (args.k is not None and not 1 <= args.k <= 100)
            or (args.turn is not None and not 0 <= args.turn <= MAX_TURN)
        ):
            return _typer(["rank", *argv])  # let Typer word the usage error
        from cairn_cli.daemon import dispatch
        from cairn_cli.hotpath import emit_rank, rank_fields, read_prompt

        prompt = read_prompt(args.prompt)
        result = dispatch.rank(
            rank_fields(
                prompt, args.session, args.scope, args.transcript, args.k, args.layer, args.turn, not args.no_log
            ),
            {},
            autostart=args.autostart,
        )
        emit_rank(result, args.json)
        return 0
    except CairnError as exc:
        sys.stderr.write(f"error: {exc.one_line()}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        return unexpected(exc)


def unexpected(exc: Exception) -> int:
    """An exception cairn did not expect: one line and exit 1; the traceback only under CAIRN_DEBUG."""
    from cairn_cli import config

    try:
        debug = bool(config.get("DEBUG"))
    except Exception:  # a broken config.toml must not hide the original error
        debug = False
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write(f"error: unexpected {type(exc).__name__}: {exc} (set CAIRN_DEBUG=1 for a traceback)\n")
    return 1


def _typer(argv: list[str]) -> int:
    from cairn_cli.cli import app

    try:
        app(argv, prog_name="cairn")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def main() -> None:
    argv = sys.argv[1:]
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
    from cairn_cli.daemon import lock

    if not lock.hold(home_dir()):
        sys.stderr.write(
            "error: a cairn daemon is already running for this CAIRN_HOME (hint: see `cairn daemon status`)\n"
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
