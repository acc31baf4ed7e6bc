"""`cairn train-reranker`: fine-tune a student cross-encoder on the labels; deploy it only if it beats the incumbent."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from cairn_cli import output
from cairn_cli.commands import _render
from cairn_cli.commands._common import Json, opened_settings
from cairn_cli.commands._options import option_values


class Learner(str, Enum):  # core/learning/trainer.py LEARNERS
    student = "student"
    fusion = "fusion"
    embedder = "embedder"
    both = "both"
    fusion_embedder = "fusion+embedder"
    all = "all"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def train_reranker(
    data: Annotated[
        Path | None,
        typer.Option(
            help="Train on this JSONL (query, memory, grade, hard_negative, query_key, delivery_id) instead of the "
            "graded deliveries."
        ),
    ] = None,
    export: Annotated[
        bool,
        typer.Option(
            "--export", help="Only write the graded deliveries to $CAIRN_HOME/training_data/relevance_silver.jsonl."
        ),
    ] = False,
    base: Annotated[
        str,
        typer.Option(
            help="incumbent (the live cross-encoder, else the bundled MiniLM), bundled, or a model directory."
        ),
    ] = "incumbent",
    epochs: Annotated[
        int | None,
        typer.Option(min=1, max=50, help="Passes over the pairs (default: scaled to them, 3-10, ~3000 pairs seen)."),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=512)] = 16,
    lr: Annotated[float, typer.Option(min=1e-7, max=1e-2)] = 5e-5,
    margin: Annotated[float, typer.Option(min=0.0, help="MarginRankingLoss margin (logits).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seeds the split, the pair order and the weights' init.")] = 13,
    device: Annotated[Device, typer.Option(case_sensitive=False)] = Device.auto,
    holdout: Annotated[float, typer.Option(min=0.05, max=0.9, help="Share of queries held out.")] = 0.2,
    min_gap: Annotated[
        int, typer.Option("--min-gap", min=1, max=3, help="Only pairs whose grades differ by at least this.")
    ] = 2,
    deploy_margin: Annotated[
        float,
        typer.Option(
            "--deploy-margin",
            min=-1.0,
            max=1.0,
            help="Deploy only when the ranking with the student blended in beats the live ranking on the held-out "
            "queries by this much nDCG@10 (absolute).",
        ),
    ] = 0.02,
    recall_tolerance: Annotated[
        float,
        typer.Option(
            "--recall-tolerance",
            min=0.0,
            max=1.0,
            help="... and neither form's held-out nDCG@10 or R@5 (relevant memories among the 5 shown) is more than "
            "this much lower.",
        ),
    ] = 0.02,
    engagement: Annotated[
        bool,
        typer.Option("--engagement", help="Add engagement observations as 0/3 pseudo-grades to the training pairs."),
    ] = False,
    engagement_min_pos: Annotated[
        float,
        typer.Option("--engagement-min-pos", min=0.0, max=1.0, help="Lexical overlap a positive pseudo-label needs."),
    ] = 0.2,
    engagement_max_pairs: Annotated[int, typer.Option("--engagement-max-pairs", min=0)] = 2000,
    instance: Annotated[
        str | None,
        typer.Option(help="Train on this instance's labels only (default: every instance sharing the store, pooled)."),
    ] = None,
    engagement_methods: Annotated[
        str,
        typer.Option(
            "--engagement-methods",
            help="Which engagement bases give pseudo-labels (comma list of lexical, semantic, semantic-backfill; "
            "the backfill's weaker labels only when named).",
        ),
    ] = "lexical,semantic",
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length", min=16, max=512, help="Token bound of a pair (default CAIRN_RERANKER_MAX_LENGTH)."
        ),
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers", min=1, max=48, help="Keep only the base's first N transformer layers: a faster student."
        ),
    ] = None,
    max_train_pairs: Annotated[int | None, typer.Option("--max-train-pairs", min=1)] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report the split and pair counts; train nothing.")
    ] = False,
    no_deploy: Annotated[bool, typer.Option("--no-deploy", help="Train and judge, never deploy.")] = False,
    learner: Annotated[
        Learner | None,
        typer.Option(
            case_sensitive=False,
            help="student (a cross-encoder reranker), fusion (the composite's weights fit per kind of store: seconds, "
            "few labels), embedder (the bi-encoder itself tuned, the store re-embedded: no hot-path cost), both "
            "(fusion, student), fusion+embedder or all (fusion, embedder, student). Default: fusion+embedder with "
            "--auto, else student.",
        ),
    ] = None,
    rollback: Annotated[
        bool,
        typer.Option(
            "--rollback",
            help="Put the previous student (--learner fusion: learned profile; embedder: embedder) back live.",
        ),
    ] = False,
    auto: Annotated[bool, typer.Option("--auto", help="For cron: train only when enough new labels arrived.")] = False,
    min_new_labels: Annotated[int, typer.Option("--min-new-labels", min=1)] = 200,
    json: Json = False,
) -> None:
    """Pairwise fine-tune a student cross-encoder on graded deliveries; it goes live only if it ranks better.

    Held-out queries are split off first (by query, seeded). Each is ranked as production ranks it (its context
    window and its prompt alone over the memory store, or over its own --data rows): once with the student blended
    in as it would be deployed, once as ranked live. The student deploys only when nDCG@10 over both forms rises by
    --deploy-margin and neither form's nDCG@10 or R@5 falls by more than --recall-tolerance (grade >= 2 relevant;
    pairwise agreement is reported beside it). A deployed
    student replaces the live one atomically; the daemon picks it up on its next request.
    Example: cairn train-reranker --engagement --engagement-methods lexical,semantic --json
    """
    from cairn_cli.core.learning import jobs
    from cairn_cli.core.learning.attempt import TrainOptions
    from cairn_cli.core.learning.export import engagement_methods as parse_methods

    asked = option_values(
        TrainOptions,
        locals(),
        engagement_methods=parse_methods(engagement_methods),
        deploy=not no_deploy,
        learner=(learner.value if learner else "fusion+embedder" if auto else "student"),
    )
    job = jobs.Job(rollback=rollback, export=export, auto=auto, min_new_labels=min_new_labels)
    with contextlib.ExitStack() as stack:

        def progress(total: int, what: str):
            return stack.enter_context(output.progress(total, what, unit="pair"))

        outcome = jobs.run_job(
            opened_settings(read_only=export or dry_run),
            TrainOptions(**asked),
            job,
            progress=None if json else progress,
        )
    output.json_out(outcome) if json else _render.training_outcome(outcome)
