"""What `cairn train-reranker` was asked to do: roll back, export, or train (one run at a time per CAIRN_HOME;
with --auto only when enough new labels arrived)."""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.learning.attempt import TrainOptions, new_labels
from cairn_cli.core.learning.deploy import rollback
from cairn_cli.core.learning.export import graded_rows, silver_path, write_jsonl
from cairn_cli.core.learning.trainer import train_learners


@dataclass
class Job:
    """What `cairn train-reranker` was asked to do besides training: roll back, export, or train for cron."""

    rollback: bool = False
    export: bool = False
    auto: bool = False
    min_new_labels: int = 200


def run_job(settings: Settings, opts: TrainOptions, job: Job, *, progress=None) -> dict:
    """The whole command: one JSON-ready outcome (`outcome` says which: rolled-back | exported | locked | skipped |
    dry-run | deployed | refused | trained). Training runs one at a time per CAIRN_HOME (cron may overlap a slow
    run); with --auto it runs only when enough graded deliveries arrived since the last attempt."""
    from cairn_cli.core.job_locks import store_lock

    if job.rollback:
        if opts.learner == "fusion":
            from cairn_cli.core.learning import fusion

            return {"outcome": "rolled-back", **fusion.rollback(settings)}
        if opts.learner == "embedder":
            from cairn_cli.core.store import embedders

            back = embedders.rollback(settings)
            done = embedders.finish_pending(settings)  # the old vectors are staged: only what changed is embedded
            previous = back.get("live") or settings.EMBED_MODEL
            return {
                "outcome": "rolled-back",
                "learner": "embedder",
                "version": back["pending"],
                "previous": previous,
                "reembedded": done,
            }
        return {"outcome": "rolled-back", **rollback(settings)}
    if job.export:
        rows = graded_rows(settings, instance=opts.instance)
        write_jsonl(rows, silver_path())
        return {"outcome": "exported", "path": str(silver_path()), "rows": len(rows)}
    with store_lock("train-reranker") as locked:
        if not locked:
            return {"outcome": "locked", "reason": "another train-reranker run holds the lock; nothing done"}
        if job.auto:
            now, last = new_labels(settings)
            if now - last < job.min_new_labels:
                reason = f"{now - last} new labels since the last training (< --min-new-labels {job.min_new_labels})"
                return {"outcome": "skipped", "reason": reason}
        return train_learners(settings, opts, progress=progress)
