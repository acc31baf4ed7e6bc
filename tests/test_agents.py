"""Codex CLI and Gemini CLI beside Claude Code (#29): each agent's own hook payloads, as the real CLIs sent them
(e2e/samples/hooks, captured by e2e/run_agent.py), drive the same prompt and Stop hooks; Gemini's prompt hook
answers in the JSON form Gemini injects, its response is read from `prompt_response`, and every turn records the
agent that sent it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.hooks.agents import undouble_gemini
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


@pytest.mark.parametrize("name", ["gemini-02-AfterAgent.json", "gemini-04-AfterAgent.json"])
def test_geminis_doubled_streamed_response_is_read_once(store, name):
    """Gemini CLI 0.61 sends a streamed answer whole, then again with a space at every stream boundary: the Stop
    reads the whole answer once and writes its memory as the model wrote it, not the copy with broken words."""
    doubled = json.loads((SAMPLES / name).read_text())["prompt_response"]
    assert doubled.count("[cm]") == 2  # what the real CLI sent
    payload = parse_payload(sample(name), STOP_EVENT)
    text = payload.last_assistant_message
    assert text.count("[cm]") == 1 and text.endswith("[/cm]") and doubled.startswith(text)
    assert hook_entry.run_stop(sample(name)) == 0
    written = json.loads(text.split("[cm]")[1].split("[/cm]")[0])["m"][0]["content"]
    assert written in {m.content for m in memories.list_memories(Settings())}


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from(["the", "proxy", "port", "8000", "[cm]", '{"m":', "a", "b", "\n"]), min_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=60), min_size=2, max_size=40),
)
def test_undoubling_recovers_any_streamed_answer_and_leaves_other_text_alone(words, cuts):
    text = " ".join(words) + " [/cm]"
    pieces, at = [], 0
    for cut in cuts:
        if at < len(text):
            pieces.append(text[at : at + cut])
            at += cut
    if at < len(text):
        pieces.append(text[at:])
    assert undouble_gemini(text) == text  # an answer sent once is kept whole
    doubled = text + " " + " ".join(pieces[1:])
    if len(pieces) < 3 or len(text) - len(pieces[0]) - text[len(pieces[0]) :].count(" ") < 32:
        # two pieces repeat the tail unbroken (kept: nothing in it is cut); a repeat under 32 letters could be
        # the answer's own words
        assert undouble_gemini(doubled) in (doubled, text)
        return
    assert undouble_gemini(doubled) == text


def test_a_response_that_repeats_itself_is_not_cut():
    for text in ("a b " * 50, "word " * 60, "ok, " * 40 + "ok."):
        assert undouble_gemini(text) == text


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
    # trusted now; left: the daemon, down here (the prompt hook would start it)
    assert [f for f in trusted if not f.startswith("ok")] == [
        f
        for f in trusted
        if f.startswith("warn the daemon is stopped")
        and f.endswith("| cairn daemon start (cairn daemon status says why it stopped)")
    ] and len(trusted) == 4, trusted
    assert cli("doctor", "--only", "hooks").exit_code == 1


def test_doctor_names_hooks_whose_cairn_is_gone_and_a_store_they_cannot_open(cli, tmp_path, monkeypatch):
    project = tmp_path / "webshop"
    project.mkdir()
    monkeypatch.chdir(project)
    assert (
        cli("hook", "install", "--agent", "codex", "--command", str(tmp_path / "old-venv" / "bin" / "cairn")).exit_code
        == 0
    )
    assert cli("hook", "install", "--agent", "gemini", "--user").exit_code == 0  # the running cairn: there
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    monkeypatch.setenv("CAIRN_DB_URL", f"sqlite:///{tmp_path / 'nowhere' / 'memory.db'}")

    result = cli("doctor", "--only", "hooks", "--json")
    found = [(f["status"], f["message"], f["fix"]) for f in json.loads(result.stdout)["findings"]]
    gone = [f for f in found if "which is not there" in f[1]]
    assert gone == [
        (
            "error",
            f"codex: the project hooks run {tmp_path / 'old-venv' / 'bin' / 'cairn'}, which is not there (moved or "
            "uninstalled)",
            "cairn hook install --agent codex",
        )
    ]
    store = [f for f in found if "cannot open the store" in f[1]]
    assert {f[1].split(":")[0] for f in store} == {"codex", "gemini"} and all(f[0] == "error" for f in store)
    assert result.exit_code != 0


def test_doctor_names_a_launcher_script_that_is_gone_and_not_the_python_that_is_there(cli, tmp_path, monkeypatch):
    project = tmp_path / "webshop"
    project.mkdir()
    monkeypatch.chdir(project)
    gone = tmp_path / "old-venv" / "cairn_cli" / "launcher.py"
    assert cli("hook", "install", "--command", f"{sys.executable} -S {gone}").exit_code == 0
    assert cli("hook", "install", "--agent", "gemini").exit_code == 0  # the running cairn's launcher: there

    result = cli("doctor", "--only", "hooks", "--json")
    found = [f["message"] for f in json.loads(result.stdout)["findings"] if "which is not there" in f["message"]]
    assert found == [f"claude: the project hooks run {gone}, which is not there (moved or uninstalled)"]


SECRET = "ghp_" + "0123456789abcdefghij" + "ABCDEFGHIJ012345"  # a GitHub token's shape, made up


@pytest.mark.parametrize("name", ["codex-rollout.jsonl", "gemini-chat.jsonl"])
def test_another_agents_transcript_is_redacted_as_it_is_read(tmp_path, name):
    from cairn_cli.core.transcript import read_transcript

    text = (ROOT / "e2e" / "samples" / name).read_text()
    path = tmp_path / name
    path.write_text(text.replace("How do I run the webshop tests?", f"How do I run the webshop tests? token {SECRET}"))
    prompts = [t.prompt.text for t in read_transcript(path).turns()]
    assert prompts[1] == "How do I run the webshop tests? token [redacted:github-token]"


@pytest.mark.parametrize(
    ("prompt", "stop"),
    [
        ("codex-01-UserPromptSubmit.json", "codex-02-Stop.json"),
        ("gemini-01-BeforeAgent.json", "gemini-02-AfterAgent.json"),
    ],
)
def test_a_secret_in_another_agents_payload_is_never_stored(store, capsys, cairn_home, prompt, stop):
    assert hook_entry.run_prompt(sample(prompt, prompt=f"deploy with token {SECRET} <private>my notes</private>")) == 0
    capsys.readouterr()
    field = "prompt_response" if prompt.startswith("gemini") else "last_assistant_message"
    answer = f'Done with {SECRET}.\n[cm]{{"m": [{{"content": "Deploys use the token {SECRET} from the vault", "scope": "webshop"}}]}}[/cm]'
    assert hook_entry.run_stop(sample(stop, **{field: answer})) == 0
    stored = b"".join(p.read_bytes() for p in cairn_home.rglob("*") if p.is_file())  # SQLite's stores, the logs
    assert SECRET.encode() not in stored and b"my notes" not in stored
    session = parse_payload(sample(stop), STOP_EVENT).session_id
    rows = deliveries.list_deliveries(Settings(), session_id=session)
    kept = json.dumps([turn_data(session), [m.content for m in memories.list_memories(Settings())]])
    assert rows and SECRET not in kept and "my notes" not in kept and "[redacted:github-token]" in kept


# What `codex app-server` (0.169.0) answered hooks/list for a project with cairn's hooks installed (trimmed)
CODEX_HOOKS_LIST = {
    "id": 2,
    "result": {
        "data": [
            {
                "cwd": "{cwd}",
                "hooks": [
                    {
                        "key": "{cwd}/.codex/hooks.json:user_prompt_submit:0:0",
                        "eventName": "userPromptSubmit",
                        "handlerType": "command",
                        "command": "/venv/bin/cairn hook prompt",
                        "source": "project",
                        "currentHash": "sha256:769c",
                        "trustStatus": "{trust}",
                    },
                    {
                        "key": "{cwd}/.codex/hooks.json:stop:0:0",
                        "eventName": "stop",
                        "handlerType": "command",
                        "command": "/venv/bin/cairn hook stop",
                        "source": "project",
                        "currentHash": "sha256:7c4c",
                        "trustStatus": "untrusted",
                    },
                    {"key": "x", "eventName": "stop", "command": "notify-send done", "trustStatus": "untrusted"},
                ],
            }
        ]
    },
}


def fake_codex(bin_dir, answer: dict | None) -> None:
    """A `codex` whose app-server answers hooks/list as the real one did (or never answers: `answer` None)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    reply = json.dumps(answer) if answer is not None else ""
    script = f"""#!{sys.executable}
import sys
for line in sys.stdin:
    if '"hooks/list"' in line and {reply!r}:
        print('{{"method": "configWarning", "params": {{}}}}', flush=True)
        print({reply!r}, flush=True)
"""
    (bin_dir / "codex").write_text(script)
    (bin_dir / "codex").chmod(0o755)


@pytest.mark.parametrize(("trust", "status"), [("untrusted", "warn"), ("trusted", "warn")])
def test_doctor_asks_codex_which_of_cairns_hooks_it_trusts(cli, tmp_path, monkeypatch, trust, status):
    from cairn_cli.core.hooks import codex_trust

    project = tmp_path / "webshop"
    project.mkdir()
    monkeypatch.chdir(project)
    (tmp_path / "userhome" / ".codex").mkdir(parents=True)
    (tmp_path / "userhome" / ".codex" / "config.toml").write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    assert cli("hook", "install", "--agent", "codex").exit_code == 0
    answer = json.loads(json.dumps(CODEX_HOOKS_LIST).replace("{cwd}", str(project)).replace("{trust}", trust))
    fake_codex(tmp_path / "bin", answer)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    listed = codex_trust.cairn_hooks(str(tmp_path / "bin" / "codex"), project, dict(os.environ))
    assert [(h.event, h.trust, h.current_hash) for h in listed] == [
        ("userPromptSubmit", trust, "sha256:769c"),
        ("stop", "untrusted", "sha256:7c4c"),
    ]  # someone else's hook is not cairn's business
    found = json.loads(cli("doctor", "--only", "hooks", "--json").stdout)["findings"]
    codex = [f for f in found if f["message"].startswith("codex:")]
    untrusted = "userPromptSubmit (untrusted), stop (untrusted)" if trust == "untrusted" else "stop (untrusted)"
    assert [(f["status"], f["message"].split(": ", 2)[-1]) for f in codex] == [(status, untrusted)]
    assert "/hooks" in codex[0]["fix"]


def test_a_codex_that_does_not_answer_is_said_not_waited_for(tmp_path):
    from cairn_cli.core.hooks import codex_trust

    fake_codex(tmp_path / "bin", None)
    said = codex_trust.cairn_hooks(str(tmp_path / "bin" / "codex"), tmp_path, dict(os.environ), timeout_s=0.5)
    assert said == "codex app-server did not answer hooks/list in time"
    missing = codex_trust.cairn_hooks(str(tmp_path / "nowhere" / "codex"), tmp_path, dict(os.environ))
    assert isinstance(missing, str) and missing.startswith("could not start")


CACHED_CODEX = (
    Path(
        os.environ.get("CAIRN_E2E_NPM")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn-e2e" / "npm"
    )
    / "codex-0.169.0"
    / "node_modules"
    / ".bin"
    / "codex"
)


@pytest.mark.slow
def test_doctor_asks_the_real_codex_and_sees_the_trust_it_records(cli, tmp_path, monkeypatch):
    """The real Codex CLI (installed by `make e2e`; skipped before it has run once): cairn's hooks untrusted, then
    trusted the way Codex records a review (their hashes in config.toml), as its own app-server reports them."""
    from cairn_cli.core.hooks import codex_trust

    if not CACHED_CODEX.exists():
        pytest.skip(f"Codex CLI not installed at {CACHED_CODEX} (make e2e installs it)")
    project = tmp_path / "webshop"
    project.mkdir()
    monkeypatch.chdir(project)
    config = tmp_path / "userhome" / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n\n[analytics]\nenabled = false\n')
    assert cli("hook", "install", "--agent", "codex").exit_code == 0
    monkeypatch.setenv("PATH", f"{CACHED_CODEX.parent}{os.pathsep}{os.environ['PATH']}")

    def codex_findings() -> list[tuple[str, str]]:
        found = json.loads(cli("doctor", "--only", "hooks", "--json").stdout)["findings"]
        return [(f["status"], f["message"]) for f in found if f["message"].startswith("codex:")]

    assert codex_findings() == [
        (
            "warn",
            "codex: Codex does not trust cairn's hooks yet, so it skips them without a word: userPromptSubmit "
            "(untrusted), stop (untrusted)",
        )
    ]
    listed = codex_trust.cairn_hooks(str(CACHED_CODEX), project, dict(os.environ))
    assert len(listed) == 2
    with config.open("a") as fh:
        for hook in listed:
            fh.write(f'\n[hooks.state."{hook.key}"]\ntrusted_hash = "{hook.current_hash}"\n')
    assert codex_findings() == [("ok", "codex: hooks installed (project) and trusted by Codex")]
