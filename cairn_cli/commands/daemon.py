"""`cairn daemon start|stop|status|serve`: the long-lived process that owns the models."""

from __future__ import annotations

from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Json

EXIT_BY_STATE = {"running": 0, "loading": 0, "stopped": 3, "stale": 3, "hung": 4, "failed": 1}


def _show(st, json: bool) -> None:
    if json:
        output.json_out({**st.health, "state": st.state, "pid": st.pid, "detail": st.detail})
    else:
        threads = st.health.get("torch_threads")
        output.text_out(
            f"{st.state}"
            + (f" (pid {st.pid})" if st.pid else "")
            + (f": {st.detail}" if st.detail else "")
            + (f", torch threads {threads}" if threads else "")
        )
        if st.health.get("embed_model"):
            reembed = (st.health.get("embedder") or {}).get("reembed")
            output.text_out(
                f"embedder: {st.health['embed_model']}"
                + (
                    f"; re-embedding for {reembed['pending']}: {reembed['staged']}/{reembed['to_stage']}"
                    if reembed
                    else ""
                )
            )
        search = st.health.get("search")
        if search:
            output.text_out(
                f"candidates: {search['path']}"
                + (f" ({search['vectors']:,} vectors)" if search.get("vectors") is not None else "")
                + (
                    f"; the postings of {search['postings_held']:,} memories held"
                    if search.get("postings_held") is not None
                    else ""
                )
                + (f"; the vector index above {search['above']:,} memories" if search.get("above") else "")
                + (
                    f"; {search['rankings'].get('short_of_the_bound', 0):,} of {search['rankings']['rankings']:,}"
                    " rankings stopped reading deeper short of the bound"
                    if search.get("rankings")
                    else ""
                )
                + (f"; not pgvector: {search['pgvector']}" if search.get("pgvector") else "")
            )
        plan = st.health.get("rerank_plan")
        if plan:
            _show_plan(plan)
        for w in st.health.get("warnings", []):
            output.message(f"warning: {w}")


def _show_plan(plan: dict) -> None:
    """The reranking plan the daemon measured: its reason, its latency margin, each precision's speed and fidelity."""
    output.text_out(f"rerank plan: {plan['reason']}")
    seen = plan.get("observed") or {}
    margin = plan.get("margin")
    if margin is not None:
        output.text_out(
            f"  p95 margin {margin:g}"
            + (
                f", learnt from {seen['calls']} stage calls (observed p95 {seen['p95_ms']:g} ms)"
                if seen
                else " (not yet learnt from live calls)"
            )
        )
    for precision, by_length in sorted(plan.get("throughput", {}).items()):
        fid = plan.get("fidelity", {}).get(precision, {})
        speeds = ", ".join(f"{n} tokens {v:g}" for n, v in sorted(by_length.items(), key=lambda x: -int(x[0])))
        verdict = "accepted" if fid.get("accepted") else "refused"
        output.text_out(
            f"  {precision}: pairs/s {speeds}; vs fp32 top-5 {fid.get('top5')}, "
            f"Spearman {fid.get('spearman')} ({verdict})"
        )


def start(
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait until the models are loaded.")] = 90.0,
    json: Json = False,
) -> None:
    """Start the daemon in the background and wait until it is ready.

    Example: cairn daemon start
    """
    from cairn_cli.config import home
    from cairn_cli.daemon import control

    st = control.start(home(), wait)
    _show(st, json)
    if st.state not in ("running", "loading"):
        raise typer.Exit(EXIT_BY_STATE.get(st.state, 1))


def stop(
    force: Annotated[bool, typer.Option("--force", help="SIGKILL a daemon that ignores SIGTERM.")] = False,
    json: Json = False,
) -> None:
    """Stop the daemon (SIGTERM; cleans a stale socket).

    Example: cairn daemon stop
    """
    from cairn_cli.config import home
    from cairn_cli.daemon import control

    st = control.stop(home(), force=force)
    _show(st, json)
    if st.state != "stopped":
        raise typer.Exit(EXIT_BY_STATE.get(st.state, 1))


def status(json: Json = False) -> None:
    """Tell the truth about the daemon: running, loading, hung, stale or stopped (exit 0, 0, 4, 3, 3).

    Example: cairn daemon status --json
    """
    from cairn_cli.config import home
    from cairn_cli.daemon import control

    st = control.status(home())
    _show(st, json)
    raise typer.Exit(EXIT_BY_STATE.get(st.state, 1))


def serve() -> None:
    """Run the daemon in the foreground (what `start` spawns; for systemd or debugging).

    Example: cairn daemon serve
    """
    from cairn_cli.commands._common import settings
    from cairn_cli.config import home
    from cairn_cli.daemon.server import serve as run

    raise typer.Exit(run(home(), settings()))
