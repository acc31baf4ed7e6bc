"""Codex CLI and Gemini CLI beside Claude Code (#29): each agent's own hook payloads, as the real CLIs sent them
(e2e/samples/hooks, captured by e2e/run_agent.py), drive the same prompt and Stop hooks; Gemini's prompt hook
answers in the JSON form Gemini injects, its response is read from `prompt_response`, and every turn records the
agent that sent it."""

from __future__ import annotations

import json

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.hooks.payload import PROMPT_EVENT, STOP_EVENT, parse_payload
from cairn_cli.core.store import deliveries, memories
from cairn_cli.errors import InvalidInput
from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.usefixtures("backend")

SAMPLES = ROOT / "e2e" / "samples" / "hooks"


def sample(name: str, **changes) -> bytes:
    data = json.loads((SAMPLES / name).read_text())
    data.update(changes)
    data["transcript_path"] = "/nonexistent/transcript.jsonl"  # the CLIs' files are not here
    return json.dumps(data).encode()


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def turn_data(session_id: str) -> dict:
    from cairn_cli.db.tables import HookState

    return HookState.select().where(HookState.session_id == session_id).order_by(HookState.turn.desc()).first().data


@pytest.mark.parametrize(
    ("prompt", "agent"),
    [
        ("claude-01-UserPromptSubmit.json", "claude"),
        ("codex-01-UserPromptSubmit.json", "codex"),
        ("gemini-01-BeforeAgent.json", "gemini"),
    ],
)
def test_each_agents_prompt_is_read_and_its_agent_recorded(store, capsys, prompt, agent):
    payload = parse_payload(sample(prompt), PROMPT_EVENT)
    assert payload.agent == agent and payload.prompt
    assert hook_entry.run_prompt(sample(prompt)) == 0
    out = capsys.readouterr().out
    if agent == "gemini":  # only a JSON answer's additionalContext reaches Gemini's model
        answer = json.loads(out)
        assert answer["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
        assert '<memory id="' in answer["hookSpecificOutput"]["additionalContext"]
    else:
        assert out.startswith("<cairn-rules") and '<memory id="' in out
    data = turn_data(payload.session_id)
    assert data["agent"] == agent
    rows = deliveries.list_deliveries(Settings(), session_id=payload.session_id)
    assert rows and {r.agent for r in rows} == {agent}  # the delivery log records the agent
    assert data.get("turn_id") == (json.loads((SAMPLES / prompt).read_text()).get("turn_id"))


def test_a_gemini_stop_reads_prompt_response_applies_grades_and_writes_the_memory(store, capsys):
    assert hook_entry.run_prompt(sample("gemini-01-BeforeAgent.json")) == 0
    shown = [
        int(x.split('"')[0])
        for x in json.loads(capsys.readouterr().out)["hookSpecificOutput"]["additionalContext"].split('<memory id="')[
            1:
        ]
    ]
    response = (
        "The api proxy forwards /api to port 8080.\n"
        f'[cm]{{"m": [{{"content": "Gemini sessions see the webshop proxy on port 8080", "scope": "webshop"}}], '
        f'"rg": ["{shown[0]}:3"]}}[/cm]'
    )
    raw = sample("gemini-02-AfterAgent.json", prompt_response=response)
    assert parse_payload(raw, STOP_EVENT).last_assistant_message.startswith("The api proxy")
    assert hook_entry.run_stop(raw) == 0
    session = parse_payload(raw, STOP_EVENT).session_id
    rows = {r.memory_id: r for r in deliveries.list_deliveries(Settings(), session_id=session)}
    assert rows[shown[0]].grade == 3
    assert any(
        m.content == "Gemini sessions see the webshop proxy on port 8080" for m in memories.list_memories(Settings())
    )


def test_a_codex_stop_applies_its_cm_block(store, capsys):
    assert hook_entry.run_prompt(sample("codex-01-UserPromptSubmit.json")) == 0
    shown = [int(x.split('"')[0]) for x in capsys.readouterr().out.split('<memory id="')[1:]]
    message = (
        f'Port 8080.\n[cm]{{"m": ["Codex sessions share the store with Claude Code"], "rg": ["{shown[0]}:2"]}}[/cm]'
    )
    raw = sample("codex-02-Stop.json", last_assistant_message=message)
    assert hook_entry.run_stop(raw) == 0
    session = parse_payload(raw, STOP_EVENT).session_id
    rows = {r.memory_id: r for r in deliveries.list_deliveries(Settings(), session_id=session)}
    assert rows[shown[0]].grade == 2


@pytest.mark.parametrize(
    ("event", "hook", "advice"),
    [("AfterAgent", PROMPT_EVENT, "cairn hook stop"), ("BeforeAgent", STOP_EVENT, "cairn hook prompt")],
)
def test_a_payload_for_the_other_hook_names_the_right_command(event, hook, advice):
    raw = json.dumps({"session_id": "s", "hook_event_name": event, "prompt": "x", "prompt_response": "y"})
    with pytest.raises(InvalidInput) as caught:
        parse_payload(raw, hook)
    assert f"register `{advice}` for {event}" in caught.value.one_line()


def test_a_memory_written_in_a_codex_session_is_found_in_a_claude_session_of_the_project(store, capsys):
    assert hook_entry.run_prompt(sample("codex-01-UserPromptSubmit.json")) == 0
    capsys.readouterr()
    message = (
        '[cm]{"m": [{"content": "The nginx proxy of the webshop forwards /api to port 8080", "scope": "webshop"}]}[/cm]'
    )
    assert hook_entry.run_stop(sample("codex-02-Stop.json", last_assistant_message=message)) == 0
    claude = sample("claude-01-UserPromptSubmit.json", prompt="which port does nginx forward /api to?")
    assert hook_entry.run_prompt(claude) == 0
    assert "The nginx proxy of the webshop forwards /api to port 8080" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["codex-rollout.jsonl", "gemini-chat.jsonl", "gemini-chat-two-files.jsonl"])
def test_codex_rollouts_and_gemini_chats_are_read_as_turns(name):
    from cairn_cli.core.transcript import read_transcript

    transcript = read_transcript(ROOT / "e2e" / "samples" / name)
    assert transcript.errors == []
    turns = transcript.turns()
    assert [t.prompt.text for t in turns] == [
        "Which port does the webshop api proxy forward /api to?",
        "How do I run the webshop tests?",
    ]  # the environment / session context and the hook output are not the user's words
    assert all(len(t.responses) == 1 and "[cm]" in t.responses[0].text for t in turns)
    assert "hook_context" not in json.dumps([m.text for m in transcript.messages])


@pytest.mark.parametrize("name", ["codex-rollout.jsonl", "gemini-chat.jsonl"])
def test_the_window_of_a_codex_or_gemini_turn_holds_the_turns_before(name):
    from cairn_cli.core.ranking.context import build_context_window

    window = build_context_window(
        "where do deploys run from?", ROOT / "e2e" / "samples" / name, max_turns=3, max_chars=4000
    )
    assert window.turns_used == 2 and window.notes == []
    assert "user: Which port does the webshop api proxy forward /api to?" in window.text
    assert "user: How do I run the webshop tests?" in window.text
    assert "assistant: The fake model answered" in window.text and "[cm]" not in window.text


def test_doctor_says_why_each_agents_hooks_would_not_run(cli, tmp_path, monkeypatch):
    home, project = tmp_path / "userhome", tmp_path / "webshop"
    for folder in (".claude", ".codex", ".gemini"):
        (home / folder).mkdir(parents=True)
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)

    def findings() -> list[str]:
        result = cli("doctor", "--only", "hooks", "--json")
        return [f"{f['status']} {f['message']} | {f['fix']}" for f in json.loads(result.stdout)["findings"]]

    before = findings()
    assert len(before) == 3 and all(f.startswith("warn") and "not installed" in f for f in before)
    assert any("cairn hook install --agent gemini" in f for f in before)
    for agent in ("claude", "codex", "gemini"):
        assert cli("hook", "install", "--agent", agent).exit_code == 0
    after = findings()
    assert any(f.startswith("ok claude: hooks installed (project)") for f in after)
    assert any(
        f.startswith("warn codex: this project is not trusted") and 'trust_level = "trusted"' in f for f in after
    )
    assert any(f.startswith("warn gemini: this folder is not trusted") for f in after)
    (home / ".codex" / "config.toml").write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    trusted = findings()
    assert all(f.startswith("ok") for f in trusted), trusted
    assert cli("doctor", "--only", "hooks").exit_code == 0
