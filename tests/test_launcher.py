"""cairn_cli/launcher.py: the hook command `cairn hook install` writes (`<python> -S …/launcher.py hook prompt`) runs
the hot path without python's `site` step and without the modules `site` and `json` would import, and everything
beyond the hot path (the fallback, the daemon it starts, a Typer command) still works from it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

from cairn_cli.core.hooks import agent_settings as cs
from cairn_cli.core.hooks.payload import HookPayload, hook_scope
from tests.test_daemon import (
    HEAVY,
    _env,
    daemon_pids,
    hook_lines,
    hook_payload,
    make_home,
    run,
    start,
    state_is,
    stop_everything,
    wait_for,
)

# what a hook answered by the daemon never imports: site (~15 ms with an editable install), and what site or json
# would have brought in (re, enum, contextlib, collections, functools); typing and pathlib are never on the hot path
NOT_ON_THE_HOT_PATH = ("site", "re", "json", "enum", "contextlib", "collections", "functools", "typing", "pathlib")


@pytest.fixture
def home(tmp_path):
    h = make_home(tmp_path)
    yield h
    stop_everything(h)


def hook(
    home, payload: str, *python_flags: str, event: str = "prompt", **extra
) -> tuple[subprocess.CompletedProcess, set]:
    """The installed hook command, run as the agent runs it (through a shell, from another directory), with
    `-X importtime`: (the process, the modules it imported)."""
    python, *rest = shlex.split(cs.default_command())
    command = shlex.join([python, "-X", "importtime", *python_flags, *rest, "hook", event])
    proc = subprocess.run(
        command,
        shell=True,
        input=payload,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(home, **extra),
        cwd="/",
    )
    modules = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")} - {
        "package"
    }
    return proc, modules


@pytest.mark.slow
def test_a_hook_the_daemon_answers_starts_without_site_json_or_re(home):
    start(home)
    proc, modules = hook(home, hook_payload("how should prices be stored for the checkout?"))
    assert proc.returncode == 0, proc.stderr
    assert "<cairn-memories" in proc.stdout and '<memory id="' in proc.stdout
    assert " ranker=cairn " in hook_lines(home)[-1]
    assert "cairn_cli.entry" in modules and "_socket" in modules  # the measure saw the hot path itself
    assert not modules & {*NOT_ON_THE_HOT_PATH, *HEAVY}, sorted(modules & {*NOT_ON_THE_HOT_PATH, *HEAVY})


@pytest.mark.slow
def test_with_the_daemon_down_the_launcher_reads_site_late_falls_back_and_starts_the_daemon(home):
    assert not daemon_pids(home)
    proc, modules = hook(home, hook_payload("how should prices be stored for the checkout?", session="first"))
    assert proc.returncode == 0, proc.stderr
    assert '<memory id="' in proc.stdout  # the lexical fallback answered
    assert " ranker=cairn-fallback " in hook_lines(home)[-1] and "daemon autostarted" in hook_lines(home)[-1]
    assert "site" in modules  # read when the fallback needed more than the standard library
    # the daemon it started runs with site, as any daemon: the next prompt is its
    wait_for(lambda: state_is(home, "running"), "a running daemon")
    proc, modules = hook(home, hook_payload("how should prices be stored for the checkout?", session="second"))
    assert proc.returncode == 0 and '<memory id="' in proc.stdout
    assert " ranker=cairn " in hook_lines(home)[-1] and "site" not in modules


@pytest.mark.slow
def test_a_stop_and_a_typer_command_run_from_the_launcher_as_from_the_console_script(home):
    stop = json.dumps({"session_id": "s", "hook_event_name": "Stop", "last_assistant_message": "done [cm]{}[/cm]"})
    proc, _ = hook(home, stop, event="stop", CAIRN_DAEMON="off")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    python, *rest = shlex.split(cs.default_command())
    listed = subprocess.run(
        [python, *rest, "memory", "list", "--json"], capture_output=True, text=True, timeout=120, env=_env(home)
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == json.loads(run(home, "memory", "list", "--json").stdout)
    bad = subprocess.run([python, *rest, "memory", "list", "--nope"], capture_output=True, text=True, env=_env(home))
    assert bad.returncode == 2 and "--nope" in bad.stderr  # Typer's usage error, as from `cairn`


@pytest.mark.parametrize(
    "cwd,scope",
    [
        ("/src/webshop", "webshop"),
        ("/src/my project (copy)", "my-project-copy"),
        ("/src/a-éé-b", "a---b"),  # a run of other characters is one "-", beside the "-" that were there
        ("/src/..hidden..", "hidden"),
        ("/src/日本語", "global"),
        ("/", "global"),
        (None, "global"),
    ],
)
def test_the_hooks_scope_is_the_directory_name_in_safe_characters(cwd, scope):
    import re

    payload = HookPayload("UserPromptSubmit", "s", cwd=cwd)
    assert hook_scope(payload, "") == scope
    name = os.path.basename(os.path.normpath(cwd or ""))
    assert hook_scope(payload, "") == (re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:200] or "global")
