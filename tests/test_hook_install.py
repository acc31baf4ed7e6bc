"""`cairn hook install / uninstall`: cairn's hooks go into Claude Code's settings.json and nothing else moves."""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cairn_cli.cli import handle_errors
from cairn_cli.commands.hook import install, uninstall
from cairn_cli.core.hooks import agent_settings as cs
from cairn_cli.errors import InvalidInput

CAIRN = "/opt/venv/bin/cairn"
OTHER_PROMPT_GROUP = {"hooks": [{"type": "command", "command": "/usr/local/bin/othertool inject", "timeout": 5}]}
PRE_TOOL_USE = [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}]
EXISTING = {
    "model": "opus",
    "permissions": {"allow": ["Bash(make test)"], "deny": []},
    "hooks": {"UserPromptSubmit": [OTHER_PROMPT_GROUP], "PreToolUse": PRE_TOOL_USE},
    "env": {"FOO": "bär"},
}


def cairn_commands(settings: dict, event: str) -> list[str]:
    return [h["command"] for g in settings.get("hooks", {}).get(event, []) for h in g["hooks"] if cs.is_cairn_hook(h)]


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """test app"""

    app.command("install")(handle_errors(install))
    app.command("uninstall")(handle_errors(uninstall))
    return app


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    return proj


@pytest.fixture
def run(app):
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


# -- the pure functions ----------------------------------------------------------------------------------------


def test_merge_keeps_everything_else():
    before = copy.deepcopy(EXISTING)
    merged = cs.merge(EXISTING, CAIRN)
    assert before == EXISTING  # the input is not mutated
    assert list(merged) == list(EXISTING)  # key order preserved
    for key in ("model", "permissions", "env"):
        assert merged[key] == EXISTING[key]
    assert merged["hooks"]["PreToolUse"] == PRE_TOOL_USE
    assert merged["hooks"]["UserPromptSubmit"][0] == OTHER_PROMPT_GROUP
    assert merged["hooks"]["UserPromptSubmit"][1:] == cs.hook_entries(CAIRN)["UserPromptSubmit"]
    assert merged["hooks"]["Stop"] == cs.hook_entries(CAIRN)["Stop"]
    assert cairn_commands(merged, "UserPromptSubmit") == [f"{CAIRN} hook prompt"]
    assert cairn_commands(merged, "Stop") == [f"{CAIRN} hook stop"]


def test_hook_entries_shape():
    entries = cs.hook_entries("cairn")
    assert entries == {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "cairn hook prompt", "timeout": 10}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "cairn hook stop", "timeout": 30}]}],
    }


def test_merge_is_idempotent():
    once = cs.merge(EXISTING, CAIRN)
    assert cs.merge(once, CAIRN) == once
    assert cs.render(cs.merge(once, CAIRN)) == cs.render(once)


@pytest.mark.parametrize("stale", ["/old/venv/bin/cairn", "/usr/bin/python3 -m cairn_cli", "'/my dir/cairn'"])
def test_stale_cairn_entry_is_replaced_in_place(stale):
    other = {"type": "command", "command": "echo hi"}
    settings = {
        "hooks": {
            "UserPromptSubmit": [
                {"hooks": [other, {"type": "command", "command": f"{stale} hook prompt", "timeout": 99}]},
                {
                    "hooks": [{"type": "command", "command": f"{stale} hook prompt"}]
                },  # a duplicate: dropped with its group
            ]
        }
    }
    merged = cs.merge(settings, CAIRN)
    assert merged["hooks"]["UserPromptSubmit"] == [
        {"hooks": [other, {"type": "command", "command": f"{CAIRN} hook prompt", "timeout": 10}]}
    ]
    assert cairn_commands(merged, "Stop") == [f"{CAIRN} hook stop"]


@pytest.mark.parametrize(
    "command,ours",
    [
        ("/opt/venv/bin/cairn hook prompt", True),
        ("cairn hook stop", True),
        ("/usr/bin/python3 -m cairn_cli hook prompt", True),
        ("/opt/venv/bin/python -S /opt/venv/lib/site-packages/cairn_cli/launcher.py hook stop", True),
        ("'/my venv/bin/python' -S '/my venv/cairn_cli/launcher.py' hook prompt", True),
        ("python /src/other/launcher.py hook prompt", False),  # someone else's launcher
        ("env CAIRN_HOME=/x /opt/venv/bin/cairn hook prompt", True),  # wrapped: still ours, never a second pair
        ("sh -c 'cd /src && cairn hook stop'", True),
        ("/opt/venv/bin/cairn hook prompt 2>>/tmp/hook.err", True),
        ("cairn_cli hook prompt", False),
        ("/usr/local/bin/notcairn hook prompt", False),
        ("cairn rank --scope x", False),
        ("/usr/local/bin/othertool inject", False),
    ],
)
def test_is_cairn_hook(command, ours):
    assert cs.is_cairn_hook({"type": "command", "command": command}) is ours


def test_unmerge_removes_only_cairn():
    settings = copy.deepcopy(EXISTING)
    settings["hooks"]["Stop"] = [
        {
            "hooks": [
                {"type": "command", "command": "notify-send done"},
                {"type": "command", "command": "/x/cairn hook stop"},
            ]
        }
    ]
    merged = cs.merge(settings, CAIRN)
    assert cs.unmerge(merged) == {
        **settings,
        "hooks": {**settings["hooks"], "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
    }
    assert cs.unmerge(cs.merge(EXISTING, CAIRN)) == EXISTING
    assert cs.unmerge(cs.merge({"model": "opus"}, CAIRN)) == {"model": "opus"}  # emptied hooks/events/groups go
    assert cs.unmerge({"hooks": {}}) == {"hooks": {}}  # nothing of ours: untouched


def test_settings_path(tmp_path):
    assert cs.settings_path("project", tmp_path / "p", tmp_path / "h") == tmp_path / "p" / ".claude" / "settings.json"
    assert cs.settings_path("user", tmp_path / "p", tmp_path / "h") == tmp_path / "h" / ".claude" / "settings.json"
    with pytest.raises(InvalidInput):
        cs.settings_path("system", tmp_path, tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"hooks"', "\xff\xfe"])
def test_load_refuses_what_it_cannot_parse(tmp_path, text):
    path = tmp_path / "settings.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(InvalidInput) as exc:
        cs.load(path)
    assert str(path) in exc.value.message and "by hand" in exc.value.hint
    assert cs.load(tmp_path / "missing.json") == {}


def test_write_atomic_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a" / "b" / "settings.json"
    cs.write_atomic(path, "{}\n")
    assert path.read_text() == "{}\n"
    os.chmod(path, 0o600)
    cs.write_atomic(path, '{"x": 1}\n')
    assert path.read_text() == '{"x": 1}\n' and (path.stat().st_mode & 0o777) == 0o600
    assert os.listdir(path.parent) == ["settings.json"]


def test_render_and_diff():
    text = cs.render({"b": 1, "a": "é"})
    assert text == '{\n  "b": 1,\n  "a": "é"\n}\n'
    d = cs.diff("", text, "s.json")
    assert d.startswith("--- s.json\n+++ s.json\n") and '+  "a": "é"\n' in d
    assert cs.diff(text, text, "s.json") == ""


def test_default_command_is_this_python_without_site_on_the_launcher():
    words = shlex.split(cs.default_command())
    assert words == [os.path.abspath(sys.executable), "-S", str(cs.LAUNCHER)]
    assert cs.LAUNCHER.is_file() and cs.LAUNCHER.parent.name == "cairn_cli"
    hook = {"type": "command", "command": f"{cs.default_command()} hook prompt"}
    assert cs.is_cairn_hook(hook) and cs.hook_programs(hook) == words[:1] + words[2:]


# -- through the CLI -----------------------------------------------------------------------------------------


def test_install_into_existing_settings_keeps_other_keys(run, project):
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING, indent=4))
    result = run("install", "--command", CAIRN)
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"installed cairn hooks in {path}" in result.stderr
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "hooks"} == {k: v for k, v in EXISTING.items() if k != "hooks"}
    assert after["hooks"]["PreToolUse"] == PRE_TOOL_USE
    assert after["hooks"]["UserPromptSubmit"][0] == OTHER_PROMPT_GROUP
    assert cairn_commands(after, "UserPromptSubmit") == [f"{CAIRN} hook prompt"]

    text = path.read_text()
    again = run("install", "--command", CAIRN)
    assert again.exit_code == 0, again.output
    assert "already up to date" in again.stderr and path.read_text() == text

    moved = run("install", "--command", "/new/bin/cairn")
    assert moved.exit_code == 0, moved.output
    assert cairn_commands(json.loads(path.read_text()), "Stop") == ["/new/bin/cairn hook stop"]


def test_uninstall_leaves_the_others(run, project):
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING))
    assert run("install", "--command", CAIRN).exit_code == 0
    result = run("uninstall")
    assert result.exit_code == 0, result.output
    assert json.loads(path.read_text()) == EXISTING
    again = run("uninstall")
    assert again.exit_code == 0 and "already up to date" in again.stderr


def test_dry_run_writes_nothing(run, project):
    path = project / ".claude" / "settings.json"
    result = run("install", "--dry-run", "--command", CAIRN)
    assert result.exit_code == 0, result.output
    added = [line for line in result.stdout.splitlines() if line.startswith("+") and "hook prompt" in line]
    assert added == [f'+            "command": "{CAIRN} hook prompt",']
    assert not path.parent.exists()

    path.parent.mkdir()
    path.write_text(json.dumps(EXISTING))
    before = path.read_bytes()
    result = run("install", "--dry-run", "--json", "--command", CAIRN)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["path"] == str(path) and report["changed"] is True and report["dry_run"] is True
    assert "hook prompt" in report["diff"] and path.read_bytes() == before


BROKEN = [
    ('{"hooks": {"Stop": [}', "is not valid JSON"),
    ("[]", "is not a JSON object"),
    ('{"hooks": []}', '"hooks" is not a JSON object'),
]


@pytest.mark.parametrize(
    "args,text,fragment",
    [
        *((["install", "--command", CAIRN], t, f) for t, f in BROKEN),
        (["install", "--command", CAIRN], '{"hooks": {"Stop": {}}}', '"hooks.Stop" is not a JSON array'),
        *((["uninstall"], t, f) for t, f in BROKEN),
    ],
    ids=lambda v: str(v)[:30],
)
def test_broken_settings_exit_2_and_stay_untouched(run, project, args, text, fragment):
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(text)
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0] and "by hand" in lines[0]
    assert str(path) in lines[0] and path.read_text() == text


def test_user_writes_under_home(run, project, tmp_path):
    result = run("install", "--user", "--json", "--command", CAIRN)
    assert result.exit_code == 0, result.output
    path = tmp_path / "userhome" / ".claude" / "settings.json"
    assert json.loads(result.stdout) == {
        "path": str(path),
        "changed": True,
        "dry_run": False,
        "diff": json.loads(result.stdout)["diff"],
    }
    assert cairn_commands(json.loads(path.read_text()), "UserPromptSubmit") == [f"{CAIRN} hook prompt"]
    assert not (project / ".claude").exists()
    assert run("uninstall", "--user").exit_code == 0
    assert json.loads(path.read_text()) == {}


def test_install_defaults_to_the_running_cairn(run, project):
    assert run("install").exit_code == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert cairn_commands(settings, "Stop") == [f"{cs.default_command()} hook stop"]


@pytest.mark.parametrize(
    ("agent", "where", "events", "timeouts"),
    [
        ("codex", ".codex/hooks.json", ["UserPromptSubmit", "Stop"], [10, 30]),
        ("gemini", ".gemini/settings.json", ["BeforeAgent", "AfterAgent"], [10_000, 30_000]),
    ],
)
def test_install_for_codex_and_gemini_merges_and_uninstalls(run, project, agent, where, events, timeouts):
    path = project / where
    path.parent.mkdir()
    theirs = {"model": {"name": "x"}, "hooks": {events[0]: [{"hooks": [{"type": "command", "command": "other"}]}]}}
    path.write_text(json.dumps(theirs))
    dry = run("install", "--agent", agent, "--command", CAIRN, "--dry-run")
    assert dry.exit_code == 0 and f"+++ {path}" in dry.stdout and json.loads(path.read_text()) == theirs
    result = run("install", "--agent", agent, "--command", CAIRN)
    assert result.exit_code == 0, result.output
    after = json.loads(path.read_text())
    assert after["model"] == {"name": "x"} and after["hooks"][events[0]][0] == theirs["hooks"][events[0]][0]
    for event, sub, timeout in zip(events, ("prompt", "stop"), timeouts):
        (ours,) = [h for g in after["hooks"][event] for h in g["hooks"] if cs.is_cairn_hook(h)]
        assert ours == {"type": "command", "command": f"{CAIRN} hook {sub}", "timeout": timeout}
    assert not (project / ".claude").exists()  # another agent's settings are not touched
    assert run("uninstall", "--agent", agent).exit_code == 0
    assert json.loads(path.read_text()) == theirs


def test_an_unknown_agent_is_refused(run, project):
    result = run("install", "--agent", "cursor")
    assert result.exit_code == 2 and "unknown agent 'cursor'" in result.output


def test_codex_user_hooks_live_under_codex_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "ch"))
    assert cs.settings_path("user", tmp_path, tmp_path / "h", "codex") == tmp_path / "ch" / "hooks.json"
