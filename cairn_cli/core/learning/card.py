"""The model card written beside a deployed student and into its deployed-student state."""

from __future__ import annotations

from cairn_cli.clock import iso_now
from cairn_cli.core.learning.attempt import TrainReport


def card(report: TrainReport) -> dict:
    return {
        "created_at": iso_now(),
        "base": report.base,
        "layers": report.layers,
        "data": report.data,
        "rows": report.rows,
        "split": {
            "seed": report.seed,
            "train_queries": report.train_queries,
            "held_queries": report.held_queries,
            "min_gap": report.min_gap,
        },
        "pairs": {"train": report.train_pairs, "engagement": report.engagement_pairs, "held": report.held_pairs},
        "engagement_methods": report.engagement_methods,
        "instance": report.instance or "all (pooled)",
        "held_out": report.held_out(),
        "gate": {"deploy_margin": report.deploy_margin, "recall_tolerance": report.recall_tolerance},
        "auto_promote_safe": report.auto_promote_safe,
        "train": report.train_stats,
    }
