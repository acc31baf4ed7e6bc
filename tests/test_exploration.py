"""Exploration: on a share of hook prompts the last slot shows a memory from just below the top k, so that the
agent grades what the ranker does not show yet (core/ranking/pipeline.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from cairn_cli.config import Settings
from cairn_cli.core.ranking.lexical import Candidate, Scored
from cairn_cli.core.ranking.pipeline import explored
from cairn_cli.core.store import deliveries
from cairn_cli.errors import InvalidInput

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _ranked(n: int) -> list[Scored]:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return [Scored(Candidate(i, f"m{i}", [], "global", "fact", 0.75, now), 1.0 - i / 100) for i in range(1, n + 1)]


def test_rate_zero_and_short_lists_show_the_top_k_unchanged():
    ranked = _ranked(12)
    assert [s.candidate.id for s in explored(ranked, 5, "q", 0.0)] == [1, 2, 3, 4, 5]
    assert "explore_rate" not in ranked[0].components
    assert [s.candidate.id for s in explored(_ranked(5), 5, "q", 1.0)] == [1, 2, 3, 4, 5]  # nothing below the top 5
    assert [s.candidate.id for s in explored(_ranked(3), 5, "q", 1.0)] == [1, 2, 3]


def test_an_explored_slot_is_drawn_from_below_the_top_k_with_its_rank_and_propensity():
    seen = set()
    for q in range(60):
        ranked = _ranked(12)
        chosen = explored(ranked, 5, f"query {q}", 1.0)
        assert [s.candidate.id for s in chosen[:4]] == [1, 2, 3, 4]
        pick = chosen[4]
        assert 6 <= pick.candidate.id <= 12
        assert pick.components["explored_from_rank"] == pick.candidate.id  # ids are ranks here
        assert pick.components["explore_propensity"] == pytest.approx(1 / 7, abs=1e-6)
        assert all(s.components["explore_rate"] == 1.0 for s in chosen)
        seen.add(pick.candidate.id)
    assert seen == set(range(6, 13))  # every rank below the top 5 can be drawn


def test_the_draw_is_the_queries_own_and_the_rate_is_kept():
    def pick(q: str, rate: float) -> int:
        return explored(_ranked(20), 5, q, rate)[4].candidate.id

    assert pick("same prompt", 1.0) == pick("same prompt", 1.0)  # a retried prompt explores the same way
    explored_share = sum(pick(f"prompt {i}", 0.1) != 5 for i in range(3000)) / 3000
    assert 0.085 <= explored_share <= 0.115  # a hash is uniform: ~10% of prompts explore at rate 0.1


def _store(cli, n: int = 12) -> None:
    for i in range(n):
        result = cli("memory", "add", f"deploy pipeline note {i}: the release train runs step {i}", "--scope", "p")
        assert result.exit_code == 0, result.output


def _rank(prompt: str, *, hook: dict | None, session: str = "s1"):
    from cairn_cli.core.hooks.prompt import prompt_turn
    from cairn_cli.core.hooks.request import PromptRequest
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.ml.models import get_encoder

    engine = RankEngine(get_encoder("hashing"))
    return prompt_turn(PromptRequest(prompt=prompt, session_id=session, scope="p", hook=hook), Settings(), engine)


def test_hook_prompts_explore_and_log_it_and_cli_ranks_never_do(cli, monkeypatch):
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")
    monkeypatch.setenv("CAIRN_EXPLORE_RATE", "1")
    _store(cli)
    hooked = _rank("how does the deploy pipeline release train run", hook={"hook_event_name": "UserPromptSubmit"})
    assert len(hooked.items) == 5
    last = hooked.items[-1]
    assert last.components["explored_from_rank"] >= 6
    logged = {d.memory_id: d.score_components for d in deliveries.list_deliveries(Settings(), session_id="s1")}
    assert logged[last.id]["explored_from_rank"] == last.components["explored_from_rank"]
    assert logged[last.id]["explore_propensity"] > 0

    plain = _rank("how does the deploy pipeline release train run", hook=None, session="s2")
    assert all("explored_from_rank" not in i.components for i in plain.items)
    assert [i.id for i in plain.items[:4]] == [i.id for i in hooked.items[:4]]


def test_a_rate_outside_0_1_is_refused_with_the_fix(cli, monkeypatch):
    monkeypatch.setenv("CAIRN_EXPLORE_RATE", "1.5")
    _store(cli, 2)
    with pytest.raises(InvalidInput, match="CAIRN_EXPLORE_RATE must be between 0 and 1"):
        _rank("deploy", hook={})
