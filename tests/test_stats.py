"""stats: a hand-built delivery log (real SQLite) with known answers for every number the three reports print."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest
import typer
from typer.testing import CliRunner

from cairn_cli.cli import handle_errors
from cairn_cli.commands import stats as stats_cmd
from cairn_cli.config import Settings
from cairn_cli.core import stats
from cairn_cli.core.ranking.reranking import FLOOR_KEY
from cairn_cli.core.store import deliveries, state
from cairn_cli.core.store.dedup import add_memories
from cairn_cli.core.store.memories import MemoryInput
from cairn_cli.ml.reranker import MSMARCO

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

JAN1, MAR1 = dt.datetime(2024, 1, 1, 12), dt.datetime(2024, 3, 1, 12)
JAN2, JAN3, MAR2 = dt.datetime(2024, 1, 2, 9), dt.datetime(2024, 1, 3, 9), dt.datetime(2024, 3, 2, 9)

# memory, session, model, delivered_at, reranker_score, grade, hard_negative, graded_at, engaged, method, engaged_at
ROWS = [
    ("m1", "s1", MSMARCO, JAN1, 1.0, 3, False, JAN2, True, "lexical", JAN2),
    ("m2", "s1", MSMARCO, JAN1, 2.0, 3, False, JAN2, True, "lexical", JAN2),
    ("m1", "s1", MSMARCO, JAN1, 0.1, 2, False, JAN2, True, "lexical", JAN2),
    ("m2", "s1", MSMARCO, JAN1, -1.0, 0, True, JAN2, False, "lexical", JAN2),
    ("m1", "s1", MSMARCO, JAN1, 0.0, 1, False, JAN2, True, "semantic", JAN3),
    ("m2", "s1", MSMARCO, JAN1, 0.2, 3, False, None, False, "semantic", JAN3),  # graded_at NULL: dated JAN1
    ("m1", "s1", MSMARCO, JAN1, 0.3, None, None, None, True, None, None),  # decided, untagged
    ("m2", "s1", MSMARCO, JAN1, 0.3, None, None, None, False, None, None),  # decided, untagged
    ("m1", "s1", MSMARCO, JAN1, 0.3, None, None, None, None, None, None),  # undecided
    ("m2", "s1", MSMARCO, JAN1, 0.3, None, None, None, None, None, None),  # undecided
    ("m3", "s2", MSMARCO, MAR1, 3.0, 3, False, None, True, "lexical", MAR2),
    ("m3", "s2", MSMARCO, MAR1, 0.4, 3, False, None, False, "lexical", MAR2),
    ("m3", "s2", MSMARCO, MAR1, -2.0, 0, False, None, False, "lexical", MAR2),
    ("m4", "s2", "bm25", MAR1, 1.0, 3, False, None, None, None, None),
]
MEMORIES = {"m1": ("gen-1", "w1"), "m2": ("gen-1", "w2"), "m3": ("gen-2", "w3"), "m4": (None, None)}
HAND_WILSON_3_OF_4 = (0.3006, 0.9544)  # p=0.75, n=4, z=1.96: centre 0.62753, half-width 0.32689


@pytest.fixture
def log():
    """The ROWS above in a fresh store; returns the settings."""
    from cairn_cli.db.tables import MemoryDelivery

    s = Settings()
    entries = [
        MemoryInput(f"memory {name} about topic {name}", source_ref=ref, session_id=writer)
        for name, (ref, writer) in MEMORIES.items()
    ]
    ids = dict(zip(MEMORIES, (r.id for r in add_memories(entries, s, embed=lambda texts: None))))
    for turn, (mem, session, model, at, score, grade, hn, graded_at, engaged, method, engaged_at) in enumerate(ROWS):
        [did] = deliveries.record(
            [
                deliveries.DeliveryInput(
                    session_id=session,
                    turn=turn,
                    memory_id=ids[mem],
                    context_window="ctx",
                    context_key="k",
                    rank=1,
                    final_score=0.5,
                    score_components={"reranker_score": score},
                    reranker_model=model,
                    layer="main",
                    scope="global",
                )
            ],
            s,
        )
        MemoryDelivery.update(
            delivered_at=at,
            grade=grade,
            hard_negative=hn,
            graded_at=graded_at,
            engaged=engaged,
            engaged_method=method,
            engaged_at=engaged_at,
            engaged_score=None if engaged is None else 0.5,
        ).where(MemoryDelivery.id == did).execute()
    return s


@pytest.fixture
def run():
    app = typer.Typer()
    app.callback()(lambda: None)
    for name in ("deliveries", "labels", "floors"):
        app.command(name)(handle_errors(getattr(stats_cmd, name)))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def by_key(groups):
    return {(g.version, g.reranker_model): g for g in groups}


def test_wilson_matches_a_hand_computed_interval():
    assert stats.wilson(3, 4) == pytest.approx(HAND_WILSON_3_OF_4, abs=1e-4)
    assert stats.wilson(0, 0) == (None, None)
    low, high = stats.wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)


def test_delivery_stats_per_version_and_model(log):
    groups = stats.delivery_stats(log)
    assert [(g.version, g.reranker_model) for g in groups] == [
        ("(none)", "bm25"),
        ("gen-1", MSMARCO),
        ("gen-2", MSMARCO),
    ]
    g1, g2, none = by_key(groups)[("gen-1", MSMARCO)], by_key(groups)[("gen-2", MSMARCO)], groups[0]
    assert (g1.deliveries, g1.sessions, g1.graded, g1.graded_share, g1.mean_grade) == (10, 1, 6, 0.6, 2.0)
    assert g1.grade_hist == {0: 1, 1: 1, 2: 1, 3: 3} and g1.hard_negatives == 1
    assert (g2.deliveries, g2.graded, g2.graded_share, g2.mean_grade) == (3, 3, 1.0, 2.0)
    assert g2.grade_hist == {0: 1, 1: 0, 2: 0, 3: 2} and g2.hard_negatives == 0
    assert (none.deliveries, none.mean_grade, none.engagement, none.untagged) == (1, 3.0, {}, {"n": 0, "undecided": 1})


def test_methods_are_never_pooled_and_untagged_rows_are_reported_apart(log):
    g1 = by_key(stats.delivery_stats(log))[("gen-1", MSMARCO)]
    assert list(g1.engagement) == ["lexical", "semantic"]  # no pooled "all" rate, no untagged rate
    lexical, semantic = g1.engagement["lexical"], g1.engagement["semantic"]
    assert (lexical["n"], lexical["engaged"], lexical["rate"]) == (4, 3, 0.75)
    assert (lexical["ci_low"], lexical["ci_high"]) == pytest.approx(HAND_WILSON_3_OF_4, abs=1e-4)
    assert (semantic["n"], semantic["engaged"], semantic["rate"]) == (2, 1, 0.5)
    assert g1.untagged == {"n": 2, "undecided": 2}
    g2 = by_key(stats.delivery_stats(log))[("gen-2", MSMARCO)]
    assert list(g2.engagement) == ["lexical"] and g2.engagement["lexical"]["rate"] == pytest.approx(1 / 3)


def test_since_and_session_filters(log):
    assert [g.version for g in stats.delivery_stats(log, session="s2")] == ["(none)", "gen-2"]
    assert [g.version for g in stats.delivery_stats(log, since=dt.datetime(2024, 2, 1))] == ["(none)", "gen-2"]
    assert stats.delivery_stats(log, since=dt.datetime(2025, 1, 1)) == []
    assert [g.deliveries for g in stats.delivery_stats(log, session="s1")] == [10]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-02-01", dt.datetime(2024, 2, 1)),
        ("2024-02-01T12:30", dt.datetime(2024, 2, 1, 12, 30)),
        ("2024-02-01T00:00+02:00", dt.datetime(2024, 1, 31, 22)),  # aware: converted to naive UTC
        (None, None),
    ],
)
def test_parse_since(text, expected):
    assert stats.parse_since(text) == expected


def test_label_volume_per_day_and_source(log):
    rows = stats.label_volume(log)
    assert rows == [
        {
            "period": "2024-01-01",
            "grades": 1,
            "engagement_lexical": 0,
            "engagement_semantic": 0,
            "engagement_semantic-backfill": 0,
            "engagement_untagged": 2,
        },  # graded_at / engaged_at NULL: dated by the delivery
        {
            "period": "2024-01-02",
            "grades": 5,
            "engagement_lexical": 4,
            "engagement_semantic": 0,
            "engagement_semantic-backfill": 0,
            "engagement_untagged": 0,
        },
        {
            "period": "2024-01-03",
            "grades": 0,
            "engagement_lexical": 0,
            "engagement_semantic": 2,
            "engagement_semantic-backfill": 0,
            "engagement_untagged": 0,
        },
        {
            "period": "2024-03-01",
            "grades": 4,
            "engagement_lexical": 0,
            "engagement_semantic": 0,
            "engagement_semantic-backfill": 0,
            "engagement_untagged": 0,
        },
        {
            "period": "2024-03-02",
            "grades": 0,
            "engagement_lexical": 3,
            "engagement_semantic": 0,
            "engagement_semantic-backfill": 0,
            "engagement_untagged": 0,
        },
    ]
    assert stats.label_volume(log, since=dt.datetime(2024, 1, 2))[0]["period"] == "2024-01-02"
    assert [(r["period"], r["grades"]) for r in stats.label_volume(log, session="s2")] == [
        ("2024-03-01", 4),
        ("2024-03-02", 0),
    ]
    assert [(r["period"], r["grades"]) for r in stats.label_volume(log, bucket="month")] == [
        ("2024-01", 6),
        ("2024-03", 4),
    ]


def test_floor_stats_share_of_grade3_under_the_current_floor(log):
    configured = {r.model: r for r in stats.floor_stats(log)}
    assert configured[MSMARCO].floor == -3.0 and configured[MSMARCO].grade3_under == 0
    assert not configured[MSMARCO].alarm
    assert (
        configured["bm25"].floor,
        configured["bm25"].grade3,
        configured["bm25"].grade3_under,
        configured["bm25"].share_under,
    ) == (None, 1, 0, 0.0)  # no floor: nothing under it

    state.put(FLOOR_KEY.format(MSMARCO), 0.5, log, by="test", reason="a floor that drops load-bearing memories")
    [bm25, ms] = stats.floor_stats(log)
    assert (ms.floor, ms.grade3, ms.grade3_under, ms.share_under, ms.alarm) == (0.5, 5, 2, 0.4, True)
    assert ms.by_grade == {
        0: {"n": 2, "under": 2},
        1: {"n": 1, "under": 1},
        2: {"n": 1, "under": 1},
        3: {"n": 5, "under": 2},
    }
    assert not bm25.alarm
    assert stats.floor_stats(log, session="s2")[1].grade3_under == 1  # only 0.4 of (3.0, 0.4) in s2


def test_arm_engagement_by_writing_version_and_method(log):
    rows = stats.arm_engagement(log, version_arms={"gen-1": "A", "gen-2": "B"})
    got = {(r.arm, r.version, r.method): r for r in rows}
    assert list(got) == [
        ("A", "gen-1", "lexical"),
        ("A", "gen-1", "semantic"),
        ("A", "gen-1", "untagged"),
        ("B", "gen-2", "lexical"),
    ]
    lex = got[("A", "gen-1", "lexical")]
    assert (lex.n, lex.engaged, lex.rate, lex.sessions, lex.session_rate) == (4, 3, 0.75, 2, 0.75)  # w1 2/2, w2 1/2
    untagged = got[("A", "gen-1", "untagged")]
    assert (untagged.n, untagged.engaged, untagged.rate, untagged.ci_low) == (2, None, None, None)
    b = got[("B", "gen-2", "lexical")]
    assert (b.n, b.engaged, b.sessions, b.session_rate) == (3, 1, 1, pytest.approx(1 / 3))
    assert {r.arm for r in stats.arm_engagement(log)} == {None}


def test_deliveries_json_and_table(log, run):
    result = run("deliveries", "--json", "--session", "s1")
    assert result.exit_code == 0, result.output
    [group] = orjson.loads(result.stdout)
    assert group["engagement"]["lexical"]["rate"] == 0.75 and group["grade_hist"] == {"0": 1, "1": 1, "2": 1, "3": 3}
    table = run("deliveries")
    assert table.exit_code == 0, table.output
    assert "0.750 [0.301, 0.954] (4)" in table.stdout and "semantic rate [CI] (n)" in table.stdout


def test_deliveries_plot_writes_a_png(log, run, tmp_path):
    path = tmp_path / "stats.png"
    result = run("deliveries", "--plot", path)
    assert result.exit_code == 0, result.output
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert run("deliveries", "--plot", tmp_path / "missing" / "x.png").exit_code == 1


def test_labels_and_floors_json(log, run):
    labels = run("labels", "--json", "--since", "2024-03-01")
    assert labels.exit_code == 0, labels.output
    assert [r["period"] for r in orjson.loads(labels.stdout)] == ["2024-03-01", "2024-03-02"]
    state.put(FLOOR_KEY.format(MSMARCO), 0.5, log, by="test", reason="test")
    floors = run("floors", "--json")
    assert floors.exit_code == 0, floors.output
    ms = orjson.loads(floors.stdout)[1]
    assert (ms["model"], ms["share_under"], ms["alarm"]) == (MSMARCO, 0.4, True)
    table = run("floors")
    assert "ALARM" in table.stdout and "alarm: the floor of" in table.stderr


@pytest.mark.parametrize("command", ["deliveries", "labels", "floors"])
def test_bad_since_exits_2_with_one_line(log, run, command):
    result = run(command, "--since", "last tuesday")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --since 'last tuesday' is not an ISO date")
    assert result.stderr.count("\n") == 1
