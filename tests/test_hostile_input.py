"""Hostile and odd input (issue 12): nothing a hook is handed may hang it, kill it, or lose the turn silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries
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


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0, reason="making a store another account's needs root (setpriv to nobody)")
def test_a_read_only_store_still_ranks_and_injects_and_logs_what_it_could_not_write(request):
    """The store belongs to root (0644, in a root-owned 0755 folder) and the hook runs as `nobody`: SQLite really
    refuses every write. Before: no memories at all ("attempt to write a readonly database" at open)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="cairn-ro-"))  # pytest's own tmp folders are closed to other accounts
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    store_dir, home = base / "store", base / "home"
    store_dir.mkdir()
    home.mkdir()
    os.chown(home, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_HOME": str(home),
            "CAIRN_DAEMON": "off",
            "CAIRN_EMBED_MODEL": "hashing",
            "CAIRN_DB_URL": f"sqlite:///{store_dir / 'memory.db'}",
            "CAIRN_EPHEMERAL_DB_URL": f"sqlite:///{store_dir / 'ephemeral.db'}",
        }
    )
    run = [sys.executable, "-m", "cairn_cli"]
    assert (
        subprocess.run([*run, "memory", "import", str(EXAMPLES)], env=env, cwd=ROOT, capture_output=True).returncode
        == 0
    )
    assert subprocess.run([*run, "rank", "x", "--no-log"], env=env, cwd=ROOT, capture_output=True).returncode == 0
    for f in store_dir.iterdir():
        f.chmod(0o644)
    before = {f.name: f.read_bytes() for f in store_dir.iterdir()}
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    out = subprocess.run(
        [*as_nobody, *run, "hook", "prompt"],
        input=_prompt_raw("/nonexistent"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.count(b"<memory id=") == 5
    log = (home / "logs" / "hook.log").read_text()
    assert "delivered=5" in log and "not logged (deliveries, hook state)" in log and "readonly" in log
    assert {f.name: f.read_bytes() for f in store_dir.iterdir()} == before  # nothing half-written


def test_a_huge_session_id_keeps_its_turn_and_stop_finds_it(store, capsys, cairn_home):
    session = "s" * 10_000
    assert hook_entry.run_prompt(_prompt_raw("/nonexistent", session=session)) == 0
    assert capsys.readouterr().out.count("<memory id=") == 5
    rows = deliveries.list_deliveries(Settings())
    assert len(rows) == 5 and len(rows[0].session_id) == 200 and rows[0].session_id.startswith("s" * 100)
    shown = rows[0].memory_id
    stop = json.dumps(
        {
            "session_id": session,
            "hook_event_name": "Stop",
            "last_assistant_message": f'ok [cm]{{"rg": ["{shown}:3"]}}[/cm]',
        }
    ).encode()
    assert hook_entry.run_stop(stop) == 0
    assert {r.memory_id: r.grade for r in deliveries.list_deliveries(Settings())}[shown] == 3


def test_a_lone_surrogate_in_the_prompt_still_ranks(store, capsys, cairn_home):
    raw = b'{"session_id": "u1", "cwd": "/src/webshop", "prompt": "\\ud800 integration tests fail with connection refused"}'
    assert hook_entry.run_prompt(raw) == 0
    assert capsys.readouterr().out.count("<memory id=") == 5
    assert "delivered=5" in _log(cairn_home)


def test_memory_import_accepts_a_utf8_bom(cli, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"content": "Saved by a Windows editor"}\n{"content": "second line"}\n')
    result = cli("memory", "import", path)
    assert result.exit_code == 0, result.output
    assert "added 2" in result.output


@pytest.mark.parametrize(
    "argv", [["rank", "x", "--turn", str(10**30)], ["grade", "--session", "s", "--turn", "-1", "[cm]{}[/cm]"]]
)
def test_out_of_range_turns_are_a_one_line_usage_error_and_write_nothing(argv, cairn_home, capsys, monkeypatch):
    from cairn_cli import entry

    monkeypatch.setattr(sys, "argv", ["cairn", *argv])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and "--turn" in err
    assert deliveries.list_deliveries(Settings()) == []
    from cairn_cli.db.tables import HookState

    assert HookState.select().count() == 0


READ_ONLY = [
    ["memory", "list"],
    ["memory", "show", "1"],
    ["deliveries"],
    ["stats", "deliveries"],
    ["stats", "labels"],
    ["stats", "floors"],
    ["ab", "status"],
    ["ab", "queue", "list"],
    ["calibrate-floor", "--model", "m"],
    ["train-reranker", "--dry-run"],
    ["train-reranker", "--export"],
]


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: " ".join(a))
def test_a_command_that_only_reads_never_creates_a_store(cli, tmp_path, argv):
    missing = tmp_path / "nonexistent" / "dir"
    result = cli(
        "--db-url", f"sqlite:///{missing / 'x.db'}", "--ephemeral-db-url", f"sqlite:///{missing / 'y.db'}", *argv
    )
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no memory store at" in lines[0] and "cairn db init" in lines[0]
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_is_one_line_and_exit_1_with_a_traceback_only_under_debug(
    store, cairn_home, capsys, monkeypatch, debug
):
    from cairn_cli import entry
    from cairn_cli.core.hooks import prompt as prompt_module
    from cairn_cli.core.store import memories as memories_module

    if debug:
        (cairn_home / "config.toml").write_text("DEBUG = true\n")  # the config, not only the environment

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(prompt_module, "prompt_turn", boom)
    monkeypatch.setattr(memories_module, "list_memories", boom)
    for argv in (["rank", "deploy"], ["memory", "list"]):
        monkeypatch.setattr(sys, "argv", ["cairn", *argv])
        with pytest.raises(SystemExit) as exit_:
            entry.main()
        err = capsys.readouterr().err
        assert exit_.value.code == 1, argv
        assert (
            err.strip().splitlines()[-1] == "error: unexpected RuntimeError: kaboom (set CAIRN_DEBUG=1 for a traceback)"
        )
        assert ("Traceback" in err) == debug, argv
