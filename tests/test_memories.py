"""The memory store: dedup with keyword union, source_ref precedence, confidence, supersession, import."""

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import dedup, evidence, importing, memories, merges
from cairn_cli.errors import InvalidInput, NotFound

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _add(content, **kw):
    return dedup.add_memories([memories.validate_entry({"content": content, **kw})], Settings())[0]


def test_same_content_merges_and_unions_keywords():
    first = _add("Start PostgreSQL with make db-up", keywords=["postgres", "make"])
    again = _add("Start PostgreSQL with make db-up", keywords=["make", "db-up"])
    assert (first.action, again.action, again.id) == ("added", "merged", first.id)
    assert again.keywords_added == ["db-up"]
    assert memories.get_memory(first.id, Settings()).keywords == ["postgres", "make", "db-up"]


def test_normalised_text_matches_too():
    first = _add("Start PostgreSQL  with make db-up.")
    again = _add("start postgresql with MAKE db-up", keywords=["x"])
    assert again.action == "merged" and again.id == first.id
    assert len(memories.list_memories(Settings())) == 1


def test_keywords_are_never_overwritten_by_a_merge():
    m = _add("Use ruff format", keywords=["ruff", "format"])
    _add("Use ruff format", keywords=[])
    assert memories.get_memory(m.id, Settings()).keywords == ["ruff", "format"]


def test_source_ref_precedence_entry_over_call_over_null(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        "\n".join(
            [
                orjson.dumps({"content": "own ref", "source_ref": "gen-entry"}).decode(),
                orjson.dumps({"content": "no ref of its own"}).decode(),
            ]
        )
    )
    importing.import_jsonl(path, Settings(), source_ref="gen-call")
    refs = {m.content: m.source_ref for m in memories.list_memories(Settings())}
    assert refs == {"own ref": "gen-entry", "no ref of its own": "gen-call"}
    assert _add("no ref anywhere").id and memories.list_memories(Settings())[-1].source_ref is None


def test_confidence_rule():
    s = Settings()
    m = _add("a fact")
    assert memories.get_memory(m.id, s).confidence == pytest.approx(0.75)
    up = evidence.record_evidence([m.id], s, corroborate=True)[0]
    assert up.confidence == pytest.approx(4 / 5, abs=1e-4) and up.corroborations == 1
    down = evidence.record_evidence([m.id, m.id], s, corroborate=False)[-1]
    assert down.confidence == pytest.approx(4 / 7, abs=1e-4) and down.contradictions == 2


def test_evidence_on_unknown_id_changes_nothing():
    m = _add("a fact")
    with pytest.raises(NotFound):
        evidence.record_evidence([m.id, 999], Settings(), corroborate=True)
    assert memories.get_memory(m.id, Settings()).corroborations == 0


def test_supersede_and_its_refusals():
    s = Settings()
    old, new, newer = _add("old way"), _add("new way"), _add("newest way")
    memories.supersede(old.id, new.id, s)
    assert [m.id for m in memories.list_memories(s)] == [new.id, newer.id]
    assert {m.id for m in memories.list_memories(s, include_superseded=True)} == {old.id, new.id, newer.id}
    with pytest.raises(InvalidInput, match="itself"):
        memories.supersede(newer.id, newer.id, s)
    memories.supersede(new.id, newer.id, s)
    with pytest.raises(InvalidInput, match="superseded by"):
        memories.supersede(newer.id, new.id, s)


def test_embeddings_are_stored_with_their_model():
    m = _add("embedded once")
    view = memories.get_memory(m.id, Settings())
    assert view.embedding_model == "hashing"


def test_strict_import_writes_nothing_on_a_bad_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"content": "good"}\n{"content": \n{"content": "x", "kind": "poem"}\n')
    with pytest.raises(InvalidInput, match=r"2 invalid line\(s\), nothing imported — line 2: not valid JSON"):
        importing.import_jsonl(path, Settings())
    assert memories.list_memories(Settings()) == []


def test_skip_invalid_reports_line_numbers(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"content": "good"}\n\n{"content": ""}\n{"content": "good"}\n[1]\n')
    report = importing.import_jsonl(path, Settings(), skip_invalid=True)
    assert (report.added, report.merged) == (1, 1)
    assert [n for n, _ in report.rejected] == [3, 5]


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"content": "  "}, "content is empty"),
        ({"content": "x", "kind": "poem"}, "unknown kind"),
        ({"content": "x", "keywords": [1]}, "keywords must be a list of strings"),
        ({"content": "x", "colour": "red"}, "unknown field"),
        ({"content": "x" * 5000}, "max 4000"),
    ],
)
def test_entry_validation(entry, message):
    with pytest.raises(InvalidInput, match=message):
        memories.validate_entry(entry)


def test_dedup_is_per_scope_and_a_merge_keeps_both_scopes_provenance():
    webshop = _add("Run the migrations with make migrate", scope="webshop", source_ref="gen-1", session_id="s1")
    billing = _add("Run the migrations with make migrate", scope="billing")
    assert webshop.action == billing.action == "added" and webshop.id != billing.id
    s = Settings()
    assert {m.scope for m in memories.list_memories(s)} == {"webshop", "billing"}
    # a global memory is seen from every scope: the same text written in a scope merges into it...
    shared = _add("Commit messages say why, not what", scope="global")
    again = _add("Commit messages say why, not what", scope="webshop", source_ref="gen-2", session_id="s9")
    assert again.action == "merged" and again.id == shared.id
    assert memories.get_memory(shared.id, s).scope == "global"
    # ...and nothing about the second writing is lost: its scope, version and session are on record
    [merge] = merges.merges_of(shared.id, s)
    assert (merge.scope, merge.source_ref, merge.session_id, merge.method) == ("webshop", "gen-2", "s9", "exact")
    # a global memory never merges into a scoped one (it would vanish from every other scope)
    assert _add("Run the migrations with make migrate", scope="global").action == "added"
