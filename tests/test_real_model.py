"""End to end with the real bundled all-MiniLM-L6-v2: import, embed, rank, log."""

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries, memories
from tests.conftest import EXAMPLES, shared

pytestmark = pytest.mark.usefixtures("real_model")


@pytest.mark.parametrize(
    "prompt,expected",
    [
        ("the integration tests all fail with connection refused, what do I need to start first?", 1),
        ("how should I store prices for the checkout?", 2),
        ("I want to ship this fix to production today", 13),
        ("newly added items are missing from the search results", 10),
    ],
)
def test_the_right_memory_ranks_first(cli, prompt, expected):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    result = cli("rank", prompt, "--scope", "webshop", "--session", "e2e", "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert data["memories"][0]["id"] == expected
    assert data["embed_model"] == "all-MiniLM-L6-v2"
    row = deliveries.list_deliveries(Settings(), session_id="e2e")[0]
    assert row.score_components["embed_model"] == "all-MiniLM-L6-v2" and row.score_components["similarity"] > 0.3


def test_embeddings_come_from_the_bundled_model(cli):
    assert cli("memory", "add", "Use ruff format, not black").exit_code == 0
    view = memories.list_memories(Settings())[0]
    assert view.embedding_model == "all-MiniLM-L6-v2"


def test_rank_with_a_real_transcript(cli):
    path = shared("claude_code", "spotter", "short.jsonl")
    assert (
        cli(
            "memory",
            "add",
            "Phoenix needs `mix deps.get` and a running PostgreSQL before `mix phx.server` starts",
            "-k",
            "phoenix,mix,phx.server",
            "--scope",
            "spotter",
        ).exit_code
        == 0
    )
    assert cli("memory", "add", "The user's favourite editor is helix", "--scope", "spotter").exit_code == 0
    data = orjson.loads(cli("rank", "any idea?", "--scope", "spotter", "--transcript", path, "--json").stdout)
    assert "mix phx.server doesnt seem to start" in data["context_window"]
    assert data["memories"][0]["content"].startswith("Phoenix needs")
