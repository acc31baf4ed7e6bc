"""The write-side A/B: arms drawn per prompt and stamped on memories; the session-level sequential gate;
promotion / retirement with an audit trail; selfmod idempotent."""

from __future__ import annotations

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.experiment import ab, rules
from cairn_cli.core.store import deliveries
from cairn_cli.core.store.dedup import add_memories

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
from cairn_cli.core.store.memories import MemoryInput

pytestmark = pytest.mark.usefixtures("backend")


def test_arms_are_drawn_per_prompt_seeded_and_never_for_subagents():
    s = Settings()
    draws = [ab.assign("sess", t, is_subagent=False, settings=s)[0] for t in range(200)]
    assert set(draws) == {"A", "B"} and 70 < draws.count("B") < 130
    assert draws == [ab.assign("sess", t, is_subagent=False, settings=s)[0] for t in range(200)]  # AB_SEED
    assert ab.assign("sess", 1, is_subagent=True, settings=s) == (None, "gen-1", None)
    _, version, instruction = next(
        ab.assign("sess", t, is_subagent=False, settings=s) for t in range(200) if draws[t] == "B"
    )
    assert version == ab.b_version("gen-1", ab.SHIPPED_B) and instruction == ab.SHIPPED_B
    off = Settings(AB_TEST_ENABLED=False)
    assert {ab.assign("sess", t, is_subagent=False, settings=off)[0] for t in range(20)} == {None}


def test_ab_assign_command_records_the_arm(cli):
    out = cli("ab", "assign", "--session", "s9", "--json")
    assert out.exit_code == 0, out.output
    got = orjson.loads(out.stdout)
    from cairn_cli.core.store.hookstate import get_turn

    assert get_turn("s9", got["turn"]).arm == got["arm"] and got["arm"] in ("A", "B")


def _world(sessions: list[tuple[float, float]], *, grades=(2, 2), delivered_per_memory=4, age_days=30) -> Settings:
    """Per session, one memory per arm written `age_days` ago; each delivered `delivered_per_memory` times a day
    later with the given lexical engagement rates (A, B), and graded."""
    import datetime as dt

    from cairn_cli.db.tables import Memory, MemoryDelivery

    s = Settings()
    current = ab.arms(s)
    written = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=age_days)
    for i, (rate_a, rate_b) in enumerate(sessions):
        session = f"writer-{i}"
        for arm, rate, grade in (("A", rate_a, grades[0]), ("B", rate_b, grades[1])):
            [res] = add_memories(
                [MemoryInput(f"{arm} memory of {session}", source_ref=current.versions[arm], session_id=session)], s
            )
            engaged = round(rate * delivered_per_memory)
            ids = deliveries.record(
                [
                    deliveries.DeliveryInput(
                        f"reader-{i}", n + 1, res.id, "window", "k", 1, 0.5, {}, "none", "prompt", "global"
                    )
                    for n in range(delivered_per_memory)
                ],
                s,
            )
            Memory.update(created_at=written).where(Memory.id == res.id).execute()
            for n, did in enumerate(ids):
                MemoryDelivery.update(
                    engaged=n < engaged,
                    engaged_method="lexical",
                    engaged_score=0.3,
                    grade=grade,
                    delivered_at=written + dt.timedelta(days=1),
                ).where(MemoryDelivery.id == did).execute()
    return s


def test_thin_data_never_promotes_and_says_why():
    s = _world([(0.25, 1.0)] * 5)
    d = ab.evaluate(s)
    assert d.decision == "continue" and d.wins == 5 and "thin data" in d.reason and "AB_MIN_SESSIONS" in d.reason
    off = Settings(AB_TEST_ENABLED=False)  # the experiment stopped: no new draws, the stamped arms stay analysable
    assert ab.assign("new", 1, is_subagent=False, settings=off)[0] is None
    assert ab.evaluate(off).as_dict() == d.as_dict()


def test_b_that_wins_enough_sessions_with_the_grade_guard_is_promoted(cli):
    s = _world([(0.25, 0.75)] * 12)
    d = ab.evaluate(s)
    assert d.decision == "promote" and d.wins == 12 and d.llr >= d.upper, d.reason
    a, b = d.arms
    assert b["engagement"]["lexical"]["rate"] == 0.75 and a["engagement"]["lexical"]["rate"] == 0.25
    assert b["engagement"]["lexical"]["ci"][0] > a["engagement"]["lexical"]["ci"][1]
    assert ab.queue_add("Name the file a memory is about first.", s) == ["Name the file a memory is about first."]
    dry = cli("ab", "promote", "--dry-run", "--json")
    assert orjson.loads(dry.stdout)["applied"] is None and rules.live(s).version == "gen-1"
    out = cli("ab", "selfmod", "--json")
    applied = orjson.loads(out.stdout)["applied"]
    assert applied["generation_version"] == "gen-2" and applied["versions"]["A"] == "gen-2"
    live = rules.live(s)
    assert live.version == "gen-2" and live.text.endswith(ab.SHIPPED_B)
    now = ab.arms(s)
    assert now.b_instruction == "Name the file a memory is about first." and now.queue == []
    assert now.versions["B"] == ab.b_version("gen-2", now.b_instruction)
    audit = _audit(rules.VERSION_KEY)[1][-1]
    assert audit["by"] == "cairn ab selfmod" and audit["new"] == "gen-2"
    assert _audit(ab.VERSIONS_KEY)[1][-1]["evidence"]["wins"] == 12
    # selfmod again: the new B has no data, nothing changes (idempotent under cron)
    before = [_audit(k)[1] for k in (rules.VERSION_KEY, ab.VERSIONS_KEY, ab.B_KEY)]
    again = orjson.loads(cli("ab", "selfmod", "--json").stdout)
    assert again["decision"]["decision"] == "continue" and again["applied"] is None
    assert [_audit(k)[1] for k in (rules.VERSION_KEY, ab.VERSIONS_KEY, ab.B_KEY)] == before


def test_the_grade_guard_blocks_a_b_whose_memories_are_graded_worse():
    s = _world([(0.25, 0.75)] * 12, grades=(3, 1))
    d = ab.evaluate(s)
    assert d.decision == "continue" and "grade guard fails" in d.reason


def test_a_clearly_losing_b_is_retired_and_the_queue_moves_on(cli):
    s = _world([(0.75, 0.25)] * 12)
    d = ab.evaluate(s)
    assert d.decision == "retire" and d.losses == 12
    out = orjson.loads(cli("ab", "promote", "--json").stdout)
    assert out["applied"]["decision"] == "retire" and rules.live(s).version == "gen-1"
    assert ab.arms(s).versions == {"A": "gen-1", "B": None} and ab.arms(s).b_instruction is None
    assert ab.assign("x", 1, is_subagent=False, settings=s)[0] is None  # no B: no experiment
    ab.queue_add("Keep one insight per memory.", s)  # an empty queue: the candidate becomes B at once
    assert ab.arms(s).b_instruction == "Keep one insight per memory."


def test_rates_are_per_method_and_untagged_rows_stay_apart():
    s = _world([(0.5, 0.5)] * 2)
    from cairn_cli.db.tables import MemoryDelivery

    rows = list(MemoryDelivery.select().order_by(MemoryDelivery.id))
    MemoryDelivery.update(engaged_method="semantic", engaged=True).where(MemoryDelivery.id == rows[0].id).execute()
    MemoryDelivery.update(engaged_method=None, engaged=True).where(MemoryDelivery.id == rows[1].id).execute()
    a, _ = ab.evaluate(s).arms
    sem = a["engagement"]["semantic"]
    assert (sem["n"], sem["engaged"], sem["rate"]) == (1, 1, 1.0)
    assert a["engagement"]["lexical"]["n"] == 6 and a["untagged"] == 1


def test_status_shows_versions_queue_and_arms(cli):
    _world([(0.25, 0.5)] * 3)
    out = cli("ab", "status")
    assert out.exit_code == 0, out.output
    assert "gen-1" in out.stdout and "downstream quality" in out.stdout and "thin data" in out.output
    data = orjson.loads(cli("ab", "status", "--json").stdout)
    assert data["versions"]["A"] == "gen-1" and data["decision"]["wins"] == 3


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["ab", "queue", "add", "  "], 2, "the instruction is empty"),
        (["ab", "assign"], 2, "--session"),
    ],
)
def test_ab_bad_input(cli, args, code, message):
    out = cli(*args)
    assert out.exit_code == code and message in out.output


def test_only_mature_sessions_count_and_only_on_deliveries_inside_their_window():
    import datetime as dt

    from cairn_cli.db.tables import MemoryDelivery

    s = _world([(0.25, 0.75)] * 12, age_days=3)  # younger than AB_MATURE_DAYS (7): not counted yet
    d = ab.evaluate(s)
    assert (d.wins, d.losses, d.decision) == (0, 0, "continue") and d.arms[1]["deliveries"] == 48
    late = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(days=30)
    ten_days_on = Settings(AB_MATURE_DAYS=2)  # the same sessions with a 2-day window: mature now
    assert ab.evaluate(ten_days_on).wins == 12
    # B's memories delivered again after the window, never used: an outcome, once counted, stays
    from cairn_cli.db.tables import Memory

    b_ids = [m.id for m in Memory.select().where(Memory.source_ref == ab.arms(s).versions["B"])]
    for did in deliveries.record(
        [deliveries.DeliveryInput("late", 1, mid, "w", "k", 1, 0.5, {}, "none", "prompt", "global") for mid in b_ids]
        * 5,
        s,
    ):
        MemoryDelivery.update(delivered_at=late, engaged=False, engaged_method="lexical").where(
            MemoryDelivery.id == did
        ).execute()
    assert ab.evaluate(ten_days_on).wins == 12
    assert ab.evaluate(ten_days_on).arms[1]["deliveries"] == 48 + 5 * 12  # the status still shows them all


def _audit(key: str) -> tuple:
    """(value, audit trail) of a machine-state key as stored; (None, []) when it was never set."""
    from cairn_cli.db.tables import MachineState

    row = MachineState.get_or_none(MachineState.key == key)
    return (None, []) if row is None else (row.value, list(row.history))
