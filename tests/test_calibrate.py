"""calibrate-floor: thresholds from graded deliveries (real SQLite), applied to machine state with an audit trail."""

from __future__ import annotations

import math

import orjson
import pytest
import typer
from typer.testing import CliRunner

from cairn_cli.cli import handle_errors
from cairn_cli.commands.calibrate import calibrate_floor
from cairn_cli.config import Settings
from cairn_cli.core.labels.engagement import SEMANTIC, MemoryText, engagement_decisions
from cairn_cli.core.learning import calibration
from cairn_cli.core.learning.calibration import ENGAGEMENT_KEY, drop_table, propose_floor
from cairn_cli.core.ranking.reranking import FLOOR_KEY, floors
from cairn_cli.core.store import deliveries, state
from cairn_cli.errors import InvalidInput
from cairn_cli.ml.reranker import MSMARCO

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

# Hand-built grades: 19 of the 20 grade-3 scores are >= 2.0, so keep 0.95 gives exactly 2.0.
HAND = {
    3: [float(i) for i in range(1, 21)],
    2: [0.5, 2.5, 5.0, 8.0],
    1: [-4.0, 1.5, 3.0],
    0: [-5.0, -1.0, 0.5, 1.5, 2.5, 3.0],
}
NOW = {3: (20, 0), 2: (4, 0), 1: (3, 1), 0: (6, 1)}  # grade: (n, dropped) at ms-marco's configured -3.0
PROPOSED = {3: (20, 1), 2: (4, 1), 1: (3, 2), 0: (6, 4)}


@pytest.fixture
def calibrate_cli():
    app = typer.Typer()
    app.callback()(lambda: None)  # keep `calibrate-floor` a subcommand, as in the real app
    app.command("calibrate-floor")(handle_errors(calibrate_floor))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["calibrate-floor", *map(str, args)], catch_exceptions=False)


def seed(cli, rows, model=MSMARCO):
    """rows: (grade, reranker_score, engaged_semantic) -> graded delivery rows of `model`."""
    from cairn_cli.db.tables import MemoryDelivery

    mem_ids = [
        orjson.loads(cli("memory", "add", f"memory {i} about topic{i}", "--json").stdout)["id"] for i in range(3)
    ]
    inputs = [
        deliveries.DeliveryInput(
            session_id="s1",
            turn=n + 1,
            memory_id=mem_ids[n % 3],
            context_window="ctx",
            context_key="k",
            rank=1,
            final_score=0.5,
            score_components={"reranker_score": score},
            reranker_model=model,
            layer="main",
            scope="global",
        )
        for n, (_, score, _) in enumerate(rows)
    ]
    for delivery_id, (grade, _, semantic) in zip(deliveries.record(inputs, Settings()), rows):
        MemoryDelivery.update(grade=grade, engaged_semantic=semantic).where(MemoryDelivery.id == delivery_id).execute()


def hand_rows():
    return [(g, s, None) for g, scores in HAND.items() for s in scores]


def counts(table):
    return {g: (row["n"], row["dropped"]) for g, row in table.items()}


@pytest.mark.parametrize(
    "scores, keep, expected",
    [
        (HAND, 0.95, 2.0),
        (HAND, 1.0, 1.0),  # keep all: the lowest grade-3 score
        (HAND, 0.5, 11.0),  # 10 of 20 kept: 20..11
        ({3: [1.0, 5.0, 1.0, 1.0]}, 0.75, 1.0),  # ties at the floor are kept (score < floor is dropped)
        ({3: [0.3, 0.9, 0.1, 0.7]}, 0.5, 0.7),  # order of input does not matter
    ],
)
def test_propose_floor_is_the_highest_floor_keeping_the_share(scores, keep, expected):
    floor = propose_floor(scores, keep)
    assert floor == expected
    kept = sum(s >= floor for s in scores[3])
    assert kept >= math.ceil(keep * len(scores[3]))
    assert not any(
        sum(s >= higher for s in scores[3]) >= keep * len(scores[3]) for higher in scores[3] if higher > floor
    )


@pytest.mark.parametrize(
    "scores, min_grade3, message",
    [
        ({3: [1.0] * 5, 0: [0.0] * 50}, 20, "only 5 grade-3 score(s); calibrating needs at least 20"),
        ({0: [0.0] * 50}, 1, "only 0 grade-3 score(s)"),
    ],
)
def test_thin_data_is_refused(scores, min_grade3, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        propose_floor(scores, 0.95, min_grade3=min_grade3)


def test_drop_table_counts_scores_under_the_floor():
    assert drop_table(HAND, 2.0) == {
        0: {"n": 6, "dropped": 4, "share": 4 / 6},
        1: {"n": 3, "dropped": 2, "share": 2 / 3},
        2: {"n": 4, "dropped": 1, "share": 0.25},
        3: {"n": 20, "dropped": 1, "share": 0.05},
    }
    assert drop_table({3: [1.0]}, None)[3] == {"n": 1, "dropped": 0, "share": 0.0}  # no floor drops nothing
    assert drop_table({}, 0.0)[0] == {"n": 0, "dropped": 0, "share": None}


def test_calibrate_reads_only_the_models_graded_deliveries(cli):
    seed(cli, hand_rows())
    seed(cli, [(0, 100.0, None)] * 3, model="BAAI/bge-reranker-base")  # another model's scale: ignored
    seed(cli, [(None, -50.0, None)])  # ungraded: ignored
    report = calibration.calibrate(Settings(), model=MSMARCO)
    assert (report.current, report.proposal) == (-3.0, 2.0)
    assert counts(report.now) == NOW and counts(report.proposed) == PROPOSED


def test_cli_reports_current_and_proposed_drops(cli, calibrate_cli):
    seed(cli, hand_rows())
    result = calibrate_cli("--model", MSMARCO)
    assert result.exit_code == 0, result.output
    assert "reranker_floor:cross-encoder/ms-marco-MiniLM-L-6-v2: current -3 -> proposed 2" in result.stderr
    assert "dry run: pass --apply" in result.stderr
    cells = [
        [c.strip() for c in line.strip("│").split("│")] for line in result.stdout.splitlines() if line.startswith("│")
    ]
    assert "dropped proposed" in result.stdout
    assert cells == [
        ["3", "20", "0", "0.0%", "1", "5.0%"],
        ["2", "4", "0", "0.0%", "1", "25.0%"],
        ["1", "3", "1", "33.3%", "2", "66.7%"],
        ["0", "6", "1", "16.7%", "4", "66.7%"],
    ]
    data = orjson.loads(calibrate_cli("--model", MSMARCO, "--json").stdout)
    assert (data["current"], data["proposal"], data["applied"]) == (-3.0, 2.0, None)
    assert data["proposed"]["3"] == {"n": 20, "dropped": 1, "share": 0.05}
    assert state.get(FLOOR_KEY.format(MSMARCO), Settings()) is None  # a dry run writes nothing


@pytest.mark.parametrize(
    "args, env, code, message",
    [
        (["--model", MSMARCO], {}, 2, "only 5 grade-3 score(s); calibrating needs at least 20 (grade more"),
        (
            ["--model", "nobody/model"],
            {},
            1,
            "no graded deliveries with a reranker_score for nobody/model (pass "
            "--model; models with graded deliveries: cross-encoder/ms-marco",
        ),
        ([], {"CAIRN_RERANKER_ENABLED": "false"}, 2, "the live reranker is none"),
        (["--keep", "0.3"], {}, 2, "greater than or equal to 0.5"),
        (["--target", "bogus"], {}, 2, "bogus"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(cli, calibrate_cli, monkeypatch, args, env, code, message):
    seed(cli, [(3, float(i), None) for i in range(5)] + [(0, -1.0, None)] * 30)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = calibrate_cli(*args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    if code == 1 or "only" in message or "none" in message:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_apply_writes_audited_state_once_and_the_floor_is_used(cli, calibrate_cli):
    seed(cli, hand_rows())
    first = orjson.loads(calibrate_cli("--model", MSMARCO, "--apply", "--json").stdout)
    assert first["applied"] is True
    again = calibrate_cli("--model", MSMARCO, "--apply")
    assert again.exit_code == 0 and "unchanged" in again.stderr
    value, history = _audit(FLOOR_KEY.format(MSMARCO))
    assert value == 2.0 and len(history) == 1
    record = history[0]
    assert (record["by"], record["old"], record["new"]) == ("cairn calibrate-floor", None, 2.0)
    assert "keeps 19/20 grade-3" in record["reason"] and "drops 4/6 grade-0" in record["reason"]
    assert record["evidence"]["counts"] == {"0": 6, "1": 3, "2": 4, "3": 20} and record["evidence"]["keep"] == 0.95
    assert floors(Settings())[MSMARCO] == 2.0
    assert calibration.calibrate(Settings(), model=MSMARCO).current == 2.0  # the calibrated floor is now current


def test_engagement_threshold_is_calibrated_and_then_used(cli, calibrate_cli):
    rows = [(3, 0.0, i / 100) for i in range(21, 41)] + [(0, 0.0, 0.1), (0, 0.0, 0.3), (1, 0.0, None)]
    seed(cli, rows)
    mem, response = MemoryText(1, "alpha beta gamma", []), "zeta eta theta"
    embed = lambda texts: [[1.0, 0.0] if t == mem.content else [0.4, math.sqrt(1 - 0.16)] for t in texts]  # noqa: E731
    before, _ = engagement_decisions([mem], response, "", Settings(), embed)
    assert not before[0].engaged and before[0].semantic == pytest.approx(0.4)  # under the configured 0.55

    data = orjson.loads(calibrate_cli("--target", "engagement", "--apply", "--json").stdout)
    assert (data["key"], data["current"], data["proposal"], data["applied"]) == (ENGAGEMENT_KEY, 0.55, 0.22, True)
    assert data["counts"] == {"0": 2, "1": 0, "2": 0, "3": 20}  # rows without a cosine are not counted
    assert data["proposed"]["0"]["dropped"] == 1
    assert calibration.engagement_semantic_min(Settings()) == 0.22
    after, _ = engagement_decisions([mem], response, "", Settings(), embed)
    assert after[0].engaged and after[0].method == SEMANTIC


def test_plot_writes_a_png(cli, calibrate_cli, tmp_path):
    pytest.importorskip("matplotlib")
    seed(cli, hand_rows())
    path = tmp_path / "floor.png"
    result = calibrate_cli("--model", MSMARCO, "--plot", path)
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_plot_without_matplotlib_names_the_extra(cli, calibrate_cli, tmp_path, monkeypatch):
    import sys

    seed(cli, hand_rows())
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = calibrate_cli("--model", MSMARCO, "--plot", tmp_path / "floor.png")
    assert result.exit_code == 1, result.output
    assert "--plot needs matplotlib (pip install 'cairn_cli[plot]')" in result.stderr
    assert not (tmp_path / "floor.png").exists()


def _audit(key: str) -> tuple:
    """(value, audit trail) of a machine-state key as stored; (None, []) when it was never set."""
    from cairn_cli.db.tables import MachineState

    row = MachineState.get_or_none(MachineState.key == key)
    return (None, []) if row is None else (row.value, list(row.history))
