"""Write-time dedup: a near-duplicate of a live memory of its own scope merges into it (nothing lost), an exact one
as before; `cairn stats dedup` counts both per generation version. Fast tests use a fake encoder whose cosines are
set by the test; one slow test runs the real bundled model end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core import stats
from cairn_cli.core.store import memories, merges
from cairn_cli.core.store.dedup import add_memories

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
from cairn_cli.core.store.importing import import_jsonl
from cairn_cli.core.store.memories import MemoryInput

pytestmark = pytest.mark.usefixtures("backend")

DIM = 8


def at_cosine(cos: float, other: int = 1) -> list[float]:
    """A unit vector whose cosine with the first axis is `cos` (the rest on axis `other`)."""
    v = [0.0] * DIM
    v[0], v[other] = cos, math.sqrt(max(0.0, 1.0 - cos * cos))
    return v


class FakeEncoder:
    """(model, vectors) by content: each test says which cosine (with axis 0) a memory's text has; records calls."""

    def __init__(self, vectors: dict[str, list[float]], model: str = "fake"):
        self.vectors, self.model, self.calls = vectors, model, []

    def __call__(self, texts: list[str]):
        self.calls.append(list(texts))
        return self.model, [self.vectors[t.split("\nkeywords:")[0]] for t in texts]


def entry(content: str, keywords=(), scope: str = "webshop", **kw) -> MemoryInput:
    return MemoryInput(content=content, keywords=list(keywords), scope=scope, **kw)


BASE = "Start PostgreSQL with make db-up before pytest"
NEAR = "Before pytest, start PostgreSQL with make db-up"


def test_a_near_duplicate_merges_and_nothing_is_lost():
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.97)})
    [first] = add_memories([entry(BASE, ["postgres", "make"], source_ref="gen-1", session_id="s1")], s, embed=enc)
    [again] = add_memories(
        [entry(NEAR, ["make", "db-up"], kind="procedure", source_ref="gen-2", session_id="s2")], s, embed=enc
    )
    assert (again.action, again.id, again.method) == ("merged", first.id, "semantic")
    assert again.similarity == pytest.approx(0.97, abs=1e-4) and again.keywords_added == ["db-up"]
    kept = memories.get_memory(first.id, s)
    assert kept.content == BASE  # the stored text is untouched ...
    assert kept.keywords == ["postgres", "make", "db-up"]  # ... keywords unioned ...
    assert (kept.corroborations, kept.confidence) == (1, pytest.approx(0.8))  # ... and counted as a corroboration
    [merge] = merges.merges_of(first.id, s)  # ... and the merged text is in the audit trail
    assert (merge.content, merge.keywords, merge.kind, merge.source_ref, merge.session_id) == (
        NEAR,
        ["make", "db-up"],
        "procedure",
        "gen-2",
        "s2",
    )
    assert (merge.method, merge.similarity) == ("semantic", pytest.approx(0.97, abs=1e-4))
    assert [m.id for m in memories.list_memories(s)] == [first.id]


def test_the_exact_duplicate_path_is_unchanged():
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0)})
    [first] = add_memories([entry(BASE, ["postgres"])], s, embed=enc)
    [exact] = add_memories([entry(BASE, ["make"])], s, embed=enc)
    [normalised] = add_memories([entry(BASE.upper() + ".")], s, embed=enc)
    assert [(r.action, r.id, r.method, r.similarity) for r in (exact, normalised)] == [
        ("merged", first.id, "exact", None),
        ("merged", first.id, "normalised", None),
    ]
    kept = memories.get_memory(first.id, s)
    assert kept.keywords == ["postgres", "make"] and kept.corroborations == 0  # a repeat is not a corroboration
    assert [m.method for m in merges.merges_of(first.id, s)] == ["exact", "normalised"]
    assert enc.calls == [[BASE + "\nkeywords: postgres"]]  # an exact duplicate is never embedded


def test_exact_duplicates_still_merge_into_global_but_near_ones_only_within_their_scope():
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.99)})
    [glob] = add_memories([entry(BASE, scope="global")], s, embed=enc)
    [exact] = add_memories([entry(BASE)], s, embed=enc)
    [near] = add_memories([entry(NEAR)], s, embed=enc)
    [other] = add_memories([entry(NEAR, scope="billing")], s, embed=enc)
    assert (exact.action, exact.id) == ("merged", glob.id)
    assert near.action == "added" and other.action == "added"  # a different scope (global included) never merges
    assert len({glob.id, near.id, other.id}) == 3


@pytest.mark.parametrize(("cos", "threshold", "merged"), [(0.94, 0.95, False), (0.95, 0.95, True), (0.91, 0.9, True)])
def test_the_threshold_decides(cos, threshold, merged):
    s = Settings(DEDUP_SEMANTIC_MIN=threshold)
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(cos)})
    add_memories([entry(BASE)], s, embed=enc)
    [result] = add_memories([entry(NEAR)], s, embed=enc)
    assert (result.action == "merged") is merged
    assert len(memories.list_memories(s)) == (1 if merged else 2)


def test_zero_turns_semantic_dedup_off_and_says_so():
    s = Settings(DEDUP_SEMANTIC_MIN=0.0)
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(1.0)})
    notes: list[str] = []
    add_memories([entry(BASE)], s, embed=enc)
    assert add_memories([entry(NEAR)], s, embed=enc, notes=notes)[0].action == "added"
    assert notes == ["semantic dedup off (CAIRN_DEDUP_SEMANTIC_MIN=0)"]


def test_memories_that_state_different_numbers_never_merge():
    s = Settings()
    a, b = "The API listens on port 8001 in dev", "The API listens on port 8002 in dev"
    enc = FakeEncoder({a: at_cosine(1.0), b: at_cosine(0.99)})
    add_memories([entry(a)], s, embed=enc)
    assert add_memories([entry(b)], s, embed=enc)[0].action == "added"


def test_without_an_embedding_only_exact_duplicates_merge_and_it_says_so():
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.99)})
    add_memories([entry(BASE)], s, embed=enc)
    notes: list[str] = []
    [result] = add_memories([entry(NEAR)], s, embed=lambda texts: None, notes=notes)
    assert result.action == "added"
    assert notes == ["semantic dedup skipped: no embedding model answered (exact duplicates only)"]
    assert memories.get_memory(result.id, s).embedding_model is None  # the daemon embeds it later


def test_the_closest_live_memory_of_the_same_model_is_chosen():
    far, close, gone = "far memory", "close memory", "superseded memory"
    vectors = {far: at_cosine(0.96, 1), close: at_cosine(0.99, 2), gone: at_cosine(1.0), NEAR: at_cosine(1.0)}
    enc = FakeEncoder(vectors)
    ids = [
        r.id for r in add_memories([entry(far), entry(close), entry(gone)], Settings(DEDUP_SEMANTIC_MIN=0), embed=enc)
    ]
    s = Settings()
    memories.supersede(ids[2], ids[0], s)  # the best match is superseded: never merged into
    other_model = FakeEncoder({"another model's": at_cosine(1.0)}, model="other")
    add_memories([entry("another model's")], s, embed=other_model)  # vectors of another model are not compared
    [result] = add_memories([entry(NEAR)], s, embed=enc)
    assert (result.id, result.similarity) == (ids[1], pytest.approx(0.99, abs=1e-4))


def test_an_import_merges_near_duplicates_within_the_file(tmp_path):
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.98), "unrelated": at_cosine(0.2)})
    path = tmp_path / "m.jsonl"
    lines = [{"content": BASE, "scope": "webshop"}, {"content": NEAR, "scope": "webshop"}, {"content": "unrelated"}]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    report = import_jsonl(path, s, embed=enc)
    assert (report.added, report.merged, report.notes) == (2, 1, [])
    assert [r.method for r in report.results] == [None, "semantic", None]
    assert len(enc.calls) == 1  # one batch for the whole file


def test_one_batch_repeats_itself_and_merges_twice_into_one_memory():
    """Within one call: an exact repeat of an entry stored earlier in the call merges into it, and two merges into
    the same memory both keep their keywords (each merge reads the memory as the previous one left it)."""
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.98), "new": at_cosine(0.0)})
    [kept] = add_memories([entry(BASE, ["a"])], s, embed=enc)
    batch = [entry(NEAR, ["b"]), entry(BASE, ["c"]), entry("new", ["d"]), entry("new", ["e"])]
    results = add_memories(batch, s, embed=enc)
    assert [(r.action, r.method) for r in results] == [
        ("merged", "semantic"),
        ("merged", "exact"),
        ("added", None),
        ("merged", "exact"),
    ]
    assert results[3].id == results[2].id
    assert memories.get_memory(kept.id, s).keywords == ["a", "b", "c"]
    assert memories.get_memory(results[2].id, s).keywords == ["d", "e"]


def test_a_stop_merges_a_near_copy_of_an_existing_memory(cli, cairn_home):
    """Through the real Stop path (hashing encoder): the agent writes a near-copy; stats count it per version."""
    s = Settings()

    def stop(message: str) -> None:
        payload = {"session_id": "s1", "cwd": "/home/USER/webshop", "hook_event_name": "Stop"}
        assert hook_entry.run_stop(json.dumps({**payload, "last_assistant_message": message}).encode()) == 0

    first = {"content": "Run the test suite with make test", "keywords": ["tests"], "scope": "webshop"}
    near = {**first, "content": "Run the test suite with `make test`", "keywords": ["tests", "make"]}
    stop("done [cm]" + json.dumps({"m": [first]}) + "[/cm]")
    stop("done again [cm]" + json.dumps({"m": [near]}) + "[/cm]")
    [kept] = memories.list_memories(s)
    assert kept.keywords == ["tests", "make"] and kept.corroborations == 1
    assert [m.method for m in merges.merges_of(kept.id, s)] == ["semantic"]
    log = (cairn_home / "logs" / "hook.log").read_text()
    assert "1 memories written" in log
    [row] = stats.dedup_stats(s)
    assert (row["writes"], row["stored"], row["merged_by"]["semantic"], row["in_session_merged"]) == (2, 1, 1, 1)
    shown = json.loads(cli("memory", "show", kept.id, "--json").stdout)
    assert [m["content"] for m in shown["merges"]] == [near["content"]]


def test_a_stop_without_an_embedder_writes_exact_dedup_only_and_logs_why(cairn_home, monkeypatch):
    from cairn_cli.daemon import dispatch

    monkeypatch.setattr(dispatch, "embed_with_model", lambda texts, **kw: None)  # the daemon did not answer
    first = {"content": "Run the test suite with make test", "scope": "webshop"}
    near = {"content": "Run the test suite with `make test`", "scope": "webshop"}
    for i, m in enumerate((first, near)):
        raw = {"session_id": "s1", "cwd": "/w", "last_assistant_message": f"{i} [cm]{json.dumps({'m': [m]})}[/cm]"}
        assert hook_entry.run_stop(json.dumps(raw).encode()) == 0
    assert len(memories.list_memories(Settings())) == 2
    assert "semantic dedup skipped: no embedding model answered" in (cairn_home / "logs" / "hook.log").read_text()


def test_stats_dedup_per_generation_version(cli):
    s = Settings()
    enc = FakeEncoder({BASE: at_cosine(1.0), NEAR: at_cosine(0.99), "other": at_cosine(0.0)})
    add_memories([entry(BASE, source_ref="gen-1", session_id="s1")], s, embed=enc)
    add_memories([entry(BASE, source_ref="gen-1", session_id="s1")], s, embed=enc)  # exact, same session
    add_memories([entry(NEAR, source_ref="gen-2", session_id="s2")], s, embed=enc)  # semantic, another session
    add_memories([entry("other", source_ref="gen-2", session_id="s2")], s, embed=enc)
    add_memories([entry("other", scope="billing")], s, embed=enc)
    rows = {r["version"]: r for r in stats.dedup_stats(s)}
    assert {v: (r["writes"], r["stored"], r["merged"], r["in_session_merged"]) for v, r in rows.items()} == {
        "(none)": (1, 1, 0, 0),
        "gen-1": (2, 1, 1, 1),
        "gen-2": (2, 1, 1, 0),
    }
    assert rows["gen-2"]["merged_by"] == {"exact": 0, "normalised": 0, "semantic": 1}
    assert rows["gen-1"]["dedup_rate"] == 0.5 and rows["gen-1"]["ci_low"] < 0.5 < rows["gen-1"]["ci_high"]
    assert [r["version"] for r in stats.dedup_stats(s, session="s2")] == ["gen-2"]
    out = json.loads(cli("stats", "dedup", "--json").stdout)
    assert [r["version"] for r in out] == ["(none)", "gen-1", "gen-2"]
    text = cli("stats", "dedup").stdout
    assert "gen-2" in text and "semantic" in text


def test_the_real_model_merges_a_paraphrase_and_keeps_a_related_memory_apart(cli, real_model):
    """End to end with the bundled all-MiniLM-L6-v2 (its precision on this machine: fp32 or bf16)."""
    base = ["memory", "add", "--scope", "webshop"]
    assert cli(*base, "Run make db-up before pytest in the webshop", "-k", "pytest").exit_code == 0
    near = cli(*base, "Run make db-up before running pytest in the webshop", "-k", "pytest,db-up")
    related = cli(*base, "The webshop tests need Redis started with make cache-up first", "-k", "pytest")
    assert near.stdout.startswith("merged memory 1 (semantic, cosine 0.9")
    assert related.stdout.startswith("added memory 2")
    shown = json.loads(cli("memory", "show", "1", "--json").stdout)
    assert shown["keywords"] == ["pytest", "db-up"] and shown["corroborations"] == 1
    assert shown["merges"][0]["content"] == "Run make db-up before running pytest in the webshop"
    assert np.frombuffer(bytes(_embedding(2)), dtype=np.float32).shape == (384,)


def _embedding(memory_id: int):
    from cairn_cli.db.tables import Memory

    return Memory.get_by_id(memory_id).embedding


@pytest.mark.slow
def test_memory_add_embeds_through_a_running_daemon_and_merges_a_near_copy(tmp_path):
    """With the daemon up, `memory add` takes its vectors from the daemon (no model in its own process)."""
    from tests.test_daemon import make_home, run, start, status

    home = make_home(tmp_path)
    try:
        start(home)
        add = ("memory", "add", "--scope", "webshop", "-k")
        first = run(home, *add, "tests", "Run the test suite with make test")
        near = run(home, *add, "tests,make", "Run the test suite with `make test`")
        assert first.stdout.startswith("added memory") and near.stdout.startswith("merged memory")
        assert "(semantic, cosine 0.9" in near.stdout, near.stdout + near.stderr
        assert status(home)[1]["ops"].get("embed") == 2
    finally:
        run(home, "daemon", "stop", "--force")


def templated_file(tmp_path, n: int, start: int = 0):
    """Lines that differ only in a number: all near each other (the fake encoder puts them at cosine 0.99 of one
    another), none a duplicate (their numbers differ)."""
    path = tmp_path / f"templated-{start}-{n}.jsonl"
    rows = [{"content": f"the nightly build publishes the signed wheel, ticket {i}"} for i in range(start, start + n)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    vectors = {r["content"]: at_cosine(0.99 if i % 2 else 1.0) for i, r in enumerate(rows)}
    return path, vectors


def count_queries(monkeypatch) -> list[str]:
    from cairn_cli.db.tables import memory_proxy

    seen: list[str] = []
    database = memory_proxy.obj
    real = database.execute_sql

    def counting(sql, params=None, *args, **kwargs):
        seen.append(sql)
        return real(sql, params, *args, **kwargs)

    monkeypatch.setattr(database, "execute_sql", counting)
    return seen


def test_an_import_of_templated_lines_costs_the_same_queries_per_line_at_any_size(tmp_path, monkeypatch):
    """Each line's near neighbours (every earlier line) are compared from the index, never fetched one by one: the
    queries grow with the lines, not with their square."""
    s = Settings()
    per_line = []
    for n in (60, 240):
        path, vectors = templated_file(tmp_path, n, start=10_000 * n)
        seen = count_queries(monkeypatch)
        report = import_jsonl(path, s, embed=FakeEncoder(vectors), batch_size=50)
        monkeypatch.undo()
        assert (report.added, report.merged) == (n, 0)  # near, but stating other numbers: none merged
        per_line.append(len(seen) / n)
    assert per_line[1] <= per_line[0] * 1.2 and per_line[1] < 4, per_line


def test_a_killed_import_keeps_its_committed_batches_and_a_rerun_adds_nothing_twice(tmp_path):
    s = Settings()
    path, vectors = templated_file(tmp_path, 120)
    calls = {"n": 0}

    def dies_in_the_third_batch(texts):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the user's Ctrl-C (or a kill) in the middle of batch 3
        return FakeEncoder(vectors)(texts)

    with pytest.raises(KeyboardInterrupt):
        import_jsonl(path, s, embed=dies_in_the_third_batch, batch_size=50)
    assert len(memories.list_memories(s)) == 100  # two batches committed, the third rolled back whole
    again = import_jsonl(path, s, embed=FakeEncoder(vectors), batch_size=50)
    assert (again.added, again.merged) == (20, 100)
    stored = memories.list_memories(s)
    assert len(stored) == 120 and len({m.content for m in stored}) == 120
