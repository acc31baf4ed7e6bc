"""Learned embedder versions (core/store/embedders.py): calibration, the staged re-embed and its atomic swap,
rollback, the scratch engine, the daemon's switch, and a real-model deploy end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cairn_cli.config import Settings, embedder_versions_dir
from cairn_cli.core.store import embedders
from cairn_cli.core.store.embedders import Calibration
from cairn_cli.ml.models import HashingEncoder

LEARNED = "hashing@20261206T070000123456Z-4242"


@pytest.fixture(autouse=True)
def fresh_calibrations():
    """A calibration is read once per version and process: each test installs its own under the same name."""
    embedders._calibrations.clear()
    yield
    embedders._calibrations.clear()


TEXTS = [f"memory {i} says the {w} service runs on port {8000 + i}" for i, w in enumerate(["billing", "auth"] * 6)]


def install(name: str = LEARNED, cal: Calibration | None = None):
    """A learned version of the hashing encoder (tests: the encoder salted by the version)."""
    directory = embedder_versions_dir() / str(embedders.version_of(name))
    directory.mkdir(parents=True, exist_ok=True)
    if cal is not None:
        (directory / "calibration.json").write_text(cal.to_json())
    return directory


def add(texts, scope="proj", embed=None):
    from cairn_cli.core.store import dedup, memories

    entries = [memories.validate_entry({"content": t, "scope": scope}) for t in texts]
    return [r.id for r in dedup.add_memories(entries, Settings(), embed=embed)]


def stored() -> dict[int, tuple[str | None, bytes | None]]:
    from cairn_cli.db.tables import Memory

    live = Memory.select().where(Memory.superseded_by.is_null())
    return {m.id: (m.embedding_model, None if m.embedding is None else bytes(m.embedding)) for m in live}


def encoded(name: str, memory_id: int) -> bytes:
    from cairn_cli.core.store.embeddings import embedding_text
    from cairn_cli.db.tables import Memory

    m = Memory.get_by_id(memory_id)
    salt = embedders.version_of(name) or ""
    return HashingEncoder(name=name, salt=salt).encode([embedding_text(m.content, m.keywords)])[0].tobytes()


def query(text: str = "billing service port"):
    from cairn_cli.core.ranking.context import build_context_window
    from cairn_cli.core.ranking.rank import RankQuery

    return RankQuery(build_context_window(text, None, max_turns=0, max_chars=1000), 3, "proj")


def ranked_model() -> str | None:
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.rank import rank

    engine = RankEngine.in_process(Settings(), with_reranker=False)
    return rank(query(), Settings(), engine).embed_model


# -- names and calibration ----------------------------------------------------------------------------------------
def test_names():
    name = embedders.learned_name("all-MiniLM-L6-v2", "20261206T070000123456Z-4242")
    assert name == "all-MiniLM-L6-v2@20261206T070000123456Z-4242"
    assert embedders.base_of(name) == "all-MiniLM-L6-v2" and embedders.version_of(name) == "20261206T070000123456Z-4242"
    assert embedders.base_of("hashing") == "hashing" and embedders.version_of("hashing") is None


def test_calibration_fit_is_monotone_maps_quantiles_and_round_trips():
    rng = np.random.default_rng(3)
    base = rng.uniform(0.0, 0.8, 2000)
    learned = np.clip(base**0.5 - 0.1 + rng.normal(0, 0.01, 2000), -1, 1)  # a monotone distortion of the base
    cal = Calibration.fit(base, learned, base * 0.9, learned * 0.9)
    grid = np.linspace(-1, 1, 401)
    for which in ("query", "memory"):
        mapped = cal.to_base(grid, which)
        assert np.all(np.diff(mapped) >= 0) and mapped.min() >= -1 and mapped.max() <= 1
    # the learned marginal lands on the base's: its median goes to the base's median
    assert cal.to_base(float(np.median(learned))) == pytest.approx(float(np.median(base)), abs=0.01)
    as_float = [cal.to_base(float(x)) for x in grid[::40]]
    assert as_float == pytest.approx(cal.to_base(grid[::40]).tolist())
    assert isinstance(cal.to_base(0.3), float)
    assert cal.to_base(np.float32([0.3, 0.5])).dtype == np.float32
    again = Calibration.from_json(cal.to_json())
    assert again == cal and np.array_equal(again.to_base(grid, "memory"), cal.to_base(grid, "memory"))
    with pytest.raises(ValueError):
        cal.to_base(0.3, "neither")


def test_a_base_model_has_no_calibration_and_a_learned_one_reads_its_own():
    assert embedders.calibration("hashing") is None
    assert embedders.to_base("hashing", 0.42) == 0.42
    shift = Calibration.fit([0.1, 0.5, 0.9], [0.3, 0.6, 0.95], [0.1, 0.5, 0.9], [0.2, 0.4, 0.6], knots=3)
    install(cal=shift)
    assert embedders.calibration(LEARNED) == shift
    assert embedders.to_base(LEARNED, 0.6) == pytest.approx(0.5)
    assert embedders.to_base(LEARNED, 0.4, "memory") == pytest.approx(0.5)


def test_the_scoring_table_reads_calibrated_cosines():
    from cairn_cli.clock import utcnow
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    enc = HashingEncoder()
    texts = ["billing runs on port 8000", "auth runs on port 8001", "search is slow"]
    vecs = enc.encode(texts)
    cands = [Candidate(i, t, [], "proj", "fact", 0.75, utcnow()) for i, t in enumerate(texts)]
    cal = Calibration.fit([0.0, 0.2, 0.4, 0.6], [0.2, 0.5, 0.7, 0.9], [0.0, 0.3], [0.5, 0.9], knots=4)
    raw, mapped = ScoringTable(cands, 3, vectors=vecs), ScoringTable(cands, 3, vectors=vecs, calibration=cal)
    q = enc.encode(["billing port"])[0]
    assert np.allclose(mapped.similarities(q), cal.to_base(raw.similarities(q)))
    _, floor = mapped.window_similarities(q, vecs[1], 0.1)
    assert np.allclose(floor, cal.to_base(np.maximum(vecs @ q, vecs @ vecs[1])), atol=1e-6)
    cos_raw, cos_mapped = raw.cosines([0, 1]), mapped.cosines([0, 1])
    assert cos_mapped[0][1] == pytest.approx(float(cal.to_base(cos_raw[0][1], "memory")), abs=1e-6)


# -- deploy, re-embed, swap, rollback -----------------------------------------------------------------------------
def test_a_deploy_ranks_with_the_old_vectors_until_the_swap_and_a_rollback_restores_them():
    ids = add(TEXTS)
    before = stored()
    assert {m for m, _ in before.values()} == {"hashing"}
    install()
    embedders.request(LEARNED, Settings(), card={"by": "test"})
    assert embedders.record(Settings())["pending"] == LEARNED and embedders.live_name(Settings()) == "hashing"

    # a run killed after two batches: nothing live changed, ranking still reads the old vectors
    enc = HashingEncoder(name=LEARNED, salt=embedders.version_of(LEARNED) or "")
    assert embedders.stage(Settings(), LEARNED, enc, batch=4, max_batches=2) == 8
    assert stored() == before and ranked_model() == "hashing"
    assert embedders.to_stage(Settings(), LEARNED) == len(ids) - 8

    # a memory written meanwhile (with the live embedder) is staged too
    [late] = add(["memory 99 says the mail service runs on port 9999"])
    assert stored()[late][0] == "hashing"
    counted: list[int] = []
    line = embedders.finish_pending(Settings(), progress=counted.append)
    assert line is not None and LEARNED in line and sum(counted) == len(ids) - 8 + 1  # the run resumed
    after = stored()
    assert {m for m, _ in after.values()} == {LEARNED}
    assert all(after[i][1] == encoded(LEARNED, i) for i in after)
    rec = embedders.record(Settings())
    assert rec["live"] == LEARNED and rec["previous"] == "hashing" and rec["pending"] is None
    assert ranked_model() == LEARNED
    assert embedders.finish_pending(Settings()) is None  # idempotent: nothing pending

    # rollback: the previous vectors were kept staged, so nothing is embedded again
    embedders.rollback(Settings())
    assert embedders.live_name(Settings()) == LEARNED  # until the swap
    assert "(0 memories embedded" in (embedders.finish_pending(Settings()) or "")
    back = stored()
    assert {i: b for i, (_, b) in back.items() if i != late} == {i: b for i, (_, b) in before.items()}
    assert back[late] == ("hashing", encoded("hashing", late))
    rec = embedders.record(Settings())
    assert rec["live"] is None and rec["previous"] == LEARNED and embedders.live_name(Settings()) == "hashing"


def test_the_swap_prunes_vectors_of_versions_neither_live_nor_previous():
    from cairn_cli.db.tables import MemoryVector

    add(TEXTS[:3])
    other = "hashing@20261207T000000000000Z-1"
    for name in (LEARNED, other):
        install(name)
        embedders.request(name, Settings(), card={})
        embedders.finish_pending(Settings())
    models = {v.embedding_model for v in MemoryVector.select()}
    assert models == {other, LEARNED}  # hashing's (two versions back) are gone


def test_a_memory_changed_after_it_was_staged_is_staged_again():
    from cairn_cli.db.tables import Memory

    [first, _] = add(TEXTS[:2])
    install()
    embedders.request(LEARNED, Settings(), card={})
    enc = HashingEncoder(name=LEARNED, salt=embedders.version_of(LEARNED) or "")
    embedders.stage(Settings(), LEARNED, enc)
    assert embedders.to_stage(Settings(), LEARNED) == 0
    from cairn_cli.clock import utcnow

    Memory.update(content="memory 0 now says billing moved to port 7000", updated_at=utcnow()).where(
        Memory.id == first
    ).execute()
    assert embedders.to_stage(Settings(), LEARNED) == 1
    embedders.finish_pending(Settings())
    assert stored()[first] == (LEARNED, encoded(LEARNED, first))


def test_a_version_not_installed_here_is_never_ranked_with_nor_written_over():
    add(TEXTS[:3], embed=lambda texts: None)  # no vectors yet
    with pytest.raises(Exception, match="not installed"):
        embedders.request(LEARNED, Settings(), card={})
    install()
    embedders.request(LEARNED, Settings(), card={})
    embedders.finish_pending(Settings())
    import shutil

    shutil.rmtree(embedder_versions_dir())  # e.g. another machine of a team store that has not synced yet
    assert embedders.store_model(Settings()) == LEARNED and embedders.live_name(Settings()) == "hashing"
    before = stored()
    add(["a new memory about the search service"], embed=lambda texts: None)
    assert ranked_model() == "hashing"  # ranks with the base, in memory only
    assert {i: v for i, v in stored().items() if i in before} == before
    from cairn_cli.errors import NotFound

    with pytest.raises(NotFound):
        embedders.embed_missing(Settings())


def test_a_scratch_engine_never_writes_the_store():
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.rank import rank

    add(TEXTS[:4], embed=lambda texts: None)
    assert set(stored().values()) == {(None, None)}
    engine = RankEngine(HashingEncoder())
    engine.scratch = True
    view = engine.view(encoder=engine.encoder, reranker=None)
    assert view.scratch
    got = rank(query(), Settings(), view)
    assert got.items and all(item.components["similarity"] > 0 for item in got.items[:1])
    assert set(stored().values()) == {(None, None)}
    rank(query(), Settings(), RankEngine(HashingEncoder()))
    assert {m for m, _ in stored().values()} == {"hashing"}  # a live engine does store them


def test_engagement_and_dedup_read_calibrated_cosines():
    from cairn_cli.core.labels.engagement import semantic_best
    from cairn_cli.core.store.semantic_index import SemanticIndex

    squash = Calibration.fit([0.0, 0.1], [0.0, 1.0], [0.0, 0.1], [0.0, 1.0], knots=2)  # cos c -> c / 10
    install(cal=squash)
    enc = HashingEncoder(name=LEARNED, salt="x")

    def embed(texts):
        return LEARNED, enc.encode(texts).tolist()

    raw, _ = semantic_best(["billing runs on port 8000"], "billing runs on port 8000", 500, lambda t: embed(t)[1])
    mapped, _ = semantic_best(["billing runs on port 8000"], "billing runs on port 8000", 500, embed)
    assert raw is not None and mapped == pytest.approx([raw[0] / 10])
    assert SemanticIndex(LEARNED, 0.9).calibration == squash


def test_cairn_rank_and_memory_embed_report_the_learned_embedder(cli):
    add(TEXTS)
    install()
    embedders.request(LEARNED, Settings(), card={})
    out = cli("rank", "billing service port", "--scope", "proj", "--json")
    assert json.loads(out.stdout)["embed_model"] == "hashing"  # pending: the old vectors rank
    out = cli("memory", "embed", "--json")
    report = json.loads(out.stdout)
    assert report["embedder"] == LEARNED and LEARNED in report["swap"]
    out = cli("memory", "embed", "--json")
    assert json.loads(out.stdout) == {"embedded": 0, "embedder": LEARNED, "swap": None}  # idempotent
    ranked = json.loads(cli("rank", "billing service port", "--scope", "proj", "--json").stdout)
    assert ranked["embed_model"] == LEARNED
    assert ranked["memories"] and {m["components"]["embed_model"] for m in ranked["memories"]} == {LEARNED}
    from cairn_cli.core.store import deliveries

    logged = deliveries.list_deliveries(Settings())
    assert logged and {d.score_components["embed_model"] for d in logged[-3:]} == {LEARNED}  # provenance


# -- the daemon and the real model ---------------------------------------------------------------------------------
def _in_home(home, code: str) -> None:
    """`code` run against the store of `home` (a daemon's), in a fresh interpreter."""
    from tests.test_daemon import ROOT, _env

    prelude = (
        "from cairn_cli.config import Settings\nfrom cairn_cli.core.store import open_stores, embedders\n"
        "open_stores(Settings())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120, env=_env(home), cwd=ROOT
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_the_daemon_re_embeds_a_deploy_in_the_background_and_switches_after_the_swap(tmp_path):
    from tests.test_daemon import make_home, rank_json, run, start, status, wait_for

    home = make_home(tmp_path)
    try:
        start(home)
        assert rank_json(home, "how do I run the linter?")["embed_model"] == "hashing"
        version_dir = home / "training_data" / "embedder.versions" / str(embedders.version_of(LEARNED))
        version_dir.mkdir(parents=True)
        _in_home(home, f"embedders.request({LEARNED!r}, Settings(), card={{}})")
        first = rank_json(home, "how do I run the linter?")  # ranks with the old vectors, starts the re-embed
        assert first["embed_model"] == "hashing"
        wait_for(lambda: status(home)[1].get("embed_model") == LEARNED, "switch to the learned embedder")
        health = status(home)[1]
        assert health["embedder"]["reembed"] is None and LEARNED in health["embedder"]["note"]
        assert rank_json(home, "how do I run the linter?")["embed_model"] == LEARNED
        shown = json.loads(run(home, "memory", "show", "1", "--json").stdout)
        assert shown["embedding_model"] == LEARNED
        text = run(home, "daemon", "status").stdout
        assert f"embedder: {LEARNED}" in text
    finally:
        run(home, "daemon", "stop", "--force")


@pytest.mark.slow
def test_a_real_learned_embedder_deploys_re_embeds_and_shows_in_the_provenance(real_model, cli):
    """The bundled model saved as a version (what core/learning/embedder.py writes), deployed, finished by `cairn
    memory embed`, and named by `cairn rank --json` and the delivery log."""
    from cairn_cli.ml.models import get_encoder

    base = get_encoder("all-MiniLM-L6-v2")
    name = embedders.learned_name("all-MiniLM-L6-v2", "20261206T070000123456Z-4242")
    directory = embedder_versions_dir() / str(embedders.version_of(name))
    base.trainable().save(str(directory))  # type: ignore[attr-defined]  # the fp32 weights, as training saves them
    pairs = base.encode(TEXTS)
    cos = (pairs[:-1] * pairs[1:]).sum(axis=1)
    (directory / "calibration.json").write_text(Calibration.fit(cos, cos, cos, cos).to_json())
    (directory / "model_card.json").write_text("{}")
    add(TEXTS)
    embedders.request(name, Settings(), card={})
    out = cli("memory", "embed", "--json")
    assert json.loads(out.stdout)["embedder"] == name
    ranked = json.loads(cli("rank", "which port does billing use", "--scope", "proj", "--json").stdout)
    assert ranked["embed_model"] == name
    assert {m["components"]["embed_model"] for m in ranked["memories"]} == {name}
    learned = get_encoder(name)
    assert np.allclose(learned.encode(TEXTS[:2]), pairs[:2], atol=1e-3)  # the same weights, loaded from the version
    assert {m for m, _ in stored().values()} == {name}


def test_a_team_store_installs_the_published_version_it_lacks_checksum_verified():
    import shutil

    from cairn_cli.db.tables import StudentVersion

    directory = install()
    (directory / "config.json").write_text("{}")  # what unpacking checks a model directory by
    (directory / "model_card.json").write_text('{"by": "test"}')
    published = embedders.publish(directory, Settings(EMBED_MODEL="hashing"), force=True)
    assert published is not None and published["name"] == LEARNED
    embedders.request(LEARNED, Settings(), card={})
    shutil.rmtree(directory)  # another machine of the team: the store names a version it lacks
    assert not embedders.usable(LEARNED)
    assert embedders.sync(Settings()) == f"installed the team's embedder {LEARNED} (checksum verified)"
    assert embedders.usable(LEARNED) and (directory / "model_card.json").read_text() == '{"by": "test"}'
    assert embedders.sync(Settings()) is None  # nothing left to do

    shutil.rmtree(directory)
    StudentVersion.update(blob=b"tampered").where(StudentVersion.name == LEARNED).execute()
    refused: set[str] = set()
    assert "checksum does not match" in (embedders.sync(Settings(), refused=refused) or "")
    assert refused == {LEARNED} and not embedders.usable(LEARNED)
    assert embedders.sync(Settings(), refused=refused) is None  # not fetched again
