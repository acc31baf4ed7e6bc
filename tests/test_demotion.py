"""Teacher demotion (core/learning/demotion.py): once a learner is auto-promote-safe the prompt hook asks for rg grades
on a sampled share of turns; the probability is logged on the turn and its deliveries, the Stop expects no grades of
an unasked turn, the rate rises back on drift, and training weighs graded turns by inverse propensity."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.experiment import grading
from cairn_cli.core.experiment.rules import shipped_text
from cairn_cli.core.learning import demotion
from cairn_cli.core.learning.export import graded_rows, read_jsonl, write_jsonl
from cairn_cli.core.learning.pairs import make_pairs
from cairn_cli.core.store import deliveries, state
from cairn_cli.core.store.hookstate import get_turn
from tests.conftest import EXAMPLES, SHOWN

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

RG_INSTRUCTION = "- rg: grade every memory"
LEARNER = "20260101T000000000000Z-1"  # a deployed version's directory name


def _payload(event: str, session: str, **fields) -> bytes:
    return json.dumps({"session_id": session, "cwd": "/home/USER/webshop", "hook_event_name": event, **fields}).encode()


def prompt(capsys, session: str = "s1", text: str = "integration tests fail with connection refused on port 5433"):
    """`cairn hook prompt` as Claude Code runs it: (what it printed, the turn it recorded)."""
    assert hook_entry.run_prompt(_payload("UserPromptSubmit", session, prompt=text)) == 0
    out = capsys.readouterr().out
    turn = max(r.turn for r in deliveries.list_deliveries(Settings(), session_id=session))
    return out, turn


def stop(message: str, session: str = "s1") -> None:
    assert hook_entry.run_stop(_payload("Stop", session, last_assistant_message=message)) == 0


def hook_log(home) -> str:
    path = home / "logs" / "hook.log"
    return path.read_text() if path.exists() else ""


def deploy_learner(*, safe: bool = True, held: float = 0.93, name: str = LEARNER) -> None:
    """What trainer._deploy_student records for a deployed student (its card's auto_promote_safe and agreement)."""
    card = {"auto_promote_safe": safe, "held_out": {"student_agreement": held}}
    value = {"version": f"/home/u/.cairn/training_data/reranker-student.versions/{name}", "card": card}
    state.put(grading.DEPLOY_KEY, value, Settings(), by="test", reason="deployed")


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def _logged(session: str, turn: int) -> tuple[dict, list]:
    return get_turn(session, turn).data, deliveries.list_deliveries(Settings(), session_id=session, turn=turn)


# -- the hook ------------------------------------------------------------------------------------------------------


def test_without_an_auto_promote_safe_learner_every_turn_asks_and_logs_propensity_1(store, capsys):
    deploy_learner(safe=False)  # a deployed learner whose card does not say auto-promote-safe changes nothing
    for _ in range(3):
        out, turn = prompt(capsys)
        assert RG_INSTRUCTION in out
        data, rows = _logged("s1", turn)
        assert (data["grade_propensity"], data["grade_asked"]) == (1.0, True)
        assert rows and {(r.grade_propensity, r.grade_asked) for r in rows} == {(1.0, True)}


def test_an_auto_promote_safe_learner_asks_a_sampled_share_and_every_turn_logs_its_propensity(store, capsys):
    deploy_learner()
    seen = {True: 0, False: 0}
    for i in range(12):
        out, turn = prompt(capsys, session="demoted", text=f"integration tests fail with connection refused ({i})")
        data, rows = _logged("demoted", turn)
        asked = data["grade_asked"]
        seen[asked] += 1
        assert data["grade_propensity"] == grading.DEMOTED_RATE
        assert asked == grading.sampled("demoted", turn, grading.DEMOTED_RATE)  # the same draw a retry makes
        assert rows and {(r.grade_propensity, r.grade_asked) for r in rows} == {(grading.DEMOTED_RATE, asked)}
        assert SHOWN.search(out)  # memories are shown either way
        if asked:
            assert RG_INSTRUCTION in out and '"rg": ["12:3"' in out
        else:  # no rg instruction, no "rg" in the example; one line says to leave it out
            assert RG_INSTRUCTION not in out and '"rg": [' not in out
            assert grading.NOT_ASKED in out and "- cu:" in out and "- m:" in out
    assert seen[True] and seen[False]


def test_the_draw_is_the_turns_own_and_the_share_is_the_rate():
    assert all(grading.sampled("s", t, 0.3) == grading.sampled("s", t, 0.3) for t in range(50))
    share = sum(grading.sampled("s", t, 0.3) for t in range(4000)) / 4000
    assert 0.27 <= share <= 0.33
    assert all(grading.sampled("s", t, 1.0) for t in range(50)) and not any(
        grading.sampled("s", t, 0.0) for t in range(50)
    )


def test_the_unasked_rules_keep_a_valid_example_and_drop_only_the_rg_instruction():
    text = grading.ungraded_rules(shipped_text())
    example = max(re.findall(r"\[cm\](\{.*?\})\[/cm\]", text), key=len)  # not the empty block's ([cm]{}[/cm])
    assert set(json.loads(example)) == {"m", "cu", "-!"}
    assert [line for line in text.splitlines() if "rg" in line] == [grading.NOT_ASKED]
    assert text.count("\n") == shipped_text().count("\n")  # one line out, one line in


@pytest.mark.parametrize(
    "env,safe,rate,why",
    [
        (None, False, 1.0, "auto"),
        (None, True, grading.DEMOTED_RATE, "auto"),
        ("1", True, 1.0, "env"),
        ("0.5", False, 0.5, "env"),
        ("0", True, 0.0, "env"),
        (" AUTO ", True, grading.DEMOTED_RATE, "auto"),
    ],
)
def test_cairn_grade_rate_always_wins_over_the_automatic_rate(monkeypatch, env, safe, rate, why):
    if env is not None:
        monkeypatch.setenv("CAIRN_GRADE_RATE", env)
    deploy_learner(safe=safe)
    values = state.get_many(grading.KEYS, Settings())
    assert grading.rate(values, Settings()) == (rate, why)


def test_cairn_grade_rate_wins_in_the_hook_and_a_bad_value_is_one_line_naming_the_fix(
    store, capsys, cli, cairn_home, monkeypatch
):
    deploy_learner()
    monkeypatch.setenv("CAIRN_GRADE_RATE", "1")
    for _ in range(4):
        out, turn = prompt(capsys)
        assert RG_INSTRUCTION in out and _logged("s1", turn)[0]["grade_propensity"] == 1.0
    monkeypatch.setenv("CAIRN_GRADE_RATE", "0")
    out, turn = prompt(capsys)
    data, _ = _logged("s1", turn)
    assert RG_INSTRUCTION not in out and (data["grade_propensity"], data["grade_asked"]) == (0.0, False)
    monkeypatch.setenv("CAIRN_GRADE_RATE", "1.5")
    assert hook_entry.run_prompt(_payload("UserPromptSubmit", "s1", prompt="port 5433")) == 0  # never the session's
    assert "CAIRN_GRADE_RATE='1.5' is not auto or a number between 0 and 1" in hook_log(cairn_home)
    result = cli("stats", "grading")
    assert result.exit_code == 1 and "CAIRN_GRADE_RATE=auto" in result.output


# -- the Stop ------------------------------------------------------------------------------------------------------


def _turn_where(capsys, asked: bool, session: str = "s1"):
    """Prompts until one turn asks (or does not ask) for grades; its output and turn."""
    for i in range(40):
        out, turn = prompt(capsys, session=session, text=f"integration tests fail with connection refused [{i}]")
        if _logged(session, turn)[0]["grade_asked"] is asked:
            return out, turn
    raise AssertionError("no such turn in 40 prompts")


def test_an_unasked_turn_expects_no_grades_and_nothing_counts_them_missing(store, capsys, cli, cairn_home):
    deploy_learner()
    out, _ = _turn_where(capsys, asked=True)
    shown = [int(i) for i in SHOWN.findall(out)]
    stop("Use make db-up.\n[cm]{" + f'"rg": [{", ".join(json.dumps(f"{i}:2") for i in shown)}]' + "}[/cm]")
    out, unasked = _turn_where(capsys, asked=False)
    stop('Use make db-up.\n[cm]{"m": [], "cu": []}[/cm]')
    [line] = [x for x in hook_log(cairn_home).splitlines() if f" stop session s1 turn {unasked}:" in x]
    assert "0 graded, 0 grades rejected" in line and "0 problems" in line
    assert "grade" not in line.split("|", 1)[1] if "|" in line else True  # no note about grades either
    assert get_turn("s1", unasked).data["stop"]["graded"] == 0
    groups = orjson.loads(cli("stats", "deliveries", "--json").stdout)
    not_asked = [r for r in deliveries.list_deliveries(Settings(), session_id="s1") if r.grade_asked is False]
    assert sum(g["not_asked"] for g in groups) == len(not_asked) > 0
    assert sum(g["graded"] for g in groups) == len(shown)
    # the share is of the deliveries whose turn asked: every one of those was graded, none is missing
    assert {g["graded_share"] for g in groups if g["deliveries"] > g["not_asked"]} == {1.0}


def test_grades_an_unasked_turn_gets_anyway_are_kept_at_propensity_1(store, capsys, cairn_home):
    deploy_learner()
    out, _ = _turn_where(capsys, asked=False)
    first = int(SHOWN.findall(out)[0])
    stop(f'ok\n[cm]{{"rg": ["{first}:3"]}}[/cm]')
    assert "grades given on a turn that asked for none (teacher demotion): kept" in hook_log(cairn_home)
    [row] = [r for r in graded_rows(Settings()) if r.delivery_id is not None]
    assert (row.grade, row.grade_propensity) == (3, 1.0)


# -- the drift alarm -----------------------------------------------------------------------------------------------


def _student_turns(session: str, n: int, *, agree: bool, start: int = 1) -> None:
    """n graded turns the live learner ranked: two memories graded 3 and 0 each, the learner's logged score in the
    grades' order (`agree`) or reversed."""
    from cairn_cli.db.tables import MemoryDelivery

    model = f"student:/home/u/.cairn/training_data/reranker-student.versions/{LEARNER}"
    for turn in range(start, start + n):
        rows = [
            deliveries.DeliveryInput(
                session, turn, memory, "window", "key", rank, 0.5, {"reranker_score": score}, model, "prompt", "global"
            )
            for rank, (memory, score) in enumerate(((1, 2.0 if agree else -2.0), (2, -2.0 if agree else 2.0)), 1)
        ]
        ids = deliveries.record(rows, Settings())
        for did, grade in zip(ids, (3, 0)):
            MemoryDelivery.update(grade=grade).where(MemoryDelivery.id == did).execute()


def test_drift_raises_the_rate_back_to_1_from_the_stop_hook_and_a_recovery_demotes_again(store, capsys, cairn_home):
    deploy_learner(held=0.93)
    values = state.get_many(grading.KEYS, Settings())
    assert grading.auto_rate(values) == (grading.DEMOTED_RATE, "auto")
    _student_turns("old", demotion.DRIFT_MIN_PAIRS - 1, agree=False)
    assert demotion.check_drift(Settings())["alarm"] is None  # too few pairs: no verdict
    _student_turns("old", 5, agree=False, start=100)
    # the Stop of a graded turn runs the check: the learner disagrees with every fresh pair
    out, turn = _turn_where(capsys, asked=True)
    stop(f'ok\n[cm]{{"rg": ["{SHOWN.findall(out)[0]}:3"]}}[/cm]')
    assert "drift alarm: the learner agrees with 0.000" in hook_log(cairn_home)
    drift = state.get(grading.DRIFT_KEY, Settings())
    assert drift["alarm"] is True and drift["learner"] == LEARNER and drift["threshold"] == pytest.approx(0.85)
    values = state.get_many(grading.KEYS, Settings())
    assert grading.auto_rate(values) == (1.0, "drift")
    for _ in range(3):  # every turn asks again, at propensity 1
        out, turn = prompt(capsys)
        assert RG_INSTRUCTION in out and _logged("s1", turn)[0]["grade_propensity"] == 1.0
    # fresh grades the learner agrees with again: the newest 50 graded turns clear the alarm
    _student_turns("new", demotion.DRIFT_TURNS, agree=True)
    assert demotion.check_drift(Settings())["alarm"] is False
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (grading.DEMOTED_RATE, "auto")
    history = [h["reason"] for h in _history(grading.DRIFT_KEY)]
    assert len(history) == 2 and "grade every turn again" in history[0] and "recovered" in history[1]
    assert demotion.check_drift(Settings())["alarm"] is False and len(_history(grading.DRIFT_KEY)) == 2  # no churn


def _history(key: str) -> list[dict]:
    from cairn_cli.db.tables import MachineState

    return list(MachineState.get(MachineState.key == key).history)


def test_the_hook_reads_the_deployed_learner_where_training_writes_it():
    from cairn_cli.core.learning import deploy

    assert grading.DEPLOY_KEY == deploy.DEPLOY_KEY


def test_an_alarm_of_another_learner_does_not_hold_a_new_one_back():
    deploy_learner(name="old-version")
    state.put(grading.DRIFT_KEY, {"learner": "old-version", "alarm": True}, Settings(), by="t", reason="t")
    deploy_learner(name=LEARNER)
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (grading.DEMOTED_RATE, "auto")


def test_stats_grading_shows_the_rate_why_and_the_drift_alarm(store, cli, monkeypatch):
    def shown(*names: str) -> tuple:
        status = orjson.loads(cli("stats", "grading", "--json").stdout)
        return tuple(status[n] for n in names)

    assert shown("grade_rate", "reason", "learner", "drift_alarm") == (1.0, "auto", None, False)
    deploy_learner(held=0.9)
    _student_turns("d", 30, agree=False)
    demotion.check_drift(Settings())
    assert shown("grade_rate", "reason", "learner", "drift_alarm") == (1.0, "drift", LEARNER, True)
    (now,) = shown("drift_now")
    assert (now["pairs"], now["agreement"], now["alarm"]) == (30, 0.0, True)
    table = cli("stats", "grading")
    assert table.exit_code == 0 and "drift alarm" in table.stdout and "ON" in table.stdout
    monkeypatch.setenv("CAIRN_GRADE_RATE", "0.2")
    assert shown("grade_rate", "reason", "auto_rate", "drift_alarm") == (0.2, "env", 1.0, True)


# -- inverse-propensity weights ------------------------------------------------------------------------------------


def test_the_inverse_propensity_weight_reaches_the_label_rows_and_the_pairs(store, capsys, tmp_path):
    deploy_learner()
    out, _ = _turn_where(capsys, asked=True)
    shown = [int(i) for i in SHOWN.findall(out)]
    stop(f'ok\n[cm]{{"rg": ["{shown[0]}:3", "{shown[1]}:0"]}}[/cm]')
    rows = graded_rows(Settings())
    assert len(rows) == 2 and {r.grade_propensity for r in rows} == {grading.DEMOTED_RATE}
    # a turn asked at rate 1 (before demotion, or CAIRN_GRADE_RATE=1) weighs 1
    _student_turns("legacy", 1, agree=True)
    rows = graded_rows(Settings())
    keys = {r.query_key for r in rows}
    pairs = make_pairs(rows, keys, min_gap=2)  # the same gap (3 vs 0): the weights differ by the propensity only
    assert len(pairs) == 2
    by_query = {p.key: p.weight for p in pairs}
    demoted = [w for k, w in by_query.items() if k != "key"]
    assert demoted == [pytest.approx(by_query["key"] / grading.DEMOTED_RATE)]
    # the exported silver file keeps it (`--data` trains with the same weights)
    path = tmp_path / "silver.jsonl"
    write_jsonl(rows, path)
    assert sorted(r.grade_propensity for r in read_jsonl(path)) == sorted(r.grade_propensity for r in rows)


def test_a_silver_row_with_a_bad_propensity_is_refused(tmp_path):
    from cairn_cli.errors import InvalidInput

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"query": "q", "memory": "m", "grade": 2, "grade_propensity": 0}) + "\n")
    with pytest.raises(InvalidInput, match="grade_propensity must be a number in"):
        read_jsonl(path)


def test_a_rollback_puts_the_live_versions_card_in_force():
    from cairn_cli import config
    from cairn_cli.core.learning import deploy
    from cairn_cli.files import private_dir

    student = config.student_path()
    cards = {"v-old": {"auto_promote_safe": False}, "v-new": {"auto_promote_safe": True}}
    for name, card in cards.items():
        private_dir(deploy.versions_dir(student) / name)
        (deploy.versions_dir(student) / name / "model_card.json").write_text(json.dumps(card))
        deploy.deploy(deploy.versions_dir(student) / name, student)
    old, new = (str(deploy.versions_dir(student) / n) for n in cards)
    value = {"version": new, "previous": old, "card": cards["v-new"]}
    state.put(grading.DEPLOY_KEY, value, Settings(), by="test", reason="deployed")
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (grading.DEMOTED_RATE, "auto")
    deploy.rollback(Settings())  # the live student is the old one again: its card, not the newer one's, is in force
    assert state.get(grading.DEPLOY_KEY, Settings())["card"] == cards["v-old"]
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (1.0, "auto")


EMBEDDER = "all-MiniLM-L6-v2@20260101T000000000000Z-2"  # a live learned embedder's name


def _embedder_turns(session: str, n: int, *, agree: bool, model: str = EMBEDDER) -> None:
    """n graded turns ranked with `model`'s vectors: two memories graded 3 and 0, their logged similarity in the
    grades' order (`agree`) or reversed."""
    from cairn_cli.db.tables import MemoryDelivery

    for turn in range(1, n + 1):
        rows = [
            deliveries.DeliveryInput(
                session,
                turn,
                memory,
                "window",
                "key",
                rank,
                0.5,
                {"similarity": sim, "embed_model": model},
                "none",
                "prompt",
                "global",
            )
            for rank, (memory, sim) in enumerate(((1, 0.8 if agree else 0.1), (2, 0.1 if agree else 0.8)), 1)
        ]
        for did, grade in zip(deliveries.record(rows, Settings()), (3, 0)):
            MemoryDelivery.update(grade=grade).where(MemoryDelivery.id == did).execute()


def test_an_auto_promote_safe_learned_embedder_demotes_the_teacher_and_its_drift_raises_the_rate_back(store):
    card = {"name": EMBEDDER, "auto_promote_safe": True, "held_out": {"embedder_agreement": 0.92}}
    value = {"live": None, "pending": EMBEDDER, "card": card}
    state.put(grading.EMBEDDER_KEY, value, Settings(), by="test", reason="deployed")
    # while the store is re-embedded the card is the pending version's: nothing is demoted yet
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (1.0, "auto")
    state.put(grading.EMBEDDER_KEY, {**value, "live": EMBEDDER, "pending": None}, Settings(), by="t", reason="live")
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (grading.DEMOTED_RATE, "auto")
    # turns ranked with another embedder's vectors say nothing about this one
    _embedder_turns("before", demotion.DRIFT_MIN_PAIRS + 5, agree=False, model="all-MiniLM-L6-v2")
    status = demotion.check_drift(Settings())
    assert status["pairs"] == 0 and status["alarm"] is None
    _embedder_turns("after", demotion.DRIFT_MIN_PAIRS + 5, agree=False)
    status = demotion.check_drift(Settings())
    assert status["learner"] == EMBEDDER and status["held_agreement"] == 0.92 and status["alarm"] is True
    assert grading.auto_rate(state.get_many(grading.KEYS, Settings())) == (1.0, "drift")
