"""Labels on deliveries: the agent's relevance grades (rg) and its corroborations / contradictions (cu / -!)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.labels.cm import CmBlock
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


def _hook_row(session_id: str, turn: int):
    from cairn_cli.db.tables import HookState

    row, _ = HookState.get_or_create(session_id=session_id, turn=turn, defaults={"data": {}})
    return row


def apply_relevance_grades(cm: CmBlock, session_id: str, settings: Settings, *, turn: int | None = None) -> GradeReport:
    """Write rg grades onto that turn's deliveries and apply cu / -! once per turn. Idempotent.

    A grade for a memory not delivered in that turn is rejected with a reason. Confidence evidence is recorded in
    the turn's hook_state, so re-applying the block does not count it twice.
    """
    from cairn_cli.core.store.memories import confidence_of
    from cairn_cli.db.tables import Memory, MemoryDelivery, ephemeral_proxy, memory_proxy

    turn = latest_turn(session_id, settings) if turn is None else turn
    report = GradeReport(session_id, turn, problems=list(cm.problems))
    now = utcnow()
    with ephemeral_proxy.atomic():
        delivered = {
            d.memory_id: d
            for d in MemoryDelivery.select().where(
                (MemoryDelivery.session_id == session_id) & (MemoryDelivery.turn == turn)
            )
        }
        for g in cm.grades:
            row = delivered.get(g.memory_id)
            if row is None:
                report.rejected.append(
                    {
                        "memory_id": g.memory_id,
                        "grade": g.grade,
                        "reason": f"memory {g.memory_id} was not delivered in turn {turn}",
                    }
                )
                continue
            if row.grade != g.grade or bool(row.hard_negative) != g.hard_negative or row.graded_at is None:
                row.grade, row.hard_negative = g.grade, g.hard_negative
                row.graded_at = now
                row.save()
            report.applied.append(
                {"delivery_id": row.id, "memory_id": g.memory_id, "grade": g.grade, "hard_negative": g.hard_negative}
            )
        hook = _hook_row(session_id, turn)
        data = dict(hook.data or {})
        done = {"cu": set(data.get("cu_applied", [])), "-!": set(data.get("contradict_applied", []))}
        with memory_proxy.atomic():
            for key, ids, out in (
                ("cu", cm.corroborate, report.corroborated),
                ("-!", cm.contradict, report.contradicted),
            ):
                for memory_id in ids:
                    mem = Memory.get_or_none(Memory.id == memory_id)
                    if mem is None:
                        report.problems.append(f"{key}: memory {memory_id} does not exist")
                        continue
                    if memory_id in done[key]:
                        report.evidence_skipped.append(memory_id)
                        continue
                    if key == "cu":
                        mem.corroborations += 1
                    else:
                        mem.contradictions += 1
                    mem.confidence = confidence_of(mem.corroborations, mem.contradictions, settings)
                    mem.updated_at = now
                    mem.save()
                    done[key].add(memory_id)
                    out.append(memory_id)
        data["cu_applied"], data["contradict_applied"] = sorted(done["cu"]), sorted(done["-!"])
        hook.data = data
        hook.save()
    return report
