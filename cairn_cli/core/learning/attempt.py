"""One training attempt: what it was asked (TrainOptions), what came out (TrainReport), and its record in machine
state (what `--auto` counts new labels from)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.learning.export import DEFAULT_ENGAGEMENT_METHODS
from cairn_cli.core.store import state

HELD_OUT = (  # the held-out numbers of student and incumbent: in the model card and the attempt record
    "incumbent",
    "student_agreement",
    "incumbent_agreement",
    "ranking_queries",
    "student_r5",
    "incumbent_r5",
    "student_ndcg10",
    "incumbent_ndcg10",
    "forms",
)
STATE_KEY = "reranker_training"  # the last attempt: when, on how many labels, the numbers, the outcome


@dataclass
class TrainOptions:
    data: Path | None = None
    base: str = "incumbent"  # incumbent | bundled | a directory
    epochs: int | None = None  # None: scaled to the training pairs (epochs_for)
    batch_size: int = 16
    lr: float = 5e-5
    margin: float = 1.0
    seed: int = 13
    device: str = "auto"
    holdout: float = 0.2
    min_gap: int = 2
    deploy_margin: float = 0.02
    recall_tolerance: float = 0.02
    engagement: bool = False
    engagement_min_pos: float = 0.2
    engagement_max_pairs: int = 2000
    engagement_methods: tuple[str, ...] = DEFAULT_ENGAGEMENT_METHODS
    instance: str | None = None  # train on one instance's labels (default: the pool of every instance)
    max_length: int | None = None
    layers: int | None = None
    max_train_pairs: int | None = None
    dry_run: bool = False
    deploy: bool = True
    learner: str = "student"  # student | fusion (core/learning/fusion.py) | both (the fusion first, then the student)


@dataclass
class TrainReport:
    data: str
    rows: int
    queries: int
    train_queries: int
    held_queries: int
    train_pairs: int
    engagement_pairs: int
    held_pairs: int
    min_gap: int
    seed: int
    outcome: str = "dry-run"  # dry-run | deployed | refused | trained (no deploy)
    engagement_methods: list[str] = field(default_factory=list)  # the bases pseudo-labels came from (--engagement)
    instance: str | None = None  # whose labels (None: every instance sharing the store)
    reason: str = ""
    incumbent: str | None = None
    base: str | None = None
    layers: int | None = None
    student_agreement: float | None = None
    incumbent_agreement: float | None = None
    ranking_queries: int | None = None  # held-out queries with a relevant memory: the gate's sample
    student_r5: float | None = None  # the deployed pipeline (composite + the student's blend) on them
    incumbent_r5: float | None = None  # the live pipeline (composite, or composite + the live reranker)
    student_ndcg10: float | None = None
    incumbent_ndcg10: float | None = None
    # per form (window: the hook's window, prompt: the prompt alone; query: a --data query): the same four numbers
    # and the queries they are over; the overall ones above pool the forms
    forms: dict = field(default_factory=dict)
    queries_better: int | None = None  # held-out (query, form) rankings whose nDCG@10 the student raises / lowers
    queries_worse: int | None = None
    deploy_margin: float | None = None
    recall_tolerance: float | None = None
    auto_promote_safe: bool | None = None
    student_dir: str | None = None
    train_stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def held_out(self) -> dict:
        """The held-out numbers of student and incumbent (the model card's and the attempt's record)."""
        return {name: getattr(self, name) for name in HELD_OUT}


def record_attempt(report, settings: Settings) -> None:
    """Record an attempt (a TrainReport, or the fusion learner's FusionReport: its outcome, reason, held_out())."""
    from cairn_cli.db.tables import MemoryDelivery

    labels = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False)).count()
    state.put(
        STATE_KEY,
        {
            "at": iso_now(),
            "outcome": report.outcome,
            "reason": report.reason,
            "labels": labels,
            **report.held_out(),
        },
        settings,
        by="cairn train-reranker",
        reason=f"{report.outcome}: {report.reason}",
    )


def new_labels(settings: Settings) -> tuple[int, int]:
    """(graded deliveries now, graded deliveries at the last training attempt)."""
    from cairn_cli.db.tables import MemoryDelivery

    now = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False)).count()
    last = (state.get(STATE_KEY, settings) or {}).get("labels", 0)
    return now, int(last)
