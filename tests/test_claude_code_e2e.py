"""End to end with the real bundled model: real Claude Code transcripts replayed through `cairn hook prompt` ->
the agent's real answer plus a [cm] block -> `cairn hook stop`, turn by turn.

Each transcript is its own project (scope = its cwd's name). Its store holds one memory per answered turn, mined
from that turn's real answer (what an agent would have written), and one memory that the replayed response only
paraphrases (the semantic second chance must catch it). The response of each turn is the transcript's real
assistant text; the [cm] block grades what the prompt hook really showed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.experiment.ab import SHIPPED_B, b_version
from cairn_cli.core.store import deliveries, memories
from cairn_cli.core.transcript import read_transcript
from tests.conftest import shared

TRANSCRIPTS = [
    "fasthooks/sample_main_transcript.jsonl",
    "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "spotter/short.jsonl",
    "spotter/subagent.jsonl",
    "spotter/tool_heavy.jsonl",
]
PARAPHRASED = "The staging database is wiped and reseeded every night at 02:00 UTC, so never keep test data there."
PARAPHRASE = "Anything you leave in the pre-production DB disappears overnight when it gets reset and refilled."


def _sentence(text: str, prompt: str) -> str:
    """The answer's most informative sentence (most distinctive terms the prompt lacks): what the agent would keep."""
    from cairn_cli.core.labels.engagement import distinctive_terms
    from cairn_cli.core.text import term_set

    asked = term_set(prompt)
    pieces = [p.strip(" -*#`") for p in re.split(r"(?<=[.!?])\s+|\n+", text)]
    return max(
        (p for p in pieces if len(p) >= 40), key=lambda p: len(distinctive_terms(p) - asked), default=text.strip()
    )[:300]


def _answered_turns(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    turns = [t for t in read_transcript(path).turns() if t.prompt.kind == "prompt" and any(m.text for m in t.responses)]
    return lines, turns


@pytest.fixture
def replay_env(real_model, monkeypatch):
    monkeypatch.setenv("CAIRN_RANK_K", "10")
    # this replays the label loop; abstention has its own tests (tests/test_abstention.py)
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")


@pytest.mark.parametrize("name", TRANSCRIPTS, ids=lambda n: Path(n).stem[:12])
def test_replay_real_transcript_through_both_hooks(replay_env, cli, capsys, tmp_path, name):
    source = shared("claude_code", *name.split("/"))
    lines, turns = _answered_turns(source)
    assert turns, f"{name} has no answered prompt"
    session, scope = source.stem, re.sub(r"[^A-Za-z0-9._-]+", "-", source.stem)
    mined = []
    for t in turns:
        answer = "\n".join(m.text for m in t.responses if m.text)
        out = cli("memory", "add", _sentence(answer, t.prompt.text), "--scope", scope, "--kind", "fact")
        assert out.exit_code == 0, out.output
        mined.append(max(m.id for m in memories.list_memories(Settings())))
    assert cli("memory", "add", PARAPHRASED, "--scope", scope, "--kind", "pitfall").exit_code == 0
    paraphrased_id = max(m.id for m in memories.list_memories(Settings()))
    s = Settings()
    written_before: int | None = None
    arms_seen: set = set()
    for i, t in enumerate(turns):
        partial = tmp_path / f"{session}.jsonl"  # the transcript as it stood when the prompt was submitted
        partial.write_text("\n".join(lines[: t.prompt.line_no]) + "\n", encoding="utf-8")
        payload = {
            "session_id": session,
            "transcript_path": str(partial),
            "cwd": f"/work/{scope}",
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": t.prompt.text,
        }
        assert hook_entry.run_prompt(json.dumps(payload).encode()) == 0
        shown = [int(x) for x in re.findall(r'<memory id="(\d+)"', capsys.readouterr().out)]
        turn = i + 1
        rows = {r.memory_id: r for r in deliveries.list_deliveries(s, session_id=session, turn=turn)}
        assert sorted(rows) == sorted(shown) and mined[i] in shown and paraphrased_id in shown
        if written_before is not None:
            assert written_before in shown  # what the agent wrote last turn is found this turn
        negative = next((m for m in shown if m not in (mined[i], paraphrased_id)), None)
        grades = [f"{mined[i]}:3", f"{paraphrased_id}:2"] + ([f"{negative}:0!"] if negative else [])
        cm = {
            "m": [
                {
                    "content": f"In {session} turn {turn} the user asked: {t.prompt.text[:80]}",
                    "keywords": ["replay", f"turn{turn}"],
                    "scope": scope,
                    "kind": "fact",
                }
            ],
            "rg": grades,
            "cu": [mined[i]],
            "-!": [negative] if negative else [],
        }
        answer = "\n".join(m.text for m in t.responses if m.text)
        response = f"{answer}\n\n{PARAPHRASE if i == 0 else ''}\n\n[cm]{json.dumps(cm)}[/cm]"
        before = {m: memories.get_memory(m, s).confidence for m in (mined[i], negative) if m}
        stop = {
            "session_id": session,
            "transcript_path": str(partial),
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "last_assistant_message": response,
        }
        assert hook_entry.run_stop(json.dumps(stop).encode()) == 0
        rows = {r.memory_id: r for r in deliveries.list_deliveries(s, session_id=session, turn=turn)}
        # grades and hard negatives, only on what was shown
        assert rows[mined[i]].grade == 3 and rows[mined[i]].hard_negative is False
        assert rows[paraphrased_id].grade == 2
        if negative:
            assert rows[negative].grade == 0 and rows[negative].hard_negative is True
        # engagement: decided on every row, with its method; the mined memory was used word for word
        assert all(r.engaged_method in ("lexical", "semantic") and r.engaged is not None for r in rows.values())
        assert rows[mined[i]].engaged and rows[mined[i]].engaged_method == "lexical"
        if i == 0:  # only paraphrased: the semantic second chance (real MiniLM cosine) catches it
            p = rows[paraphrased_id]
            assert p.engaged and p.engaged_method == "semantic" and p.engaged_score >= 0.55
            assert p.engaged_lexical < s.ENGAGEMENT_LEXICAL_MIN
        # confidence moved by cu / -!
        assert memories.get_memory(mined[i], s).confidence > before[mined[i]]
        if negative:
            assert memories.get_memory(negative, s).confidence < before[negative]
        # the new memory: stamped with the generation version, the session, embedded by the real model
        new = [m for m in memories.list_memories(s, scope=scope) if m.content.startswith(f"In {session} turn {turn}")]
        from cairn_cli.core.store.hookstate import get_turn

        arm = get_turn(session, turn).arm
        arms_seen.add(arm)
        assert len(new) == 1 and new[0].session_id == session
        assert new[0].source_ref == ("gen-1" if arm == "A" else b_version("gen-1", SHIPPED_B))
        assert new[0].embedding_model == "all-MiniLM-L6-v2"
        written_before = new[0].id
