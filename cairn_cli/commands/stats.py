"""`cairn stats deliveries|labels|floors|prompts|dedup|instances|stores`: grades, engagement, label volume and floor
checks over the delivery log; the write-side dedup rate over the memory store; how big each store is."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands._common import Instance, Json, Session, Since, opened_settings


class Bucket(str, Enum):
    day = "day"
    week = "week"
    month = "month"


def deliveries(
    since: Since = None,
    session: Session = None,
    instance: Instance = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            dir_okay=False,
            help="Write the grade histogram per version and engagement per version "
            "and method to this PNG (needs matplotlib).",
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="Only these engagement bases (comma list: lexical, semantic, semantic-backfill), each its own rate; "
            "a rate across bases is refused."
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Grades and engagement per generation version and reranker model; a rate per engaged_method, never pooled.

    Example: cairn stats deliveries --since 2024-05-01 --plot deliveries.png
    """
    from cairn_cli.core import stats

    asked = stats.methods_asked(method)
    s, start = opened_settings(read_only=True), stats.parse_since(since)
    groups = stats.delivery_stats(s, since=start, session=session, instance=instance)
    if asked is not None:
        for g in groups:
            g.engagement = {m: cell for m, cell in g.engagement.items() if m in asked}
    if plot is not None:
        from cairn_cli.core.experiment.ab import arms

        version_arms = {v: arm for arm, v in arms(s).versions.items() if v}
        stats.plot(plot, groups, stats.arm_engagement(s, since=start, session=session, version_arms=version_arms))
    if json:
        output.json_out(groups)
    elif not groups:
        output.message("no deliveries match")
    else:
        methods = stats.method_order({m for g in groups for m in g.engagement})
        output.table(
            [_group_row(g, methods) for g in groups],
            [
                "version",
                "reranker_model",
                "deliveries",
                "sessions",
                "graded",
                "mean grade",
                "grades 0/1/2/3",
                "hard neg",
                *(f"{m} rate [CI] (n)" for m in methods),
                "untagged n",
                "undecided",
            ],
            title="deliveries by generation version and reranker model",
        )
    if plot is not None:
        output.message(f"plot written to {plot}")


def labels(
    since: Since = None,
    session: Session = None,
    instance: Instance = None,
    bucket: Annotated[Bucket, typer.Option(help="Period of each row.")] = Bucket.day,
    json: Json = False,
) -> None:
    """Label volume over time per label source: agent grades, engagement per method, untagged engagement.

    Each label is dated (and filtered by --since) by its own graded_at / engaged_at, else by its delivery.

    Example: cairn stats labels --since 2024-05-01 --bucket week
    """
    from cairn_cli.core import stats

    rows = stats.label_volume(
        opened_settings(read_only=True),
        since=stats.parse_since(since),
        session=session,
        bucket=bucket.value,
        instance=instance,
    )
    if json:
        output.json_out(rows)
    elif not rows:
        output.message("no labels match")
    else:
        output.table(rows, list(rows[0]), title=f"labels per {bucket.value}")


def prompts(
    since: Since = None,
    session: Session = None,
    instance: Instance = None,
    bucket: Annotated[Bucket, typer.Option(help="Period of each row.")] = Bucket.day,
    json: Json = False,
) -> None:
    """Prompts ranked per period, how many got memories and how many abstained (nothing reached the floor).

    Example: cairn stats prompts --bucket week
    """
    from cairn_cli.core import stats

    rows = stats.prompt_stats(
        opened_settings(read_only=True),
        since=stats.parse_since(since),
        session=session,
        bucket=bucket.value,
        instance=instance,
    )
    if json:
        output.json_out(rows)
    elif not rows:
        output.message("no ranked prompts match")
    else:
        output.table(
            [
                {**r, "abstention_rate": f"{r['abstention_rate']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}]"}
                for r in rows
            ],
            ["period", "prompts", "injected", "abstained", "abstention_rate"],
            title=f"prompts per {bucket.value}",
        )


def dedup(
    since: Since = None,
    session: Annotated[str | None, typer.Option(help="Only this session's writes.")] = None,
    json: Json = False,
) -> None:
    """Write-side dedup rate per generation version: writes stored vs merged (exact, normalised, semantic), in-session.

    Example: cairn stats dedup --json
    """
    from cairn_cli.core import stats

    rows = stats.dedup_stats(opened_settings(read_only=True), since=stats.parse_since(since), session=session)
    if json:
        output.json_out(rows)
    elif not rows:
        output.message("no memory writes match")
    else:
        output.table(
            [
                {
                    **r,
                    **{f"{m}": n for m, n in r["merged_by"].items()},
                    "dedup_rate": f"{_pct(r['dedup_rate'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]",
                    "in_session": f"{r['in_session_merged']} ({_pct(r['in_session_rate'])})",
                }
                for r in rows
            ],
            ["version", "writes", "stored", "merged", *rows[0]["merged_by"], "dedup_rate", "in_session"],
            title="memory writes by generation version: stored or merged into an existing memory",
        )


def floors(
    since: Since = None,
    session: Session = None,
    instance: Instance = None,
    json: Json = False,
) -> None:
    """Share of grade-3 (load-bearing) deliveries scoring under each model's current floor; flags more than 10%.

    Example: cairn stats floors --json
    """
    from cairn_cli.core import stats

    rows = stats.floor_stats(
        opened_settings(read_only=True), since=stats.parse_since(since), session=session, instance=instance
    )
    if json:
        output.json_out(rows)
        return
    if not rows:
        output.message("no graded deliveries with a reranker_score match")
        return
    output.table(
        [
            {
                "model": r.model,
                "floor": "none" if r.floor is None else f"{r.floor:.6g}",
                "grade 3": r.grade3,
                "grade 3 under": r.grade3_under,
                "share under": _pct(r.share_under),
                **{f"grade {g} under": f"{r.by_grade[g]['under']}/{r.by_grade[g]['n']}" for g in (2, 1, 0)},
                "alarm": "ALARM" if r.alarm else "",
            }
            for r in rows
        ],
        [
            "model",
            "floor",
            "grade 3",
            "grade 3 under",
            "share under",
            "grade 2 under",
            "grade 1 under",
            "grade 0 under",
            "alarm",
        ],
        title="grade-3 deliveries under each model's current floor",
    )
    for r in rows:
        if r.alarm:
            output.message(
                f"alarm: the floor of {r.model} drops {_pct(r.share_under)} of grade-3 deliveries "
                f"(see `cairn calibrate-floor --model {r.model}`)"
            )


def _group_row(g, methods: list[str]) -> dict:
    row = {
        "version": g.version,
        "reranker_model": g.reranker_model,
        "deliveries": g.deliveries,
        "sessions": g.sessions,
        "graded": f"{g.graded} ({_pct(g.graded_share)})",
        "mean grade": "-" if g.mean_grade is None else f"{g.mean_grade:.2f}",
        "grades 0/1/2/3": "/".join(str(g.grade_hist[k]) for k in sorted(g.grade_hist)),
        "hard neg": g.hard_negatives,
        "untagged n": g.untagged["n"],
        "undecided": g.untagged["undecided"],
    }
    for m in methods:
        cell = g.engagement.get(m)
        row[f"{m} rate [CI] (n)"] = (
            "-" if cell is None else (f"{cell['rate']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}] ({cell['n']})")
        )
    return row


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"


def instances(since: Since = None, json: Json = False) -> None:
    """Per instance writing to this store (the machines of a team): memories written, prompts ranked, deliveries,
    sessions, graded deliveries and mean grade, engagement per method (never pooled across methods).

    Example: cairn stats instances --since 2026-11-01
    """
    from cairn_cli.core import stats

    rows = stats.instance_stats(opened_settings(read_only=True), since=stats.parse_since(since))
    if json:
        output.json_out(rows)
        return
    if not rows:
        output.message("nothing written yet")
        return
    methods = stats.method_order({m for r in rows for m in r["engagement"]})
    table = []
    for r in rows:
        cells = {k: r[k] for k in ("instance", "memories", "prompts", "deliveries", "sessions", "graded")}
        cells["mean grade"] = "-" if r["mean_grade"] is None else f"{r['mean_grade']:.2f}"
        for m in methods:
            e = r["engagement"].get(m)
            cells[f"{m} rate (n)"] = "-" if not e else f"{e['rate']:.2f} ({e['n']})"
        table.append(cells)
    output.table(table, list(table[0]), title="instances sharing this store")


def stores(json: Json = False) -> None:
    """How big each store is: URL, backend, size on disk; per table rows, size and long text; the logs.

    Example: cairn stats stores --json
    """
    from cairn_cli.core.store.sizes import store_sizes

    report = store_sizes(opened_settings(read_only=True))
    if json:
        output.json_out(report.as_dict())
        return
    rows = [
        {
            "store": s.store,
            "table": t.table,
            "rows": t.rows,
            "size": _bytes(t.bytes),
            "long text (chars)": "" if t.text_chars is None else f"{t.text_chars} ({t.long_text})",
        }
        for s in report.stores
        for t in s.tables
    ]
    for s in report.stores:
        output.message(f"{s.store}: {s.backend} {s.url}, {_bytes(s.bytes)} on disk, {s.rows} rows")
    output.table(rows, ["store", "table", "rows", "size", "long text (chars)"], title="stores")
    if report.logs:
        output.message(
            f"logs: {_bytes(sum(report.logs.values()))} in {len(report.logs)} files ("
            + ", ".join(f"{name} {_bytes(n)}" for name, n in report.logs.items())
            + ")"
        )


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"
