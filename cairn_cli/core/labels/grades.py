"""Labels on deliveries: the agent's relevance grades (rg) and its corroborations / contradictions (cu / -!)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.labels.cm import CmBlock
from cairn_cli.core.store import evidence, memories
from cairn_cli.errors import NotFound


@dataclass
class GradeReport:
    session_id: str
    turn: int
    applied: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    corroborated: list[int] = field(default_factory=list)
    contradicted: list[int] = field(default_factory=list)
    evidence_skipped: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def latest_turn(session_id: str, settings: Settings) -> int:
    from peewee import fn

    from cairn_cli.db.tables import MemoryDelivery

    turn = MemoryDelivery.select(fn.MAX(MemoryDelivery.turn)).where(MemoryDelivery.session_id == session_id).scalar()
    if turn is None:
        raise NotFound(f"session {session_id!r} has no deliveries", "check the session id with `cairn deliveries`")
    return int(turn)


def apply_relevance_grades(cm: CmBlock, session_id: str, settings: Settings, *, turn: int | None = None) -> GradeReport:
    """Write rg grades onto that turn's deliveries and apply cu / -! once per turn. Idempotent.

    A grade for a memory not delivered in that turn is rejected with a reason. Each cu / -! applied is a unique
    `evidence_applied` row claimed in the same transaction as the confidence change, so neither a re-run nor the
    Stop hook and `cairn grade` both applying the turn's block can count it twice.
    """
    from cairn_cli.db.tables import ephemeral_proxy, memory_proxy

    turn = latest_turn(session_id, settings) if turn is None else turn
    report = GradeReport(session_id, turn, problems=list(cm.problems))
    with memory_proxy.atomic(), ephemeral_proxy.atomic():  # the order every writer of both takes
        _write_grades(cm, session_id, turn, report)
        for kind, ids, out in (("cu", cm.corroborate, report.corroborated), ("-!", cm.contradict, report.contradicted)):
            for memory_id in ids:
                if not memories.exists(memory_id):
                    report.problems.append(f"{kind}: memory {memory_id} does not exist")
                elif not _claim_evidence(session_id, turn, memory_id, kind):
                    report.evidence_skipped.append(memory_id)
                else:
                    evidence.add_evidence(memory_id, corroborate=kind == "cu", settings=settings)
                    out.append(memory_id)
    return report


def _write_grades(cm: CmBlock, session_id: str, turn: int, report: GradeReport) -> None:
    from cairn_cli.db.tables import MemoryDelivery

    now = utcnow()
    delivered = {
        d.memory_id: d
        for d in MemoryDelivery.select().where(
            (MemoryDelivery.session_id == session_id) & (MemoryDelivery.turn == turn)
        )
    }
    for g in cm.grades:
        row = delivered.get(g.memory_id)
        if row is None:
            reason = f"memory {g.memory_id} was not delivered in turn {turn}"
            report.rejected.append({"memory_id": g.memory_id, "grade": g.grade, "reason": reason})
            continue
        if row.grade != g.grade or bool(row.hard_negative) != g.hard_negative or row.graded_at is None:
            row.grade, row.hard_negative, row.graded_at = g.grade, g.hard_negative, now
            row.save()
        report.applied.append(
            {"delivery_id": row.id, "memory_id": g.memory_id, "grade": g.grade, "hard_negative": g.hard_negative}
        )


def _claim_evidence(session_id: str, turn: int, memory_id: int, kind: str) -> bool:
    """Insert the turn's "applied" row for this evidence; False when it was already there (applied before)."""
    from cairn_cli.db.tables import EvidenceApplied, ephemeral_proxy

    query = EvidenceApplied.insert(session_id=session_id, turn=turn, memory_id=memory_id, kind=kind)
    return ephemeral_proxy.execute(query.on_conflict_ignore()).rowcount == 1
