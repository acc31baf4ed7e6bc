"""The transcript reader on every real Claude Code transcript in ../shared/data, plus synthetic edge cases."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_cli.core.transcript import read_transcript

CLAUDE_CODE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "claude_code"
SKIP_REASON = f"shared transcript data not found at {CLAUDE_CODE}"
PATTERNS = (
    "spotter/*.jsonl",
    "spotter/*/subagents/*.jsonl",
    "fasthooks/sample_main_transcript.jsonl",
    "fasthooks/sample_agent_sidechain.jsonl",
)
FILES = sorted(p for pattern in PATTERNS for p in CLAUDE_CODE.glob(pattern))
MARKERS = ("<command-name>", "<task-notification>", "[Request interrupted")


@functools.cache
def _read(path: Path):
    return read_transcript(path)


def _data(relative: str) -> Path:
    if not CLAUDE_CODE.is_dir():
        pytest.skip(SKIP_REASON)
    return CLAUDE_CODE / relative


def _is_sidechain_file(path: Path) -> bool:
    return "subagents" in path.parts or path.name == "sample_agent_sidechain.jsonl"


@pytest.fixture(params=FILES or [None], ids=lambda p: str(p.relative_to(CLAUDE_CODE)) if p else "no-data")
def transcript_file(request) -> Path:
    if request.param is None:
        pytest.skip(SKIP_REASON)
    return request.param


def test_every_transcript_is_found():
    _data("")
    assert len(FILES) == 11, FILES
    assert sum(map(_is_sidechain_file, FILES)) == 5


def test_parses_without_errors(transcript_file):
    transcript = _read(transcript_file)
    assert transcript.errors == []
    assert any(m.role == "assistant" for m in transcript.messages)
    assert any(m.role == "user" for m in transcript.messages)


def test_assistant_lines_merge_into_one_message_per_id(transcript_file):
    raw_ids = set()
    for line in transcript_file.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "assistant":
            raw_ids.add(entry["message"]["id"])
    ids = [m.message_id for m in _read(transcript_file).messages if m.role == "assistant"]
    assert None not in ids
    assert len(ids) == len(set(ids))
    assert set(ids) == raw_ids


def test_typed_prompts_exclude_markers(transcript_file):
    prompts = _read(transcript_file).typed_prompts(include_sidechain=True)
    assert prompts
    for prompt in prompts:
        assert not prompt.text.lstrip().startswith(MARKERS), prompt


def test_sidechain_flag_follows_the_file(transcript_file):
    transcript = _read(transcript_file)
    if _is_sidechain_file(transcript_file):
        assert all(m.is_sidechain and m.agent_id for m in transcript.messages)
        assert transcript.typed_prompts() == []
        assert transcript.typed_prompts(include_sidechain=True)
    else:
        assert not any(m.is_sidechain for m in transcript.messages)


def test_short_transcript():
    transcript = _read(_data("spotter/short.jsonl"))
    assert transcript.typed_prompts()[0].text == "mix phx.server doesnt seem to start"
    replies = [m for m in transcript.messages if m.message_id == "msg_01MKH1ccEGrZGNPvu8pYiiQa"]
    assert len(replies) == 1
    # Lines 4-9 share the id: a blank text block, thinking, the text, two tool_use blocks.
    assert replies[0].text == "Let me check the project structure and try running the server to see the error."
    assert replies[0].line_no == 4
    [turn] = transcript.turns()
    assert turn.responses == replies and turn.interrupted and turn.source == "prompt"
    assert transcript.last_response() == replies[0].text


def test_compacted_session_with_task_notifications():
    transcript = _read(_data("spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"))
    kinds = {m.kind for m in transcript.messages}
    assert {"compact_summary", "task_notification", "interrupted", "tool_result"} <= kinds
    assert [p.text for p in transcript.typed_prompts()] == ["Implement spotter-gqc", "did you push?"]
    turns = transcript.turns()
    assert [t.source for t in turns] == ["prompt", "task_notification", "task_notification", "prompt"]
    assert turns[0].interrupted and not turns[-1].interrupted
    assert transcript.last_response().startswith("Yes — everything is pushed")


def test_slash_commands_are_not_prompts():
    transcript = _read(_data("spotter/tool_heavy.jsonl"))
    commands = [m for m in transcript.messages if m.kind == "command"]
    assert [m.line_no for m in commands] == [20, 21]
    assert commands[0].text.startswith("<command-name>/mcp</command-name>")
    prompts = transcript.typed_prompts()
    assert not {m.uuid for m in commands} & {m.uuid for m in prompts}
    assert [p.line_no for p in prompts] == [3, 25]
    assert transcript.last_response() is None  # the last turn only called tools before the interrupt


def _line(**entry) -> bytes:
    return json.dumps(entry).encode() + b"\n"


def _prompt(uuid: str, text) -> bytes:
    return _line(type="user", uuid=uuid, message={"role": "user", "content": text})


def _reply(uuid: str, message_id: str, *blocks: dict) -> bytes:
    message = {"id": message_id, "role": "assistant", "content": list(blocks)}
    return _line(type="assistant", uuid=uuid, message=message)


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def test_split_reply_joins_text_blocks_in_order(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        _prompt("u1", "hello")
        + _reply("a1", "m1", _text("first"))
        + _reply("a2", "m1", {"type": "thinking", "thinking": "hidden"})
        + _reply("a3", "m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}})
        + _prompt("u2", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}])
        + _reply("a4", "m1", _text("second"))
    )
    transcript = read_transcript(path)
    assert [(m.kind, m.text) for m in transcript.messages] == [
        ("prompt", "hello"),
        ("response", "first\nsecond"),
        ("tool_result", ""),
    ]
    assert transcript.messages[1].uuid == "a1"


def test_list_prompt_and_interruption_marker(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        _prompt("u1", [_text("look at"), {"type": "image", "source": {}}, _text("this")])
        + _reply("a1", "m1", _text("ok"))
        + _prompt("u2", [_text("[Request interrupted by user]")])
    )
    transcript = read_transcript(path)
    assert [(m.kind, m.text) for m in transcript.typed_prompts()] == [("prompt", "look at\nthis")]
    assert transcript.messages[-1].kind == "interrupted"
    assert transcript.turns()[0].interrupted


def test_malformed_lines_are_reported_and_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        _prompt("u1", "one")
        + b'{"type": "user", "mess\n'
        + b"\n"
        + b"[1, 2]\n"
        + _line(type="user", uuid="u9")
        + _line(type="progress", data={})
        + _prompt("u2", "two")
    )
    transcript = read_transcript(path)
    assert transcript.errors == [
        "line 2: not valid JSON",
        "line 4: not a JSON object",
        "line 5: user line without message content",
    ]
    assert [p.text for p in transcript.typed_prompts()] == ["one", "two"]


def test_non_utf8_bytes_are_replaced(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_prompt("u1", "caf\u00e9").replace(b"\\u00e9", b"\xe9") + _prompt("u2", "next"))
    transcript = read_transcript(path)
    assert transcript.errors == []
    assert [p.text for p in transcript.typed_prompts()] == ["caf\ufffd", "next"]


def test_max_bytes_reads_only_the_tail(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [_prompt(f"u{i}", f"prompt {i}") + _reply(f"a{i}", f"m{i}", _text(f"reply {i}")) for i in range(3)]
    path.write_bytes(b"".join(lines))
    whole = len(lines[2])
    # Exactly the last pair, the last pair plus a partial line (dropped), and more than the whole file.
    cases = ((whole, ["prompt 2"]), (whole + 5, ["prompt 2"]), (10**9, ["prompt 0", "prompt 1", "prompt 2"]))
    for max_bytes, expected in cases:
        transcript = read_transcript(path, max_bytes=max_bytes)
        assert transcript.errors == []
        assert [p.text for p in transcript.typed_prompts()] == expected, max_bytes
    tail = read_transcript(path, max_bytes=whole)
    assert [m.text for m in tail.messages] == ["prompt 2", "reply 2"]
    assert tail.last_response() == "reply 2"
    assert read_transcript(path, max_bytes=0).messages == []


def test_unreadable_paths_raise(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_transcript(tmp_path / "missing.jsonl")
    with pytest.raises(IsADirectoryError):
        read_transcript(tmp_path)


@pytest.mark.slow
def test_import_stays_light():
    code = (
        "import sys, cairn_cli.core.transcript; "
        "print(','.join(m for m in ('torch', 'numpy', 'rich', 'typer', 'tqdm', 'peewee') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
