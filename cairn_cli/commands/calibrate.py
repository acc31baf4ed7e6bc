"""`cairn calibrate-floor`: set the reranker floor or the semantic-engagement threshold from graded deliveries."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
from cairn_cli.commands._common import Json, opened_settings


class Target(str, Enum):
    reranker = "reranker"
    engagement = "engagement"


def calibrate_floor(
    target: Annotated[
        Target,
        typer.Option(
            help="reranker: the floor of one model's reranker_score; engagement: the semantic cosine threshold."
        ),
    ] = Target.reranker,
    model: Annotated[
        str | None,
        typer.Option(
            help="The reranker_model of the graded deliveries (default: the live reranker), or `composite`: the "
            "composite floor under which a prompt abstains (the ranking profile and embedding model in force)."
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="--target engagement: the basis whose cosines are calibrated, semantic (the live second chance, "
            "default) or semantic-backfill (rows `cairn backfill-semantic` examined; its own threshold)."
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="--model composite: the ranking profile (kind of store) whose floor to set, default, sequence or dialog "
            "(default: the one in force; under auto, the one the graded deliveries were ranked with)."
        ),
    ] = None,
    instance: Annotated[
        str | None,
        typer.Option(help="Only this instance's graded deliveries (default: every instance sharing the store)."),
    ] = None,
    keep: Annotated[
        float, typer.Option(min=0.5, max=1.0, help="Share of grade-3 memories the floor must keep.")
    ] = 0.95,
    min_grade3: Annotated[
        int, typer.Option("--min-grade3", min=1, help="Refuse to calibrate on fewer grade-3 deliveries than this.")
    ] = 20,
    apply: Annotated[bool, typer.Option("--apply", help="Write the proposal to machine state (audited).")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", dir_okay=False, help="Write score histograms per grade, both thresholds marked, to this PNG."
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Propose the threshold that keeps --keep of grade-3 memories and drops the most grade-0; --apply sets it.

    Example: cairn calibrate-floor --model cross-encoder/ms-marco-MiniLM-L-6-v2 --plot floor.png --apply
    """
    from cairn_cli.core.learning import calibration

    report, changed = calibration.calibrate_floor(
        opened_settings(read_only=not apply),
        plot_to=plot,
        apply_it=apply,
        target=target.value,
        model=model,
        keep=keep,
        min_grade3=min_grade3,
        method=method,
        instance=instance,
        profile=profile,
    )
    if json:
        output.json_out({**report.as_dict(), "applied": changed, "plot": str(plot) if plot else None})
    else:
        _render.calibration(report, changed, plot)
