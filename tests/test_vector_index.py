"""A big store ranked from indexes (#30): the vector index kept beside the store (core/store/vector_index.py) and the
candidates' composite (core/ranking/candidates.py), against the whole-store table on a real SQLite store."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.ranking.context import window_of
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.rank import RankQuery, rank
from cairn_cli.core.store import vector_index
from cairn_cli.core.store.vector_index import VectorIndex
from cairn_cli.ml.models import HashingEncoder

WORDS = [
    "deploy",
    "test",
    "database",
    "migration",
    "cache",
    "index",
    "query",
    "server",
    "client",
    "socket",
    "timeout",
    "retry",
    "config",
    "import",
    "module",
    "error",
    "exception",
    "log",
    "trace",
    "build",
    "release",
    "branch",
    "merge",
    "commit",
    "review",
    "docker",
    "image",
    "container",
    "volume",
    "network",
    "port",
    "proxy",
    "header",
    "token",
    "session",
    "cookie",
    "auth",
    "user",
    "role",
    "garden",
    "sister",
    "concert",
    "painting",
    "hiking",
    "camping",
    "lake",
    "museum",
]


@pytest.fixture(autouse=True)
def _every_round(monkeypatch):
    """Every deeper read the bound asks for, however loaded the machine (candidates.DEEPER_BEFORE_MS is a latency
    guard: these tests hold the candidates to the whole table's answer)."""
    from cairn_cli.core.ranking import candidates

    monkeypatch.setattr(candidates, "DEEPER_BEFORE_MS", float("inf"))


def unit(rng, n: int, dim: int = 16) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- the index alone -------------------------------------------------------------------------------------------------


def test_nearest_reads_only_the_scopes_asked_and_matches_the_exact_order(tmp_path):
    rng = np.random.default_rng(1)
    vecs = unit(rng, 600)
    index = VectorIndex("m", 16, tmp_path / "ix")
    index.apply([(i + 1, "a" if i % 3 else "global", vecs[i], "2026-01-01 00:00:00") for i in range(600)])
    q = vecs[10]
    found = index.nearest(q, 50, ["a"])
    a_ids = [i + 1 for i in range(600) if i % 3]
    exact = sorted(a_ids, key=lambda i: -float(vecs[i - 1] @ q))[:50]
    assert found.ids.tolist() == exact  # a scope this small is scanned exactly
    assert np.allclose(found.cosines, [vecs[i - 1] @ q for i in exact], atol=1e-5)
    both = index.nearest(q, 20, ["a", "global"]).ids.tolist()
    assert both == sorted(range(1, 601), key=lambda i: -float(vecs[i - 1] @ q))[:20]
    assert set(index.nearest(q, 20, ["global"]).ids.tolist()) <= {i + 1 for i in range(600) if i % 3 == 0}
    assert index.nearest(q, 5, ["nowhere"]).ids.size == 0


def test_the_graph_search_finds_the_exact_nearest(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_index, "EXACT_UP_TO", 100)  # 2,000 vectors searched through the graph, not scanned
    rng = np.random.default_rng(2)
    vecs = unit(rng, 2000)
    index = VectorIndex("m", 16, None)
    index.apply([(i, "a", vecs[i], None) for i in range(2000)], threads=2)
    recalls = []
    for q in unit(rng, 50):
        exact = set(np.argsort(-(vecs @ q))[:50].tolist())
        recalls.append(len(exact & set(index.nearest(q, 50, ["a"]).ids.tolist())) / 50)
    assert np.mean(recalls) >= 0.99


def test_changes_apply_in_place_the_last_row_of_a_memory_counts(tmp_path):
    rng = np.random.default_rng(3)
    v = unit(rng, 4)
    index = VectorIndex("m", 16, None)
    index.apply([(1, "a", v[0], "t1"), (2, "a", v[1], "t1"), (3, "b", v[2], "t1")])
    index.apply([(2, "b", v[3], "t2"), (3, "b", None, "t2"), (1, "a", v[0], "t2"), (1, "c", v[0], "t3")])
    assert (index.scope_of(1), index.scope_of(2), index.scope_of(3)) == ("c", "b", None)
    assert index.nearest(v[3], 5, ["a"]).ids.size == 0  # memory 2 left scope a, memory 1 went to c
    assert index.nearest(v[3], 5, ["b"]).ids.tolist() == [2]
    assert sorted(index.vectors([1, 2, 3, 99])) == [1, 2] and np.allclose(index.vectors([2])[2], v[3])
    assert (index.since, index.max_id, len(index)) == ("t3", 3, 2)


def test_saved_and_opened_again_per_embedder(tmp_path):
    rng = np.random.default_rng(4)
    v = unit(rng, 30)
    directory = vector_index.index_dir(str(tmp_path), "sqlite:///x.db", "m")
    index = VectorIndex("m", 16, directory)
    index.apply([(i + 1, "a", v[i], f"2026-01-01 00:00:{i:02d}") for i in range(30)])
    index.save()
    again = VectorIndex.open("m", 16, directory)
    assert (len(again), again.since, again.max_id) == (30, "2026-01-01 00:00:29", 30)
    assert again.nearest(v[7], 1, None).ids.tolist() == [8]
    assert len(VectorIndex.open("other-model", 16, directory)) == 0  # another embedder's: never mixed
    assert len(VectorIndex.open("m", 32, directory)) == 0
    assert vector_index.index_dir(str(tmp_path), "sqlite:///x.db", "other-model") != directory


def test_a_dropped_index_is_stale_and_never_saved_again(tmp_path):
    rng = np.random.default_rng(5)
    v = unit(rng, 3)
    url = "sqlite:///x.db"
    directory = vector_index.index_dir(str(tmp_path), url, "m")
    index = VectorIndex("m", 16, directory)
    index.apply([(1, "a", v[0], "t1"), (2, "a", v[1], "t1")])
    index.save()
    index.apply([(2, "a", None, "t2")])  # a forgotten memory: its bytes stay in the graph's slot
    vector_index.drop_saved(str(tmp_path), url)
    assert index.stale() and not directory.exists()
    index.save()  # what it holds may include the removed vector: not written
    assert not directory.exists()
    assert len(VectorIndex.open("m", 16, directory)) == 0


# -- the engine: a big store's candidates against the whole table ----------------------------------------------------


def _store(cli, tmp_path, n: int = 600, seed: int = 7, dialog: bool = False) -> list[str]:
    """n memories in two scopes and global, sessions of ten (neighbours); returns some prompts."""
    rnd = random.Random(seed)
    lines, prompts = [], []
    for i in range(n):
        words = rnd.sample(WORDS, rnd.randint(6, 14))
        text = ("I think my " if dialog and i % 2 else "") + " ".join(words) + f" note {i}"
        scope = "global" if i % 5 == 0 else ("web" if i % 2 else "api")
        lines.append({"content": text, "scope": scope, "session_id": f"s{i // 10}"})
        if i % 20 == 0:
            prompts.append(" ".join(rnd.sample(words, 3)) + " " + rnd.choice(WORDS))
    path = tmp_path / "mem.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = cli("memory", "import", str(path))
    assert result.exit_code == 0, result.output
    return prompts


def _ids(engine: RankEngine, prompt: str, scope: str | None, k: int = 8) -> list[tuple[int, float]]:
    ranking = rank(RankQuery(window_of(prompt), k, scope), Settings(), engine)
    return [(m.id, m.components["composite"]) for m in ranking.items]


def _big() -> RankEngine:
    engine = RankEngine(HashingEncoder())
    engine.vector_index_above = 0
    return engine


@pytest.mark.parametrize("postings", ["held", "sqlite"])
@pytest.mark.parametrize("profile", ["default", "auto", "default+recency"])
def test_the_candidates_rank_as_the_whole_table(cli, tmp_path, monkeypatch, profile, postings):
    if profile.endswith("+recency"):  # confidence and recency weighing: every candidate's row is read
        profile = profile.split("+")[0]
        monkeypatch.setenv("CAIRN_SCORE_W_RECENCY", "0.05")
        monkeypatch.setenv("CAIRN_SCORE_W_CONFIDENCE", "0.05")
    monkeypatch.setenv("CAIRN_RANK_PROFILE", profile)
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")
    if postings == "sqlite":  # the postings not held in memory: MaxScore over SQLite's (fallback.py)
        monkeypatch.setattr(RankEngine, "_catch_up_keywords", lambda self, held, version, directory: None)
    prompts = _store(cli, tmp_path, dialog=profile == "auto")
    whole, big = RankEngine(HashingEncoder()), _big()
    for prompt in prompts:
        for scope in ("web", None):
            a, b = _ids(whole, prompt, scope), _ids(big, prompt, scope)
            assert [i for i, _ in a] == [i for i, _ in b], (prompt, scope)  # the same memories, the same order
            # every component as the table computes it; the dialog profile's joined keywords are normalised by
            # the best of the candidates, not of the scope (candidates.py): a little higher at most
            assert np.allclose([c for _, c in a], [c for _, c in b], atol=1e-5 if profile == "default" else 1e-2)
    assert big.search_path(Settings())["path"].startswith("vector index")
    assert whole.search_path(Settings())["path"].startswith("exact scan")
    (held,) = big._vectors.values()
    assert (held.keywords is not None) == (postings == "held")


def test_below_the_threshold_the_whole_table_ranks(cli, tmp_path):
    _store(cli, tmp_path, n=50)
    engine = RankEngine(HashingEncoder())
    engine.vector_index_above = 50
    _ids(engine, "deploy cache", "web")
    assert engine.search_path(Settings())["path"].startswith("exact scan")
    engine.vector_index_above = 49
    engine._vectors.clear()
    _ids(engine, "deploy cache", "web")
    assert engine.search_path(Settings())["path"].startswith("vector index")


def test_writes_reach_the_next_ranking_without_a_rebuild_and_a_restart_reads_the_saved_index(cli, tmp_path):
    _store(cli, tmp_path, n=200)
    big = _big()
    _ids(big, "deploy cache", "web")
    (held,) = big._vectors.values()
    index = held.index
    assert cli("memory", "add", "zanzibar quokka deployment checklist", "--scope", "web").exit_code == 0
    got = _ids(big, "zanzibar quokka", "web", k=3)
    new_id = got[0][0]
    assert held.index is index and index.scope_of(new_id) == "web"  # applied in place
    keywords = held.keywords
    assert "zanzibar" in keywords.vocab and (keywords.directory / "keywords.json").exists()
    assert cli("memory", "add", "zanzibar quokka deployment checklist v2", "--scope", "web").exit_code == 0
    newer = _ids(big, "zanzibar quokka v2", "web", k=1)[0][0]
    assert cli("memory", "supersede", str(new_id), str(newer)).exit_code == 0
    assert new_id not in [i for i, _ in _ids(big, "zanzibar quokka", "web", k=5)]
    assert index.scope_of(new_id) is None
    assert held.keywords is keywords and keywords.doc_freqs(["zanzibar"])["zanzibar"] == (1, 0)  # the newer alone
    index.save()
    restarted = _big()  # a new daemon: opens the saved index, applies only what changed since
    directory = index.directory
    saved = VectorIndex.open(index.model, index.dim, directory)
    assert len(saved) == len(index) and saved.since == index.since
    assert _ids(restarted, "zanzibar quokka v2", "web", k=1)[0][0] == newer
    (reopened,) = restarted._vectors.values()
    assert reopened.keywords.doc_freqs(["zanzibar"])["zanzibar"] == (1, 0)


def test_a_memory_without_a_vector_is_embedded_and_stored(cli, tmp_path):
    from cairn_cli.db.tables import Memory

    _store(cli, tmp_path, n=60)
    Memory.update(embedding=None, embedding_model=None).where(Memory.id == 7).execute()
    big = _big()
    _ids(big, "deploy cache", "web")
    (held,) = big._vectors.values()
    assert held.index.scope_of(7) is not None
    assert Memory.get_by_id(7).embedding_model == "hashing"


def test_a_forget_drops_the_saved_index_and_a_daemon_builds_it_again(cli, tmp_path):
    from cairn_cli.core.privacy.stored import compact_stores

    _store(cli, tmp_path, n=60)
    big = _big()
    _ids(big, "deploy cache", "web")
    (held,) = big._vectors.values()
    first = held.index
    directory = first.directory
    assert (directory / "index.json").exists()
    compact_stores()  # what `cairn forget` / `cairn redact --scan` end with
    assert not directory.exists()
    _ids(big, "deploy cache", "web")
    assert held.index is not first and (directory / "index.json").exists()  # built again from the store
    assert (directory / "keywords.json").exists()  # the postings too
    assert vector_index.store_dir(config.home_dir(), config.memory_db_url()) == directory.parent


def test_postings_holding_a_memory_the_store_no_longer_has_are_let_go_and_built_again(cli, tmp_path):
    from cairn_cli.db import fulltext as sql
    from cairn_cli.db.tables import Memory

    _store(cli, tmp_path, n=60)
    big = _big()
    _ids(big, "deploy cache", "web")
    (held,) = big._vectors.values()
    first = held.keywords
    assert len(first) == 60
    # gone without a forget's mark (on a team store, another instance's forget): the count tells
    Memory.delete().where(Memory.id == 9).execute()
    sql._sql("DELETE FROM fulltext_docs WHERE memory_id = 9")
    sql._sql("DELETE FROM fulltext_postings WHERE memory_id = 9")
    assert 9 not in [i for i, _ in _ids(big, "deploy cache", "web", k=60)]
    _ids(big, "deploy cache", "web")
    assert held.keywords is not first and len(held.keywords) == 59 and held.keywords._scope_of[9] == -1


# -- the daemon, the real bundled model ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_daemon_ranks_a_big_store_from_its_indexes_and_a_restart_opens_the_saved_one(tmp_path):
    from tests.test_daemon import EXAMPLES, rank_json, run, start, status

    h = tmp_path / "big"
    extra = {"CAIRN_EMBED_MODEL": "all-MiniLM-L6-v2", "CAIRN_VECTOR_INDEX_ABOVE": "5"}  # 18 memories: a big store
    assert run(h, "memory", "import", EXAMPLES, **extra).returncode == 0
    try:
        info = start(h, **extra)
        assert info["search"]["path"].startswith("vector index") and info["search"]["vectors"] == 18
        saved = h / "indexes"
        assert list(saved.glob("*/*/index.json"))  # built at start and kept beside the store
        # the same answer as the whole-store table gives (tests/test_daemon.py's real-model test)
        assert (
            rank_json(h, "how should prices be stored for the checkout?", "--scope", "webshop", **extra)["memories"][0][
                "id"
            ]
            == 2
        )
        added = run(
            h,
            "memory",
            "add",
            "Gift cards are redeemed with `shop giftcard redeem CODE`",
            "--scope",
            "webshop",
            **extra,
        )
        assert added.returncode == 0
        got = rank_json(h, "how do I redeem a gift card?", "--scope", "webshop", **extra)
        assert got["memories"][0]["id"] == 19  # a write reaches the next prompt: no reload
        text = run(h, "daemon", "status", **extra).stdout
        assert (
            "candidates: vector index (usearch HNSW) + full-text index (19 vectors); the postings of 19 memories held"
            in text
        )
        assert list(saved.glob("*/*/keywords.json"))  # the postings kept beside the graphs
        assert run(h, "daemon", "stop", **extra).returncode == 0
        restarted = start(h, **extra)
        assert restarted["search"]["vectors"] == 19 and restarted["search"]["postings_held"] == 19
        assert rank_json(h, "how do I redeem a gift card?", "--scope", "webshop", **extra)["memories"][0]["id"] == 19
    finally:
        run(h, "daemon", "stop", "--force")
    assert status(h)[1]["state"] == "stopped"


# -- a team store on PostgreSQL: the vector search inside the server -------------------------------------------------


@pytest.mark.slow
def test_a_team_store_ranks_from_postgresql_as_the_whole_table_and_holds_nothing(
    cli, tmp_path, monkeypatch, pgvector_server
):
    from tests.test_pgvector import use_store

    use_store(monkeypatch, pgvector_server)
    prompts = _store(cli, tmp_path, n=300)
    whole, big = RankEngine(HashingEncoder()), _big()
    big.vector_index_above = 10**9  # the size does not matter: a team store with pgvector searches in PostgreSQL
    for prompt in prompts:
        for scope in ("web", None):
            a, b = _ids(whole, prompt, scope), _ids(big, prompt, scope)
            assert [i for i, _ in a] == [i for i, _ in b], (prompt, scope)
            assert np.allclose([c for _, c in a], [c for _, c in b], atol=1e-5)
    (held,) = big._vectors.values()
    assert held.index is None and held.pg is not None  # no vector of the store held in this process
    assert held.keywords is not None and len(held.keywords) == 300  # its postings are (core/store/keyword_index.py)
    assert big.search_path(Settings())["path"] == "pgvector HNSW in PostgreSQL + full-text index"


@pytest.mark.slow
def test_another_instances_write_is_in_the_next_prompt(cli, tmp_path, monkeypatch, pgvector_server):
    import os
    import subprocess
    import sys

    from cairn_cli.clock import utcnow
    from cairn_cli.db.tables import Memory
    from tests.conftest import ROOT
    from tests.test_pgvector import use_store

    use_store(monkeypatch, pgvector_server)
    _store(cli, tmp_path, n=80)
    big = _big()
    assert "zanzibar" not in str(_ids(big, "zanzibar quokka checklist", "web", k=3))
    other = dict(os.environ) | {"CAIRN_HOME": str(tmp_path / "other-instance")}
    written = subprocess.run(
        [sys.executable, "-m", "cairn_cli", "memory", "add", "zanzibar quokka deployment checklist", "--scope", "web"],
        env=other,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert written.returncode == 0, written.stderr
    new_id = Memory.select(Memory.id).where(Memory.content.contains("zanzibar")).scalar()
    assert _ids(big, "zanzibar quokka checklist", "web", k=1)[0][0] == new_id  # no reload of the store
    (held,) = big._vectors.values()
    assert held.keywords.doc_freqs(["zanzibar"])["zanzibar"] == (1, 0)  # the postings held caught up with it
    assert held.index is None and held.keywords.directory is None  # a team store's: never saved here
    # a memory rewritten without its vector (a redaction; a Stop when no embedder answered writes such rows too)
    Memory.update(embedding=None, embedding_model=None, updated_at=utcnow()).where(Memory.id == 3).execute()
    _ids(big, "deploy cache", "web")
    assert Memory.get_by_id(3).embedding_model == "hashing"  # embedded by the ranking daemon, as a table does


@pytest.mark.slow
def test_without_pgvector_a_team_store_ranks_as_before_and_says_why(cli, tmp_path, monkeypatch, plain_pg_server):
    from tests.test_pgvector import use_store

    use_store(monkeypatch, plain_pg_server)
    _store(cli, tmp_path, n=40)
    engine = RankEngine(HashingEncoder())
    engine.vector_index_above = 100
    assert _ids(engine, "deploy cache", "web")
    path = engine.search_path(Settings())
    assert path["path"].startswith("exact scan") and "without the vector extension" in path["pgvector"]


def test_a_row_read_again_unchanged_leaves_the_graph_alone():
    rng = np.random.default_rng(6)
    v = unit(rng, 3)
    index = VectorIndex("m", 16, None)
    index.apply([(1, "a", v[0], "t1"), (2, "a", v[1], "t1")])
    index._unsaved = 0
    index.apply([(1, "a", v[0], "t1"), (2, "a", v[2], "t1")])  # a catch-up from t1 reads both again; 2 changed
    assert index._unsaved == 2  # memory 2 removed and added again; memory 1 untouched
    assert np.allclose(index.vectors([2])[2], v[2]) and index.nearest(v[0], 1, ["a"]).ids.tolist() == [1]


def _rounds_of_few_nearest(monkeypatch, postings: str) -> list[tuple[int, int]]:
    """The default profile with far too few nearest for a top 8 (the bound asks for more), the postings held or not;
    returns the (depth, wide) of every round read, as they are read."""
    from cairn_cli.core.ranking import candidates

    monkeypatch.setenv("CAIRN_RANK_PROFILE", "default")
    monkeypatch.setattr(candidates, "VECTOR_DEPTH", 4)
    if postings == "sqlite":
        monkeypatch.setattr(RankEngine, "_catch_up_keywords", lambda self, held, version, directory: None)
    rounds: list[tuple[int, int]] = []
    real = candidates.CandidateTable._score

    def counted(self, *args, **kwargs):
        rounds.append((kwargs["depth"], kwargs["wide"]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(candidates.CandidateTable, "_score", counted)
    return rounds


@pytest.mark.parametrize("postings", ["held", "sqlite"])
def test_too_few_candidates_are_read_deeper_until_no_unseen_memory_could_rank(cli, tmp_path, monkeypatch, postings):

    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")
    rounds = _rounds_of_few_nearest(monkeypatch, postings)
    prompts = _store(cli, tmp_path)
    whole, big = RankEngine(HashingEncoder()), _big()
    for prompt in prompts:
        a, b = _ids(whole, prompt, "web"), _ids(big, prompt, "web")
        assert [i for i, _ in a] == [i for i, _ in b], prompt
    if postings == "sqlite":  # some rankings read both deeper than the first round's 8 and 2 x 8
        assert max(w for _, w in rounds) > 16 and max(d for d, _ in rounds) > 8
    else:  # every BM25 known: only BM25's best read deeper, exactly as deep as the bound asks, the nearest kept
        assert max(d for d, _ in rounds) > 8 and any(d not in (8, 32, 128) for d, _ in rounds)


@pytest.mark.parametrize("recency", ["0", "0.05"])
def test_a_memory_forgotten_after_the_postings_were_caught_up_is_never_ranked(cli, tmp_path, monkeypatch, recency):
    from cairn_cli.db import fulltext as sql
    from cairn_cli.db.tables import Memory

    monkeypatch.setenv("CAIRN_RANK_PROFILE", "default")
    monkeypatch.setenv("CAIRN_SCORE_W_RECENCY", recency)  # weighing: every candidate's row read, else the chosen's
    _store(cli, tmp_path, n=60)
    big = _big()
    top = _ids(big, "deploy cache", "web", k=3)[0][0]
    (held,) = big._vectors.values()
    keywords = held.keywords
    # between a catch-up and the ranking that reads the postings: one memory forgotten (its indexes not dropped
    # yet), another written, so that the count the postings are checked by is the same
    monkeypatch.setattr(type(big), "_catch_up", lambda self, settings, held, version: None)
    Memory.delete().where(Memory.id == top).execute()
    sql._sql("DELETE FROM fulltext_docs WHERE memory_id = ?", (top,))
    assert cli("memory", "add", "zanzibar quokka", "--scope", "web").exit_code == 0
    got = _ids(big, "deploy cache", "web", k=3)
    assert held.keywords is keywords and keywords._scope_of[top] >= 0  # the postings held still have it
    assert top not in [i for i, _ in got] and len(got) == 3


@pytest.mark.parametrize("postings", ["held", "sqlite"])
def test_past_the_time_a_deeper_read_of_the_nearest_may_begin_the_best_read_ranks_and_is_counted(
    cli, tmp_path, monkeypatch, postings
):
    from cairn_cli.core.ranking import candidates

    monkeypatch.setattr(candidates, "DEEPER_BEFORE_MS", 0.0)
    rounds = _rounds_of_few_nearest(monkeypatch, postings)
    prompts = _store(cli, tmp_path)
    big = _big()
    tagged = 0  # rankings whose memories' provenance says they stopped short of the bound
    for prompt in prompts:
        items = rank(RankQuery(window_of(prompt), 8, "web"), Settings(), big).items
        assert len(items) == 8
        marks = [m.components.get("short_of_the_bound") for m in items]
        assert marks == [marks[0]] * 8  # the whole ranking, or none of it
        if marks[0] is not None:
            assert marks[0]["nearest"] == 16 and marks[0]["after_ms"] >= 0.0
            tagged += 1
    assert {w for _, w in rounds} == {16}  # the nearest never read deeper
    counts = big.search_path(Settings())["rankings"]
    assert counts["rankings"] == len(prompts) and counts.get("short_of_the_bound", 0) == tagged
    if postings == "sqlite":  # nor anything else: one round each, those that wanted more counted
        assert len(rounds) == len(prompts) and 0 < tagged <= len(prompts)
    else:  # BM25's best alone read deeper as the bound asks (cheap: always begun)
        assert len(rounds) > len(prompts)
