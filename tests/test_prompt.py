"""core/hooks/prompt.py: one prompt turn runs the arm, the window, ranking, the rendering and the delivery log in
that order (DESIGN.md), reads machine-managed state once for the arm and the rules, and ranking itself is pure.
On the real SQLite store of the test's CAIRN_HOME."""

from __future__ import annotations

import pytest

from cairn_cli.config import Settings
from cairn_cli.core.experiment import ab, grading
from cairn_cli.core.experiment import rules as generation_rules
from cairn_cli.core.hooks import prompt
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.core.ranking.context import build_context_window
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.rank import RankQuery, rank
from cairn_cli.core.store import deliveries, hookstate, state
from cairn_cli.ml.models import get_encoder
from tests.conftest import EXAMPLES

PROMPT = "integration tests fail with connection refused on port 5433"
HOOK = {"transcript_path": None, "agent_id": None, "is_subagent": False, "agent_type": None, "cwd": "/src/webshop"}


@pytest.fixture
def stored(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def _traced(monkeypatch, name: str, step: str, calls: list[str]):
    real = getattr(prompt, name)

    def traced(*args, **kwargs):
        calls.append(step)
        return real(*args, **kwargs)

    monkeypatch.setattr(prompt, name, traced)


def test_a_hook_turn_runs_the_steps_in_the_design_order_and_reads_the_state_once(stored, monkeypatch):
    calls: list[str] = []
    for name, step in (
        ("draw", "arm"),
        ("build_context_window", "window"),
        ("rank", "rank"),
        ("format_block", "render"),
        ("log_turn", "log"),
    ):
        _traced(monkeypatch, name, step, calls)
    reads: list[tuple] = []
    real_get_many = state.get_many
    monkeypatch.setattr(state, "get_many", lambda keys, s: reads.append(keys) or real_get_many(keys, s))
    request = PromptRequest(PROMPT, "order", scope="webshop", strict_scope=False, with_rules=True, hook=HOOK)

    result = prompt.prompt_turn(request, Settings(), RankEngine(get_encoder("hashing")))

    assert calls == ["arm", "window", "rank", "render", "log"]
    assert reads == [generation_rules.KEYS + ab.KEYS + grading.KEYS]  # the arm, the live rules, the grading: one read
    assert result.turn == 1 and result.arm in ("A", "B") and result.items
    assert result.injection.startswith(f"<{generation_rules.RULES_TAG} ")  # the rules, the memories, B's last
    assert result.injection.endswith(result.arm_instruction or result.block)
    turn = hookstate.get_turn("order", 1)
    assert turn.arm == result.arm and turn.data["generation_version"] == result.generation_version
    logged = deliveries.list_deliveries(Settings(), session_id="order")
    assert [d.memory_id for d in logged] == [i.id for i in result.items] == turn.data["delivered"]


def test_a_cli_turn_has_no_arm_and_is_stamped_with_the_live_rules(stored):
    result = prompt.prompt_turn(PromptRequest(PROMPT, "cli-turn"), Settings(), RankEngine(get_encoder("hashing")))
    assert result.arm is None and result.rules == "" and result.arm_instruction == ""
    assert result.generation_version == generation_rules.SHIPPED_VERSION
    assert hookstate.get_turn("cli-turn", 1).arm is None


def test_ranking_is_pure_a_query_in_the_memories_out_nothing_written(stored, monkeypatch):
    def no_state(*args, **kwargs):
        raise AssertionError("ranking read the experiment's state")

    monkeypatch.setattr(state, "get_many", no_state)
    settings = Settings()
    context = build_context_window(PROMPT, None, max_turns=settings.CONTEXT_MAX_TURNS, max_chars=1000)
    ranking = rank(RankQuery(context, 3, "webshop"), settings, RankEngine(get_encoder("hashing")))
    assert ranking.items and len(ranking.items) <= 3 and ranking.scope == "webshop"
    assert [i.rank for i in ranking.items] == list(range(1, len(ranking.items) + 1))
    assert deliveries.list_deliveries(settings) == [] and hookstate.get_turn("cli", 1) is None


def test_the_request_crosses_the_socket_as_a_dict_and_back():
    request = PromptRequest.from_cli(
        "why \ud800?", session="s" * 300, scope="web", transcript=None, k=5, layer="prompt", turn=None, log=False
    )
    assert request.prompt.encode() and "\ufffd" in request.prompt and len(request.session_id) == 200
    again = PromptRequest.from_dict(request.as_dict())
    assert again.as_dict() == request.as_dict() and again.k == 5 and again.log is False
    with pytest.raises(TypeError):
        PromptRequest.from_dict({"prompt": "x", "nonsense": 1})
