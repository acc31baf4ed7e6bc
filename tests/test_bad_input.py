"""Bad input: one clear stderr line naming the fix, a meaningful exit code, and nothing half-written."""

import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries, memories
from tests.conftest import EXAMPLES

GOOD_DELIVERY = '{"session_id": "x", "turn": 1, "context_window": "c", "reranker_model": "m", "memories": %s}'

CASES = [
    # (args, stdin, exit code, message fragment)
    (["rank", ""], None, 2, "the prompt is empty"),
    (["rank", "-"], "   ", 2, "the prompt is empty"),
    (["rank", "deploy", "--scope", "nope"], None, 2, "unknown scope 'nope'"),
    (["rank", "deploy", "--transcript", "/nonexistent/t.jsonl"], None, 1, "does not exist"),
    (["rank", "deploy", "--session", " "], None, 2, "session id is empty"),
    (["memory", "import", "{bad}"], None, 2, "line 2: not valid JSON"),
    (["memory", "import", "/nonexistent.jsonl"], None, 1, "cannot read /nonexistent.jsonl"),
    (["memory", "add", " "], None, 2, "content is empty"),
    (["memory", "add", "x", "--kind", "poem"], None, 2, "unknown kind 'poem'"),
    (["memory", "show", "999"], None, 1, "no memory with id 999"),
    (["memory", "supersede", "1", "999"], None, 1, "no memory with id 999"),
    (["memory", "corroborate", "1", "999"], None, 1, "no memory with id 999"),
    (["log-delivery"], "{not json", 2, "not valid JSON"),
    (["log-delivery"], '{"session_id": "x"}', 2, "missing field 'turn'"),
    (["log-delivery"], GOOD_DELIVERY % '[{"id": 999, "rank": 1, "score": 1}]', 1, "unknown memory id(s) [999]"),
    (["log-delivery"], GOOD_DELIVERY % '[{"id": 1, "rank": "1", "score": 1}]', 2, "memories[0].rank must be int"),
    (["log-delivery"], GOOD_DELIVERY % "[]", 2, "memories is empty"),
]


@pytest.mark.parametrize("args,stdin,code,fragment", CASES, ids=lambda v: str(v)[:40])
def test_bad_input_table(cli, tmp_path, args, stdin, code, fragment):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    args = [str(tmp_path / "bad.jsonl") if a == "{bad}" else a for a in args]
    (tmp_path / "bad.jsonl").write_text('{"content": "fine"}\n{"content": oops}\n')
    before_mem = [
        (m.id, m.corroborations, m.superseded_by, m.keywords)
        for m in memories.list_memories(Settings(), include_superseded=True)
    ]
    before_del = len(deliveries.list_deliveries(Settings(), limit=10_000))
    result = cli(*args, input=stdin)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr
    assert "(" in lines[0] and lines[0].endswith(")"), "the message must carry a hint naming the fix"
    assert result.stdout == ""
    after_mem = [
        (m.id, m.corroborations, m.superseded_by, m.keywords)
        for m in memories.list_memories(Settings(), include_superseded=True)
    ]
    assert after_mem == before_mem
    assert len(deliveries.list_deliveries(Settings(), limit=10_000)) == before_del


def test_typer_validation_is_exit_2(cli):
    assert cli("rank", "x", "-k", "0").exit_code == 2
    assert cli("memory", "show", "abc").exit_code == 2


def test_bad_setting_is_a_config_error(cli, monkeypatch):
    monkeypatch.setenv("CAIRN_RANK_K", "many")
    result = cli("rank", "deploy")
    assert result.exit_code == 1 and "CAIRN_RANK_K='many' is not a valid int" in result.stderr


def test_unexpected_errors_point_at_cairn_debug(cli, monkeypatch):
    import cairn_cli.core.store.memories as mod

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(mod, "list_memories", boom)
    result = cli("memory", "list")
    assert result.exit_code == 1 and "set CAIRN_DEBUG=1 for a traceback" in result.stderr
