"""The statistics of the offline write-side A/B (`cairn replay`): pure functions of judged pairs, no I/O. More in
docs/learning.md."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from cairn_cli.core.metrics import mean, percentile
from cairn_cli.errors import InvalidInput

CRITERIA = ("findability", "self_sufficiency", "fitness")
ANSWERS = ("first", "second", "tie")
MIN_SESSIONS = 5
B_BETTER, B_WORSE, NO_DIFFERENCE, TOO_FEW = "B better", "B worse", "no difference", "too few sessions"
VERDICT_RULE = (
    f"{TOO_FEW!r} when fewer than {MIN_SESSIONS} sessions have a parsed pair; {B_BETTER!r} when the bootstrap "
    f"interval's lower bound > 0.5 and the sign test's p < alpha; {B_WORSE!r} when its upper bound < 0.5 and "
    f"p < alpha; {NO_DIFFERENCE!r} otherwise"
)


@dataclass(frozen=True)
class JudgedPair:
    """One criterion of one judged pair of memories (the orchestrator builds one per criterion from the stored
    judge answers). `x_is_b`: the stored blind mapping (arm B was shown as X). `call1` showed X first then Y,
    `call2` Y first then X; each is "first", "second", "tie", or None when unparseable after its retry."""

    session: str
    turn: int
    criterion: str
    x_is_b: bool
    call1: str | None
    call2: str | None


@dataclass(frozen=True)
class PairOutcome:
    """What a pair says: `outcome` is "B", "A", "tie" or "unparsed"; `flipped` is True when the two calls named
    different arms (the outcome is then "tie")."""

    outcome: str
    flipped: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def _arm(position: str, b_first: bool) -> str | None:
    """The arm a call's answer names (None for a tie), given whether B was shown first in that call."""
    if position not in ANSWERS:
        raise InvalidInput(f"judge answer {position!r} is not one of {ANSWERS}", "pass None for an unparsed answer")
    if position == "tie":
        return None
    return "B" if (position == "first") == b_first else "A"


def pair_outcome(x_is_b: bool, call1: str | None, call2: str | None) -> PairOutcome:
    """The outcome of a position-swapped pair (call 1: first = X; call 2: first = Y). A missing call: unparsed."""
    if call1 is None or call2 is None:
        return PairOutcome("unparsed")
    arm1, arm2 = _arm(call1, b_first=x_is_b), _arm(call2, b_first=not x_is_b)
    if arm1 is None or arm2 is None:
        return PairOutcome("tie")
    if arm1 != arm2:
        return PairOutcome("tie", flipped=True)
    return PairOutcome(arm1)


@dataclass
class SessionScore:
    """One session's tally on one criterion. `ties` includes the flips; `n` counts the parsed pairs (wins_b +
    wins_a + ties), unparsed pairs stay out of it. `score`: B's win share, ties half; None when n = 0."""

    wins_b: int = 0
    wins_a: int = 0
    ties: int = 0
    flips: int = 0
    unparsed: int = 0

    @property
    def n(self) -> int:
        return self.wins_b + self.wins_a + self.ties

    @property
    def score(self) -> float | None:
        return (self.wins_b + 0.5 * self.ties) / self.n if self.n else None

    @property
    def leaning(self) -> int:
        """+1 when B's score is above 0.5, -1 below, 0 at exactly 0.5 or unscored (in integers: no rounding)."""
        return (2 * self.wins_b + self.ties > self.n) - (2 * self.wins_b + self.ties < self.n)

    def add(self, outcome: PairOutcome) -> None:
        if outcome.outcome == "B":
            self.wins_b += 1
        elif outcome.outcome == "A":
            self.wins_a += 1
        elif outcome.outcome == "tie":
            self.ties += 1
            self.flips += int(outcome.flipped)
        else:
            self.unparsed += 1

    def as_dict(self) -> dict:
        return {**asdict(self), "n": self.n, "score": self.score}


def session_scores(pairs: Iterable[JudgedPair]) -> dict[str, dict[str, SessionScore]]:
    """{session: {criterion: SessionScore}} for every criterion in CRITERIA (zero tallies where a session has no
    pair on it). An unknown criterion, or the same (session, turn, criterion) twice, is invalid input."""
    scores: dict[str, dict[str, SessionScore]] = {}
    seen: set[tuple[str, int, str]] = set()
    for p in pairs:
        if p.criterion not in CRITERIA:
            raise InvalidInput(f"unknown criterion {p.criterion!r}", f"one of {', '.join(CRITERIA)}")
        key = (p.session, p.turn, p.criterion)
        if key in seen:
            raise InvalidInput(f"pair judged twice: session {p.session!r}, turn {p.turn}, {p.criterion}")
        seen.add(key)
        by_criterion = scores.setdefault(p.session, {c: SessionScore() for c in CRITERIA})
        by_criterion[p.criterion].add(pair_outcome(p.x_is_b, p.call1, p.call2))
    return scores


def bootstrap_interval(
    values: Sequence[float], *, seed: int | str = 0, resamples: int = 2000, alpha: float = 0.05
) -> tuple[float | None, float | None]:
    """Percentile-bootstrap (1 - alpha) interval of the mean of `values` (resampled with replacement, `resamples`
    times, from random.Random(seed): deterministic). (None, None) with fewer than two values."""
    if len(values) < 2:
        return None, None
    rng, n = random.Random(seed), len(values)
    means = [sum(rng.choices(values, k=n)) / n for _ in range(resamples)]
    return percentile(means, 100 * alpha / 2), percentile(means, 100 * (1 - alpha / 2))


def sign_test(above: int, below: int) -> float:
    """Exact two-sided sign test: P(a split at least as uneven as above/below) under Binomial(above + below, 1/2).
    1.0 when nothing is decided."""
    n, k = above + below, min(above, below)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


@dataclass
class Comparison:
    """B against A on one criterion, over the sessions (docs/learning.md states the pre-registered rule).
    `win_rate`: mean session score; `low`/`high`: its bootstrap interval; `sessions_b`/`sessions_a`/`sessions_even`:
    sessions whose score is above / below / exactly 0.5; `p_value`: the sign test on sessions_b vs sessions_a.
    Pair totals: `wins_b`, `wins_a`, `ties` (flips included), `flips`, `unparsed`; `judged` = parsed pairs;
    `flip_rate` = flips / judged (None when nothing was judged)."""

    criterion: str
    verdict: str
    sessions: int
    win_rate: float | None
    low: float | None
    high: float | None
    sessions_b: int
    sessions_a: int
    sessions_even: int
    p_value: float
    wins_b: int
    wins_a: int
    ties: int
    flips: int
    unparsed: int
    judged: int
    flip_rate: float | None
    alpha: float
    resamples: int
    seed: int

    def as_dict(self) -> dict:
        return asdict(self)


def verdict(sessions: int, low: float | None, high: float | None, p_value: float, alpha: float) -> str:
    """The pre-registered verdict (VERDICT_RULE)."""
    if sessions < MIN_SESSIONS:
        return TOO_FEW
    if low is not None and low > 0.5 and p_value < alpha:
        return B_BETTER
    if high is not None and high < 0.5 and p_value < alpha:
        return B_WORSE
    return NO_DIFFERENCE


def compare(
    pairs: Iterable[JudgedPair], *, seed: int = 0, resamples: int = 2000, alpha: float = 0.05
) -> dict[str, Comparison]:
    """{criterion: Comparison} for every criterion in CRITERIA. Each criterion's bootstrap draws from its own
    stream, seeded by `seed` and the criterion's name: the same seed gives the same intervals."""
    if not 0 < alpha < 1 or resamples < 1:
        raise InvalidInput(f"alpha {alpha} must be in (0, 1) and resamples {resamples} at least 1")
    by_session = session_scores(pairs)
    result = {}
    for criterion in CRITERIA:
        tallies = [s[criterion] for s in by_session.values()]
        scored = [t for t in tallies if t.n]
        values = [t.score for t in scored if t.score is not None]
        low, high = bootstrap_interval(values, seed=f"{seed}:{criterion}", resamples=resamples, alpha=alpha)
        above = sum(t.leaning > 0 for t in scored)
        below = sum(t.leaning < 0 for t in scored)
        p_value = sign_test(above, below)
        judged = sum(t.n for t in tallies)
        flips = sum(t.flips for t in tallies)
        result[criterion] = Comparison(
            criterion=criterion,
            verdict=verdict(len(scored), low, high, p_value, alpha),
            sessions=len(scored),
            win_rate=mean(values),
            low=low,
            high=high,
            sessions_b=above,
            sessions_a=below,
            sessions_even=len(scored) - above - below,
            p_value=p_value,
            wins_b=sum(t.wins_b for t in tallies),
            wins_a=sum(t.wins_a for t in tallies),
            ties=sum(t.ties for t in tallies),
            flips=flips,
            unparsed=sum(t.unparsed for t in tallies),
            judged=judged,
            flip_rate=flips / judged if judged else None,
            alpha=alpha,
            resamples=resamples,
            seed=seed,
        )
    return result
