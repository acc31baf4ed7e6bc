"""build_context_window: cleaned, bounded, keyed; tested on the real Claude Code transcripts."""

import json
from pathlib import Path

import pytest

from cairn_cli.core.ranking.context import build_context_window, clean
from cairn_cli.errors import InvalidInput, NotFound
from tests.conftest import SHARED_DATA, shared

MAIN_TRANSCRIPTS = sorted((SHARED_DATA / "claude_code" / "spotter").glob("*.jsonl")) + [
    SHARED_DATA / "claude_code" / "fasthooks" / "sample_main_transcript.jsonl"
]


def _tool_outputs(path: Path) -> list[str]:
    """Long tool-result texts of the transcript (what must never reach the window)."""
    out, said = [], []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        content = (row.get("message") or {}).get("content") if isinstance(row.get("message"), dict) else None
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "text":
                    said.append(" ".join(block.get("text", "").split()))
                if block.get("type") == "tool_result":
                    text = block.get("content")
                    text = (
                        text
                        if isinstance(text, str)
                        else " ".join(b.get("text", "") for b in (text or []) if isinstance(b, dict))
                    )
                    text = " ".join(text.split())
                    if len(text) > 60:
                        out.append(text[:60])
    # the agent may quote a tool's output in its own words; that quote belongs in the window
    return [t for t in out if not any(t in s for s in said)]


@pytest.mark.parametrize("path", MAIN_TRANSCRIPTS, ids=lambda p: p.name)
def test_real_transcripts_are_cleaned_and_bounded(path):
    shared("claude_code")
    window = build_context_window("what should we do next about the failing deploy?", path, max_turns=3, max_chars=2000)
    text = window.text
    assert text.startswith("what should we do next about the failing deploy?")
    assert len(text) <= 2000
    assert "\n" not in text and "  " not in text
    for marker in (
        "<system-reminder>",
        "<cairn-memories",
        "[cm]",
        "<command-name>",
        "<task-notification>",
        "tool_use_id",
        "<local-command-stdout>",
    ):
        assert marker not in text
    for tool_text in _tool_outputs(path):
        assert tool_text not in text, "tool output leaked into the context window"
    assert window.turns_used <= 3
    assert (
        window.key
        == build_context_window(
            "what should we do next about the failing deploy?", path, max_turns=3, max_chars=2000
        ).key
    )


def test_short_transcript_window_has_the_earlier_turn():
    path = shared("claude_code", "spotter", "short.jsonl")
    window = build_context_window("and now?", path, max_turns=3, max_chars=2000)
    assert "user: mix phx.server doesnt seem to start" in window.text
    assert "assistant: Let me check the project structure" in window.text
    assert window.turns_used == 1


def _write(tmp_path, rows):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _user(text, **extra):
    return {"type": "user", "uuid": text[:8], "message": {"role": "user", "content": text}, **extra}


def _assistant(mid, text):
    return {
        "type": "assistant",
        "uuid": mid,
        "message": {"id": mid, "role": "assistant", "content": [{"type": "text", "text": text}]},
    }


def test_cairns_own_blocks_and_reminders_are_dropped(tmp_path):
    path = _write(
        tmp_path,
        [
            _user(
                "fix the login <system-reminder>secret reminder</system-reminder> bug "
                '<cairn-memories session="s"><memory id="1">injected text</memory></cairn-memories>'
            ),
            _assistant("m1", 'Fixed the login bug.\n[cm]{"rg": ["1:3"]}[/cm]'),
            _user("<command-name>/mcp</command-name>"),
        ],
    )
    text = build_context_window("next", path, max_turns=3, max_chars=2000).text
    assert text == "next assistant: Fixed the login bug. user: fix the login bug"


def test_turn_and_char_bounds(tmp_path):
    rows = []
    for i in range(10):
        rows += [_user(f"question number {i} " + "x" * 50), _assistant(f"m{i}", f"answer {i}")]
    path = _write(tmp_path, rows)
    window = build_context_window("now", path, max_turns=2, max_chars=2000)
    assert window.turns_used == 2 and "question number 8" in window.text and "question number 7" not in window.text
    assert len(build_context_window("now", path, max_turns=10, max_chars=150).text) <= 150


def test_the_current_prompt_is_not_repeated_from_the_transcript(tmp_path):
    path = _write(tmp_path, [_user("first"), _assistant("m1", "ok"), _user("second question")])
    assert (
        build_context_window("second question", path, max_turns=3, max_chars=2000).text
        == "second question assistant: ok user: first"
    )


def test_key_changes_with_the_window():
    a = build_context_window("alpha", None, max_turns=3, max_chars=100)
    b = build_context_window("beta", None, max_turns=3, max_chars=100)
    assert a.key != b.key and len(a.key) == 16


@pytest.mark.parametrize("prompt", ["", "   \n", "<system-reminder>only this</system-reminder>"])
def test_empty_prompt_is_invalid(prompt):
    with pytest.raises(InvalidInput, match="prompt is empty"):
        build_context_window(prompt, None, max_turns=3, max_chars=100)


def test_unreadable_transcript(tmp_path):
    with pytest.raises(NotFound, match="does not exist"):
        build_context_window("x", tmp_path / "missing.jsonl", max_turns=3, max_chars=100)
    with pytest.raises(NotFound, match="cannot read transcript"):
        build_context_window("x", tmp_path, max_turns=3, max_chars=100)


def test_clean_folds_whitespace():
    assert clean("a \n\n\t b") == "a b"
