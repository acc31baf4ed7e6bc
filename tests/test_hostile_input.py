"""Hostile and odd input (issue 12): nothing a hook is handed may hang it, kill it, or lose the turn silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cairn_cli import hook_entry
from cairn_cli.core.transcript import NotARegularFile, read_transcript
from tests.conftest import EXAMPLES, ROOT


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def _prompt_raw(transcript_path: str, session: str = "h1", **extra) -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "cwd": "/src/webshop",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "integration tests fail with connection refused",
            "transcript_path": transcript_path,
            **extra,
        }
    ).encode()


def _log(home) -> str:
    path = home / "logs" / "hook.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_transcript_that_is_no_regular_file_is_refused_not_read(tmp_path, kind):
    path = {"fifo": tmp_path / "f", "dev-zero": "/dev/zero", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises((NotARegularFile, IsADirectoryError)):
        read_transcript(path, max_bytes=1000)


def test_a_huge_sparse_transcript_is_read_from_its_end_within_the_cap(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(8 * 2**30)  # 8 GiB of holes, then one real line
        fh.seek(0, os.SEEK_END)
        fh.write(b'\n{"type":"user","uuid":"u","message":{"role":"user","content":"the last prompt"}}\n')
    transcript = read_transcript(path, max_bytes=100_000)
    assert [m.text for m in transcript.typed_prompts()] == ["the last prompt"]


@pytest.mark.slow
def test_the_prompt_hook_with_a_fifo_transcript_answers_promptly_and_still_injects(tmp_path):
    """The repro: a FIFO as transcript_path blocked the hook (and the daemon) forever."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update({"CAIRN_HOME": str(home), "CAIRN_DAEMON": "off", "CAIRN_EMBED_MODEL": "hashing"})
    run = [sys.executable, "-m", "cairn_cli"]
    assert (
        subprocess.run([*run, "memory", "import", str(EXAMPLES)], env=env, cwd=ROOT, capture_output=True).returncode
        == 0
    )
    fifo = tmp_path / "transcript.fifo"
    os.mkfifo(fifo)
    out = subprocess.run(
        [*run, "hook", "prompt"], input=_prompt_raw(str(fifo)), env=env, cwd=ROOT, capture_output=True, timeout=120
    )  # the timeout is only a safety net: it hung forever
    assert out.returncode == 0 and b'<memory id="1"' in out.stdout
    assert "transcript ignored" in _log(home) and "not a regular file" in _log(home)


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_the_stop_hook_with_a_device_or_fifo_transcript_skips_and_says_why(store, capsys, cairn_home, tmp_path, target):
    if target == "fifo":
        target = str(tmp_path / "t.fifo")
        os.mkfifo(target)
    assert hook_entry.run_prompt(_prompt_raw("/nonexistent.jsonl")) == 0
    capsys.readouterr()
    raw = json.dumps({"session_id": "h1", "hook_event_name": "Stop", "transcript_path": target}).encode()
    assert hook_entry.run_stop(raw) == 0
    assert "no response text" in _log(cairn_home) and "not a regular file" in _log(cairn_home)
