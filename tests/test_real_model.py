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


def test_a_bf16_encoder_holds_bf16_weights_and_gives_autocasts_vectors_bit_for_bit():
    """Under bf16 the linear layers are held in bf16 (ml/models.py `lean`): the same vectors as bf16 autocast over
    the fp32 weights, for the few texts of a prompt (the direct forward) and for a batch (sentence-transformers'
    encode); training gets the fp32 weights back from disk."""
    import numpy as np
    import torch

    from cairn_cli.ml.models import get_encoder

    lean = get_encoder("all-MiniLM-L6-v2", "bf16")
    assert lean.lean and lean.bf16
    linear = [m.weight.dtype for m in lean.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linear and set(linear) == {torch.bfloat16}
    fp32 = lean.trainable()
    assert {p.dtype for p in fp32.parameters()} == {torch.float32}
    texts = ["how should prices be stored for the checkout?", "the integration tests fail with connection refused"]
    batch = texts * 6  # past the direct forward's few texts: sentence-transformers' batched encode

    def autocast(items):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fp32.encode(items, batch_size=64, convert_to_numpy=True, normalize_embeddings=True)

    for one in texts:
        assert np.array_equal(lean.encode([one]), autocast([one]))
    assert np.array_equal(lean.encode(batch), autocast(batch))
    plain = get_encoder("all-MiniLM-L6-v2", "fp32")
    assert not plain.lean and not plain.bf16
    assert float((plain.encode(texts[:1]) * lean.encode(texts[:1])).sum()) > 0.999


def test_the_direct_forward_of_a_few_texts_is_sentence_transformers_encode():
    """A prompt's few texts skip encode()'s per-call work (ml/models.py `_forward`): the same vectors."""
    import numpy as np

    from cairn_cli.ml.models import DIRECT_TEXTS, get_encoder

    encoder = get_encoder("all-MiniLM-L6-v2", "fp32")
    texts = ["how should prices be stored for the checkout?", "ship the fix to production today, carefully"]
    assert len(texts) <= DIRECT_TEXTS
    direct = encoder.encode(texts)
    full = encoder.model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True)
    assert direct.dtype == np.float32 and direct.shape == (2, encoder.dim)
    np.testing.assert_allclose(direct, full, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(direct, axis=1), 1.0, atol=1e-6)
