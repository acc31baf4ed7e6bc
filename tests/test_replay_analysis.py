"""replay analysis: the pre-registered statistics of the offline write-side A/B, on judges whose behaviour is known
(position-biased, always-B, always-A), hand-computed binomials, and a seeded coverage simulation."""

from __future__ import annotations

import json
import random

import pytest

from cairn_cli.core.replay.analysis import (
    B_BETTER,
    B_WORSE,
    CRITERIA,
    MIN_SESSIONS,
    NO_DIFFERENCE,
    TOO_FEW,
    JudgedPair,
    PairOutcome,
    bootstrap_interval,
    compare,
    pair_outcome,
    session_scores,
    sign_test,
)
from cairn_cli.errors import InvalidInput


def answers_for(arm: str, x_is_b: bool) -> tuple[str, str]:
    """What a judge that prefers `arm` answers in call 1 (X first) and call 2 (Y first)."""
    x_wins = (arm == "B") == x_is_b
    return ("first", "second") if x_wins else ("second", "first")


def cohort(judge, *, sessions: int, turns: int, seed: int = 7) -> list[JudgedPair]:
    """Pairs for every criterion of `sessions` x `turns`, the blind mapping drawn from Random(seed);
    `judge(x_is_b, rng) -> (call1, call2)`."""
    rng = random.Random(seed)
    pairs = []
    for s in range(sessions):
        for t in range(turns):
            for criterion in CRITERIA:
                x_is_b = rng.random() < 0.5
                pairs.append(JudgedPair(f"s{s}", t, criterion, x_is_b, *judge(x_is_b, rng)))
    return pairs


def test_first_position_judge_flips_every_pair_and_finds_no_difference():
    pairs = cohort(lambda x_is_b, rng: ("first", "first"), sessions=12, turns=5)
    assert {p.x_is_b for p in pairs} == {True, False}
    for c in compare(pairs).values():
        assert c.flips == c.ties == c.judged == 12 * 5
        assert c.flip_rate == 1.0
        assert c.wins_b == c.wins_a == c.unparsed == 0
        assert c.win_rate == c.low == c.high == 0.5
        assert (c.sessions_even, c.sessions_b, c.sessions_a, c.p_value) == (12, 0, 0, 1.0)
        assert c.verdict == NO_DIFFERENCE


@pytest.mark.parametrize(("arm", "expected", "bound"), [("B", B_BETTER, "low"), ("A", B_WORSE, "high")])
def test_a_judge_that_sees_through_the_blinding_decides_every_pair(arm, expected, bound):
    pairs = cohort(lambda x_is_b, rng: answers_for(arm, x_is_b), sessions=10, turns=4)
    assert {p.x_is_b for p in pairs} == {True, False}
    for c in compare(pairs).values():
        assert (c.wins_b, c.wins_a) == ((40, 0) if arm == "B" else (0, 40))
        assert c.ties == c.flips == 0 and c.flip_rate == 0.0
        assert c.win_rate == (1.0 if arm == "B" else 0.0)
        assert c.p_value == pytest.approx(2 / 2**10)
        assert (getattr(c, bound) > 0.5) if arm == "B" else (getattr(c, bound) < 0.5)
        assert c.verdict == expected


def test_unanimous_sessions_below_the_minimum_are_too_few():
    pairs = cohort(lambda x_is_b, rng: answers_for("B", x_is_b), sessions=MIN_SESSIONS - 1, turns=4)
    c = compare(pairs)["fitness"]
    assert (c.sessions, c.win_rate, c.verdict) == (MIN_SESSIONS - 1, 1.0, TOO_FEW)


def test_unanimous_but_not_significant_is_no_difference():
    """Five unanimous sessions pass the minimum and the interval ([1, 1]), but the sign test gives p = 2/32 =
    0.0625 >= 0.05: both conditions are required."""
    c = compare(cohort(lambda x_is_b, rng: answers_for("B", x_is_b), sessions=5, turns=4))["fitness"]
    assert c.low == 1.0 and c.p_value == pytest.approx(0.0625)
    assert c.verdict == NO_DIFFERENCE


# (x_is_b, call1, call2) -> (outcome, flipped), by hand: call 1 shows X first, call 2 shows Y first
OUTCOMES = [
    (True, "first", "second", "B", False),
    (False, "first", "second", "A", False),
    (True, "second", "first", "A", False),
    (False, "second", "first", "B", False),
    (True, "first", "first", "tie", True),
    (False, "second", "second", "tie", True),
    (True, "tie", "tie", "tie", False),
    (True, "tie", "second", "tie", False),
    (False, "first", "tie", "tie", False),
    (True, None, "second", "unparsed", False),
    (False, "first", None, "unparsed", False),
    (True, None, None, "unparsed", False),
    (True, "tie", None, "unparsed", False),
]


@pytest.mark.parametrize(("x_is_b", "call1", "call2", "outcome", "flipped"), OUTCOMES)
def test_pair_outcome(x_is_b, call1, call2, outcome, flipped):
    assert pair_outcome(x_is_b, call1, call2) == PairOutcome(outcome, flipped)


def test_tie_and_unparsed_calls_are_never_wins_or_flips():
    pairs = [
        JudgedPair("s1", 1, "fitness", True, "tie", "second"),  # tie + B: a tie, not a flip
        JudgedPair("s1", 2, "fitness", False, "first", "tie"),  # A + tie: a tie
        JudgedPair("s1", 3, "fitness", True, "first", None),  # B then unparsed: unparsed, not a B win
        JudgedPair("s1", 4, "fitness", False, None, "first"),
        JudgedPair("s2", 1, "fitness", True, None, None),  # a session with nothing parsed is not scored
    ]
    scores = session_scores(pairs)
    s1, s2 = scores["s1"]["fitness"], scores["s2"]["fitness"]
    assert (s1.wins_b, s1.wins_a, s1.ties, s1.flips, s1.unparsed, s1.n, s1.score) == (0, 0, 2, 0, 2, 2, 0.5)
    assert (s2.n, s2.unparsed, s2.score) == (0, 1, None)
    assert scores["s1"]["findability"].n == 0
    c = compare(pairs)["fitness"]
    assert (c.sessions, c.wins_b, c.wins_a, c.ties, c.flips, c.unparsed, c.judged) == (1, 0, 0, 2, 0, 3, 2)
    assert c.flip_rate == 0.0 and c.verdict == TOO_FEW


def test_session_score_and_flip_rate_count_only_parsed_pairs():
    pairs = [
        JudgedPair("s1", 1, "findability", True, "first", "second"),  # B
        JudgedPair("s1", 2, "findability", False, "second", "first"),  # B
        JudgedPair("s1", 3, "findability", True, "second", "first"),  # A
        JudgedPair("s1", 4, "findability", False, "first", "first"),  # flip -> tie
        JudgedPair("s1", 5, "findability", False, "first", None),  # unparsed
    ]
    s = session_scores(pairs)["s1"]["findability"]
    assert s.as_dict() == {"wins_b": 2, "wins_a": 1, "ties": 1, "flips": 1, "unparsed": 1, "n": 4, "score": 0.625}
    c = compare(pairs)["findability"]
    assert c.flip_rate == 0.25 and c.win_rate == 0.625
    assert json.loads(json.dumps(c.as_dict()))["flip_rate"] == 0.25
    assert compare(pairs)["fitness"].as_dict()["win_rate"] is None


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        (JudgedPair("s", 1, "fitness", True, "X", "first"), "not one of"),
        (JudgedPair("s", 1, "fitness", True, "first", "B"), "not one of"),
        (JudgedPair("s", 1, "vibes", True, "first", "second"), "unknown criterion"),
    ],
)
def test_bad_pairs_are_invalid_input(pair, message):
    with pytest.raises(InvalidInput, match=message):
        compare([pair])


def test_a_pair_judged_twice_is_invalid_input():
    pair = JudgedPair("s", 1, "fitness", True, "first", "second")
    with pytest.raises(InvalidInput, match="judged twice"):
        session_scores([pair, pair])


@pytest.mark.parametrize(
    ("above", "below", "p"),
    [
        (9, 1, 22 / 1024),  # 2 * (C(10,0) + C(10,1)) / 2^10 = 0.0215
        (1, 9, 22 / 1024),
        (10, 0, 2 / 1024),
        (7, 3, 2 * (1 + 10 + 45 + 120) / 1024),  # 0.34375
        (8, 4, 2 * (1 + 12 + 66 + 220 + 495) / 4096),  # 0.3877
        (5, 5, 1.0),
        (0, 0, 1.0),
        (1, 0, 1.0),
    ],
)
def test_sign_test_against_hand_computed_binomials(above, below, p):
    assert sign_test(above, below) == pytest.approx(p)


def test_sign_test_of_nine_of_ten():
    assert round(sign_test(9, 1), 4) == 0.0215


def test_compare_drops_even_sessions_from_the_sign_test():
    """9 sessions lean B (both pairs B), 1 leans A, 3 are even (one B win, one A win): p is that of 9 of 10."""
    pairs = []
    for s in range(13):
        arms = ("B", "B") if s < 9 else ("A", "A") if s == 9 else ("B", "A")
        for t, arm in enumerate(arms):
            pairs.append(JudgedPair(f"s{s}", t, "fitness", True, *answers_for(arm, True)))
    c = compare(pairs)["fitness"]
    assert (c.sessions, c.sessions_b, c.sessions_a, c.sessions_even) == (13, 9, 1, 3)
    assert c.p_value == pytest.approx(22 / 1024)
    assert c.win_rate == pytest.approx((9 + 0 + 3 * 0.5) / 13)


def test_same_seed_same_interval():
    pairs = cohort(lambda x_is_b, rng: answers_for("B" if rng.random() < 0.6 else "A", x_is_b), sessions=20, turns=3)
    first, again, other = compare(pairs, seed=3), compare(pairs, seed=3), compare(pairs, seed=4)
    assert {c: (v.low, v.high) for c, v in first.items()} == {c: (v.low, v.high) for c, v in again.items()}
    assert any((first[c].low, first[c].high) != (other[c].low, other[c].high) for c in CRITERIA)
    for v in first.values():
        assert v.low is not None and v.high is not None and v.win_rate is not None
        assert 0 <= v.low <= v.win_rate <= v.high <= 1
    assert bootstrap_interval([0.2, 0.9, 0.4], seed=1) == bootstrap_interval([0.2, 0.9, 0.4], seed=1)
    assert bootstrap_interval([0.7]) == (None, None)


def test_bootstrap_interval_covers_the_true_win_rate():
    """Coverage of the session bootstrap, simulated: 400 cohorts drawn from random.Random(20240515), each of 30
    sessions x 6 pairs on one criterion, every pair a B win with probability 0.6 (no ties), so the true win rate
    is 0.6. The 95% interval (500 resamples per cohort) must cover 0.6 in 90%..98% of the cohorts (it covers it in
    379 of 400, 94.75%; an 80% interval covers 78%, so a too-narrow interval fails here)."""
    rng = random.Random(20240515)
    cohorts, covered = 400, 0
    for k in range(cohorts):
        pairs = []
        for s in range(30):
            for t in range(6):
                x_is_b = rng.random() < 0.5
                arm = "B" if rng.random() < 0.6 else "A"
                pairs.append(JudgedPair(f"s{s}", t, "fitness", x_is_b, *answers_for(arm, x_is_b)))
        c = compare(pairs, seed=k, resamples=500)["fitness"]
        assert c.low is not None and c.high is not None
        covered += c.low <= 0.6 <= c.high
    assert 0.90 <= covered / cohorts <= 0.98, covered
