"""The public face (cairn_cli/api.py): what a script does with `import cairn_cli`, on a real SQLite store, with the
hashing encoder (one slow test with the bundled model); each call gives what the command over the same core gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cairn_cli
from cairn_cli.errors import InvalidInput, NotFound
from tests.conftest import EXAMPLES, QUESTIONS, python_c


@pytest.fixture
def store(cairn_home):
    with cairn_cli.open_store(home=cairn_home) as opened:
        yield opened


def test_import_cairn_cli_stays_cheap_and_the_api_is_there_on_first_use():
    code = (
        "import sys, cairn_cli\n"
        "before = sorted(m for m in sys.modules if m.startswith('cairn_cli.'))\n"
        "cairn_cli.open_store\n"
        "print(before, 'cairn_cli.api' in sys.modules)"
    )
    out = python_c(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"], out.stdout
    with pytest.raises(AttributeError, match="no_such_thing"):
        cairn_cli.no_such_thing  # noqa: B018


def test_add_merges_as_memory_add_does(store, cli):
    first = store.add("Run the tests with make test", keywords=["make", "tests"], scope="cairn", kind="procedure")
    again = store.add("Run the tests with make test", keywords=["pytest"], scope="cairn")
    assert (first.action, again.action, again.id, again.keywords_added) == ("added", "merged", first.id, ["pytest"])
    listed = json.loads(cli("memory", "list", "--json").stdout)
    assert [m["id"] for m in listed] == [m.id for m in store.memories()] == [first.id]
    assert store.memories(scope="cairn")[0].keywords == ["make", "tests", "pytest"]
    assert store.memories(scope="elsewhere") == []


def test_add_many_validates_dicts_and_takes_typed_entries_as_they_are(store):
    entries = [{"content": "  deploys run from the ci runner  ", "scope": "ops"}, {"content": "use uv", "kind": "tip"}]
    with pytest.raises(InvalidInput, match="unknown kind 'tip'"):
        store.add_many(entries)
    assert store.memories() == []  # nothing written: validation comes first
    results = store.add_many(
        [entries[0], cairn_cli.MemoryInput("prices are integers in cents", scope="shop")], source_ref="gen-v3"
    )
    assert [r.action for r in results] == ["added", "added"]
    views = store.memories()
    assert [(v.content, v.scope, v.source_ref) for v in views] == [
        ("deploys run from the ci runner", "ops", "gen-v3"),
        ("prices are integers in cents", "shop", None),
    ]


def test_import_jsonl_is_memory_import(store, tmp_path):
    report = store.import_jsonl(EXAMPLES, source_ref="examples")
    lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    assert report.added + report.merged == len(lines) and not report.rejected
    assert len(store.memories()) == report.added
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "fine"}\n{"nope": 1}\n')
    with pytest.raises(InvalidInput, match="1 invalid line"):
        store.import_jsonl(bad)
    assert store.import_jsonl(bad, skip_invalid=True).rejected[0][0] == 2


def test_rank_is_cairn_rank(store, cli):
    store.import_jsonl(EXAMPLES)
    for question in QUESTIONS[:3]:
        mine = store.rank(question, session_id="cli", k=3, log=False)
        theirs = cli("rank", question, "-k", "3", "--no-log", "--json")
        assert theirs.exit_code == 0, theirs.output
        ranked = json.loads(theirs.stdout)
        assert [m.id for m in mine.items] == [m["id"] for m in ranked["memories"]]
        assert mine.injection == ranked["injection"] and not mine.delivery_ids
    logged = store.rank(QUESTIONS[0], session_id="api-test", k=2)
    shown = json.loads(cli("deliveries", "--session", "api-test", "--json").stdout)
    assert sorted(d["id"] for d in shown) == sorted(logged.delivery_ids) and len(logged.delivery_ids) == 2


def test_settings_given_to_open_store_apply_to_what_it_does(cairn_home):
    with cairn_cli.open_store(RANK_K=2) as opened:
        opened.import_jsonl(EXAMPLES)
        assert len(opened.rank(QUESTIONS[0], log=False).items) == 2
        assert opened.settings.RANK_K == 2


def test_a_store_url_that_holds_no_store_is_refused_unless_made(tmp_path, cairn_home):
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    with pytest.raises(Exception, match="no memory store"):
        cairn_cli.open_store(db_url=url, create=None)
    with cairn_cli.open_store(db_url=url) as opened:  # create=True, as `memory import` makes its store
        opened.add("a memory in the other store")
        assert (opened.settings.DB_URL, len(opened.memories())) == (url, 1)
    assert (tmp_path / "elsewhere.db").is_file()


def test_train_and_rollback_are_train_reranker(cli, monkeypatch, cairn_home):
    from cairn_cli import config
    from cairn_cli.core.learning import trainer
    from tests.test_training import FakeStudent, _gate_store

    grades = _gate_store(cli)
    monkeypatch.setattr(trainer, "_train_student", lambda *a: FakeStudent(lambda t: grades.get(t, 0)))
    # the reranker off: a deployed fake student is never loaded as the next incumbent
    store = cairn_cli.open_store(RERANKER_ENABLED=False)
    with pytest.raises(NotFound, match="no previous student"):
        store.rollback()
    dry = store.train(holdout=0.5, seed=2, dry_run=True)
    assert (dry.outcome, dry.held_queries) == ("dry-run", 2)
    first = store.train(holdout=0.5, seed=2)
    assert first.outcome == "deployed", first
    second = store.train(holdout=0.5, seed=2)
    live = config.student_path()
    assert second.outcome == "deployed" and live.resolve() == Path(second.student_dir).resolve()
    back = store.rollback()
    assert back["version"] == first.student_dir and live.resolve() == Path(first.student_dir).resolve()


def test_rank_with_the_bundled_model_matches_the_command(real_model, cli, cairn_home):
    with cairn_cli.open_store(home=cairn_home) as opened:
        opened.import_jsonl(EXAMPLES)
        for question in QUESTIONS:
            mine = opened.rank(question, k=3, log=False)
            theirs = json.loads(cli("rank", question, "-k", "3", "--no-log", "--json").stdout)
            assert [m.id for m in mine.items] == [m["id"] for m in theirs["memories"]]
            assert mine.embed_model == theirs["embed_model"] == "all-MiniLM-L6-v2"
