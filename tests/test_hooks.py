"""`cairn hook prompt|stop`: Claude Code's payloads in, the turn recorded and labelled, and never a broken session."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.experiment.rules import RULES_TAG
from cairn_cli.core.hooks.payload import hook_scope, parse_payload
from cairn_cli.core.store import deliveries, memories
from cairn_cli.errors import InvalidInput
from tests.conftest import EXAMPLES, ROOT

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def prompt_payload(prompt="integration tests fail with connection refused on port 5433", **extra):
    return json.dumps(
        {
            "session_id": "s1",
            "transcript_path": "/nonexistent/s1.jsonl",
            "cwd": "/home/USER/webshop",
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
            "prompt_id": "p-1",
            **extra,
        }
    ).encode()


def stop_payload(message, **extra):
    return json.dumps(
        {
            "session_id": "s1",
            "transcript_path": "/nonexistent/s1.jsonl",
            "cwd": "/home/USER/webshop",
            "hook_event_name": "Stop",
            "stop_hook_active": False,
            "last_assistant_message": message,
            **extra,
        }
    ).encode()


def arm_version(arm: str | None) -> str:
    from cairn_cli.core.experiment.ab import SHIPPED_B, b_version

    return b_version("gen-1", SHIPPED_B) if arm == "B" else "gen-1"


def hook_log(home) -> str:
    path = home / "logs" / "hook.log"
    return path.read_text() if path.exists() else ""


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def run_prompt(capsys, raw):
    assert hook_entry.run_prompt(raw) == 0
    return capsys.readouterr().out


def test_prompt_hook_ranks_prints_rules_and_memories_and_records_the_turn(store, capsys, cairn_home):
    out = run_prompt(capsys, prompt_payload())
    assert out.startswith(f'<{RULES_TAG} version="gen-1">') and 'scope "webshop"' in out
    assert '<memory id="1"' in out and len(out) <= Settings().INJECTION_MAX_CHARS + 1
    rows = deliveries.list_deliveries(Settings(), session_id="s1")
    assert rows and {r.turn for r in rows} == {1} and rows[0].scope == "webshop" and rows[0].layer == "prompt"
    from cairn_cli.core.store.hookstate import get_turn

    turn = get_turn("s1", 1)
    assert turn.data["prompt"].startswith("integration tests") and turn.arm in ("A", "B")
    assert turn.data["source_ref"] == arm_version(turn.arm)  # the version this turn's memories will carry
    assert out.rstrip().endswith("</cairn-ab>") == (turn.arm == "B")  # B's instruction comes last, only in B
    assert turn.transcript_path == "/nonexistent/s1.jsonl" and turn.is_subagent is False
    assert "transcript ignored" in hook_log(cairn_home)  # a missing transcript is a note, not a failure
    # the next prompt is the next turn
    run_prompt(capsys, prompt_payload("how should prices be stored?"))
    assert max(r.turn for r in deliveries.list_deliveries(Settings(), session_id="s1")) == 2


def test_a_new_project_ranks_global_memories_and_is_told_its_scope(store, capsys):
    out = run_prompt(capsys, prompt_payload("how do I deploy?", cwd="/src/brand-new"))
    assert 'scope "brand-new"' in out
    assert {r.scope for r in deliveries.list_deliveries(Settings(), session_id="s1")} <= {"global"}


def test_scope_comes_from_the_setting_then_the_cwd():
    payload = parse_payload(prompt_payload(cwd="/home/u/My Project/"), "UserPromptSubmit")
    assert hook_scope(payload, "") == "My-Project" and hook_scope(payload, "shop") == "shop"
    assert hook_scope(parse_payload(prompt_payload(cwd=None), "UserPromptSubmit"), "") == "global"


def test_stop_hook_applies_memories_grades_evidence_and_engagement_once(store, capsys, cairn_home):
    out = run_prompt(capsys, prompt_payload())
    shown = [int(x.split('"')[1]) for x in out.split("<memory id=")[1:]]
    assert shown[0] == 1
    unshown = next(i for i in range(1, 19) if i not in shown)
    message = (
        "Start PostgreSQL with `make db-up` before pytest; it listens on 5433.\n"
        '[cm]{"m": [{"content": "Run make db-up before pytest in the webshop", "keywords": ["pytest"], '
        f'"scope": "webshop", "kind": "procedure"}}], "rg": ["{shown[0]}:3", "{shown[1]}:0!", '
        f'"{unshown}:2", "{shown[2]}:7"], "cu": [{shown[0]}], "-!": [{shown[1]}]}}[/cm]'
    )
    assert hook_entry.run_stop(stop_payload(message)) == 0
    assert capsys.readouterr().out == ""  # a passive Stop hook prints nothing
    s = Settings()
    rows = {r.memory_id: r for r in deliveries.list_deliveries(s, session_id="s1")}
    assert (rows[shown[0]].grade, rows[shown[0]].hard_negative) == (3, False)
    assert (rows[shown[1]].grade, rows[shown[1]].hard_negative) == (0, True)
    assert rows[shown[2]].grade is None  # grade 7 skipped
    assert rows[shown[0]].engaged is True and rows[shown[0]].engaged_method == "lexical"
    assert all(r.engaged_method in ("lexical", "semantic") for r in rows.values())
    assert memories.get_memory(shown[0], s).corroborations == 1
    assert memories.get_memory(shown[1], s).contradictions == 1
    new = [m for m in memories.list_memories(s) if m.content.startswith("Run make db-up")]
    from cairn_cli.core.store.hookstate import get_turn

    assert len(new) == 1 and new[0].session_id == "s1"
    assert new[0].source_ref == arm_version(get_turn("s1", 1).arm)
    assert new[0].embedding_model == "hashing"
    log = hook_log(cairn_home)
    assert "1 memories written, 2 graded, 1 grades rejected" in log and "outside 0-3" in log
    # the same Stop again (Claude Code retries, or stop_hook_active): nothing changes
    assert hook_entry.run_stop(stop_payload(message, stop_hook_active=True)) == 0
    assert memories.get_memory(shown[0], s).corroborations == 1
    assert len([m for m in memories.list_memories(s) if m.content.startswith("Run make db-up")]) == 1
    assert "already applied" in hook_log(cairn_home)


def test_stop_reads_the_response_from_the_transcript_when_the_payload_lacks_it(store, capsys, tmp_path):
    transcript = tmp_path / "s1.jsonl"
    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "tests fail, port 5433"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {
                "id": "m1",
                "role": "assistant",
                "content": [{"type": "text", "text": "Run `make db-up` so PostgreSQL listens on 5433, then pytest."}],
            },
        },
        {
            "type": "assistant",
            "uuid": "a2",
            "message": {
                "id": "m1",
                "role": "assistant",
                "content": [{"type": "text", "text": '[cm]{"rg": ["1:3"]}[/cm]'}],
            },
        },
    ]
    transcript.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run_prompt(capsys, prompt_payload(transcript_path=str(transcript)))
    payload = json.loads(stop_payload(None))
    payload.pop("last_assistant_message")
    payload["transcript_path"] = str(transcript)
    assert hook_entry.run_stop(json.dumps(payload).encode()) == 0
    rows = {r.memory_id: r for r in deliveries.list_deliveries(Settings(), session_id="s1")}
    assert rows[1].grade == 3 and rows[1].engaged is True


def test_subagent_events_are_recorded_marked_and_never_graded(store, capsys):
    run_prompt(capsys, prompt_payload())
    run_prompt(capsys, prompt_payload("subagent: look for the proxy config", agent_id="a-1", agent_type="Explore"))
    from cairn_cli.core.store.hookstate import get_turn

    sub = get_turn("s1", 2)
    assert sub.is_subagent is True and sub.agent_id == "a-1" and sub.arm is None  # subagents get no arm
    assert {r.layer for r in deliveries.list_deliveries(Settings(), session_id="s1", turn=2)} == {"subagent"}
    assert hook_entry.run_stop(stop_payload('[cm]{"rg": ["1:3"]}[/cm]', agent_id="a-1", agent_type="Explore")) == 0
    assert all(r.grade is None for r in deliveries.list_deliveries(Settings(), session_id="s1"))
    assert get_turn("s1", 1).data["subagent_stops"] == [{"agent_id": "a-1", "agent_type": "Explore"}]
    # the main agent's Stop grades the main turn (1), not the subagent's
    assert hook_entry.run_stop(stop_payload('[cm]{"rg": ["1:3"]}[/cm]')) == 0
    assert {r.turn for r in deliveries.list_deliveries(Settings(), session_id="s1") if r.grade == 3} == {1}


def test_the_injection_respects_claude_codes_limit(cli, capsys):
    for i in range(12):
        assert (
            cli(
                "memory", "add", f"deploy note {i}: " + "the release deploy needs care " * 60, "--scope", "webshop"
            ).exit_code
            == 0
        )
    out = run_prompt(capsys, prompt_payload("how do I deploy the release?"))
    assert len(out.rstrip("\n")) <= Settings().INJECTION_MAX_CHARS and out.count("<memory ") >= 1
    shown = out.count("<memory ")
    assert len(deliveries.list_deliveries(Settings(), session_id="s1")) == shown  # only what was shown is logged


BAD_HOOK_INPUT = [
    # (hook, stdin bytes, log fragment)
    ("prompt", b"{not json", "not JSON"),
    ("prompt", b"", "stdin is empty"),
    ("prompt", b"[1, 2]", "not a JSON object"),
    ("prompt", json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit"}).encode(), "has no prompt"),
    ("prompt", json.dumps({"session_id": 7, "prompt": "x"}).encode(), "'session_id' must be a string"),
    ("prompt", stop_payload("hi"), "payload is for 'Stop'"),
    ("stop", b"\xff\xfe garbage", "not JSON"),
    ("stop", stop_payload("answer [cm] {{{ garbage [/cm]"), "[cm] block is not JSON"),
    ("stop", stop_payload('[cm]{"rg": ["1:7"]}[/cm]'), "grade 7 for memory 1 is outside 0-3"),
    ("stop", stop_payload('[cm]{"rg": ["999:3"], "cu": [998]}[/cm]'), "cu: memory 998 does not exist"),
    ("stop", json.dumps({"session_id": "s1", "transcript_path": "/nonexistent.jsonl"}).encode(), "no response text"),
]


@pytest.mark.parametrize("hook,raw,fragment", BAD_HOOK_INPUT, ids=lambda v: str(v)[:30])
def test_bad_hook_input_is_logged_and_exits_0(store, capsys, cairn_home, hook, raw, fragment):
    run_prompt(capsys, prompt_payload())
    before = [(m.id, m.corroborations, m.contradictions) for m in memories.list_memories(Settings())]
    code = hook_entry.run_prompt(raw) if hook == "prompt" else hook_entry.run_stop(raw)
    out = capsys.readouterr().out
    assert code == 0 and out == ""
    assert fragment in hook_log(cairn_home)
    assert [(m.id, m.corroborations, m.contradictions) for m in memories.list_memories(Settings())] == before


def test_non_utf8_and_huge_prompts_still_rank(store, capsys, cairn_home):
    raw = prompt_payload("integration tests fail").replace(b"fail", b"fail \xff\xfe")  # not UTF-8, inside the JSON
    out = run_prompt(capsys, raw)
    assert '<memory id="1"' in out
    huge = run_prompt(capsys, prompt_payload("connection refused on port 5433 " + "lorem ipsum " * 200_000))
    assert '<memory id="1"' in huge
    assert "error" not in hook_log(cairn_home)


@pytest.mark.slow
def test_the_hook_entry_never_fails_the_session_even_when_the_home_is_unusable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {
        "CAIRN_HOME": str(blocker / "home"),
        "CAIRN_DAEMON": "off",
        "CAIRN_EMBED_MODEL": "hashing",
        "PATH": "/usr/bin:/bin",
    }
    for hook, payload in (("prompt", prompt_payload()), ("stop", stop_payload("hi"))):
        out = subprocess.run(
            [sys.executable, "-m", "cairn_cli", "hook", hook],
            input=payload,
            capture_output=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
        assert out.returncode == 0 and out.stdout == b"", out.stderr


def test_parse_payload_ignores_unknown_keys():
    payload = parse_payload(prompt_payload(effort="high", scratchpad_dir="/tmp/x"), "UserPromptSubmit")
    assert payload.session_id == "s1" and payload.prompt.startswith("integration")
    with pytest.raises(InvalidInput):
        parse_payload(b"null", "Stop")


def test_a_stop_that_merges_one_memory_and_adds_another_embeds_the_new_one_with_its_own_vector(store, capsys):
    import numpy as np

    from cairn_cli.core.store.embeddings import embedding_text
    from cairn_cli.db.tables import Memory
    from cairn_cli.ml.models import HashingEncoder

    run_prompt(capsys, prompt_payload())
    existing = memories.get_memory(1, Settings()).content  # merged (dedup), listed first
    message = (
        '[cm]{"m": [{"content": ' + json.dumps(existing) + "}, "
        '{"content": "Gift cards are redeemed with shop giftcard redeem CODE", "keywords": ["giftcard"]}]}[/cm]'
    )
    assert hook_entry.run_stop(stop_payload(message)) == 0
    new = Memory.get(Memory.content == "Gift cards are redeemed with shop giftcard redeem CODE")
    expected = HashingEncoder().encode([embedding_text(new.content, list(new.keywords))])[0]
    assert np.allclose(np.frombuffer(new.embedding, dtype=np.float32), expected)
