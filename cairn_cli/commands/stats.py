"""`cairn stats deliveries|labels|floors|prompts|dedup|instances|stores|grading`: grades, engagement, label volume
and floor checks over the delivery log; the write-side dedup rate over the memory store; how big each store is; the
grade rate in force (teacher demotion) and its drift alarm."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
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
    groups = stats.deliveries_report(
        opened_settings(read_only=True), since=since, session=session, instance=instance, asked=asked, plot_to=plot
    )
    output.json_out(groups) if json else _render.delivery_groups(groups)
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
    output.json_out(rows) if json else _render.label_volume(rows, bucket.value)


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
    output.json_out(rows) if json else _render.prompt_rows(rows, bucket.value)


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
    output.json_out(rows) if json else _render.dedup_rows(rows)


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
    output.json_out(rows) if json else _render.floor_rows(rows)


def instances(since: Since = None, json: Json = False) -> None:
    """Per instance writing to this store (the machines of a team): memories written, prompts ranked, deliveries,
    sessions, graded deliveries and mean grade, engagement per method (never pooled across methods).

    Example: cairn stats instances --since 2026-11-01
    """
    from cairn_cli.core import stats

    rows = stats.instance_stats(opened_settings(read_only=True), since=stats.parse_since(since))
    output.json_out(rows) if json else _render.instance_rows(rows)


def stores(json: Json = False) -> None:
    """How big each store is: URL, backend, size on disk; per table rows, size and long text; the logs.

    Example: cairn stats stores --json
    """
    from cairn_cli.core.store.sizes import store_sizes

    report = store_sizes(opened_settings(read_only=True))
    output.json_out(report.as_dict()) if json else _render.store_sizes(report)


def grading(json: Json = False) -> None:
    """The grade rate in force (share of hook prompts asked for rg grades), why (auto, env, drift), the drift alarm.

    Example: cairn stats grading --json
    """
    from cairn_cli.core.learning.demotion import grading_status

    status = grading_status(opened_settings(read_only=True))
    output.json_out(status) if json else _render.grading_status(status)
