"""hook.log and daemon.log: whole lines or nothing (a full disk never leaves half a line to glue the next one to),
concurrent writers never interleave, and both rotate past CAIRN_LOG_MAX_BYTES keeping CAIRN_LOG_KEEP generations."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cairn_cli import files, hook_entry
from tests.conftest import ROOT


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _generations(path) -> list:
    """path's old generations, oldest first, then path itself."""
    old = sorted(path.parent.glob(path.name + ".[0-9]*"), key=lambda p: -int(p.suffix[1:]))
    return [*old, path]


def test_a_short_write_leaves_nothing_and_the_next_line_is_not_glued(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "hook.log"
    files.append_line(log, "first line")
    real_write = os.write

    def short_write(fd, data):  # a full disk: only part of the line fits
        return real_write(fd, data[:7])

    monkeypatch.setattr(os, "write", short_write)
    with pytest.raises(OSError, match="cut off"):
        files.append_line(log, "a line that does not fit")
    monkeypatch.setattr(os, "write", real_write)
    assert log.read_bytes() == b"first line\n"
    files.append_line(log, "after the disk was freed")
    assert _lines(log) == ["first line", "after the disk was freed"]
    assert oct(log.stat().st_mode & 0o777) == oct(files.PRIVATE_FILE)


@pytest.mark.slow
def test_a_file_size_limit_keeps_hook_log_to_whole_lines(tmp_path):
    """A real short write: the hook's log under RLIMIT_FSIZE (what a full disk does to a write), in a process of
    its own. Every line in the file is whole; the hook goes on."""
    home = tmp_path / "home"
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (5000, 5000))\n"
        "from cairn_cli import hook_entry\n"
        "for i in range(60):\n"
        "    hook_entry.log(f'line {i:03d} ' + 'x' * 200 + ' end')\n"
        "hook_entry.log('short')\n"
        "print('alive')\n"
    )
    env = {**os.environ, "CAIRN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "alive", out.stderr
    raw = (home / "logs" / "hook.log").read_bytes()
    assert len(raw) <= 5000 and raw.endswith(b"\n")
    lines = raw.decode().splitlines()
    whole = [line for line in lines if line.endswith(" end")]
    assert len(whole) == 21 and lines[:21] == whole  # 21 lines of 234 bytes fit in 5000, not 22
    assert [int(line.split()[2]) for line in whole] == list(range(21))
    assert lines[21:] == [lines[21]] and lines[21].endswith(" short")  # the short line fitted, on a line of its own


def test_rotation_keeps_every_line_once_in_order_and_n_generations(tmp_path):
    log = tmp_path / "hook.log"
    for i in range(40):
        files.append_line(log, f"line {i:03d} " + "y" * 90, max_bytes=1000, keep=3)
    gens = _generations(log)
    assert [p.name for p in gens] == ["hook.log.3", "hook.log.2", "hook.log.1", "hook.log"]
    seen = [line for p in gens for line in _lines(p)]
    numbers = [int(line.split()[1]) for line in seen]
    assert numbers == list(range(numbers[0], 40))  # the newest lines, each once, in order; the oldest dropped
    assert all(p.stat().st_size <= 1000 + 100 for p in gens)
    assert all(oct(p.stat().st_mode & 0o777) == oct(files.PRIVATE_FILE) for p in gens)
    # a smaller CAIRN_LOG_KEEP later: the generations past it go at the next rotation
    for i in range(12):
        files.append_line(log, f"more {i:03d} " + "y" * 90, max_bytes=1000, keep=1)
    assert [p.name for p in _generations(log)] == ["hook.log.1", "hook.log"]


def test_copy_truncate_keeps_a_held_descriptor_writing_into_the_current_file(tmp_path):
    """daemon.log: the daemon's stderr is a descriptor on it (dispatch.spawn); after a rotation it must still land
    in daemon.log, not in daemon.log.1 (or, once that is deleted, nowhere anyone can see)."""
    log = tmp_path / "daemon.log"
    files.append_line(log, "started")
    stderr = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(stderr, b"a warning on stderr\n")
        files.append_line(log, "z" * 200, max_bytes=100, keep=2, copy_truncate=True)
        assert _lines(tmp_path / "daemon.log.1") == ["started", "a warning on stderr", "z" * 200]
        assert log.read_bytes() == b""
        os.write(stderr, b"a traceback after the rotation\n")
        files.append_line(log, "logged after")
    finally:
        os.close(stderr)
    assert _lines(log) == ["a traceback after the rotation", "logged after"]


def test_hook_log_rotates_at_the_setting(cairn_home, monkeypatch):
    monkeypatch.setenv("CAIRN_LOG_MAX_BYTES", "2000")
    monkeypatch.setenv("CAIRN_LOG_KEEP", "2")
    for i in range(100):
        hook_entry.log(f"prompt session=s{i} " + "w" * 80)
    logs = cairn_home / "logs"
    assert sorted(p.name for p in logs.glob("hook.log*")) == ["hook.log", "hook.log.1", "hook.log.2", "hook.log.lock"]
    assert all((logs / n).stat().st_size <= 2000 + 200 for n in ("hook.log", "hook.log.1", "hook.log.2"))
    monkeypatch.setenv("CAIRN_LOG_MAX_BYTES", "0")  # never rotated
    before = (logs / "hook.log").stat().st_size
    for _ in range(30):
        hook_entry.log("x" * 100)
    assert (logs / "hook.log").stat().st_size > before + 2000


WRITER = """
import sys
from cairn_cli import files
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    size = 3000 + (i * 7919) % 6000  # longer than PIPE_BUF and than a stdio buffer: one os.write each
    files.append_line(path, f"{name} {i:04d} " + name[0] * size + " end", max_bytes=60000, keep=500)
"""


@pytest.mark.slow
def test_concurrent_writers_never_interleave_and_rotation_loses_nothing(tmp_path):
    log = tmp_path / "hook.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(log), name, "150"], env=env)
        for name in ("alpha", "bravo", "charlie", "delta")
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    gens = _generations(log)
    # it rotated several times while four processes wrote (how many depends on the scheduling: a rotation finding
    # another's lock held is skipped, and the next write past the cap tries again; 10 were seen on a loaded machine)
    assert len(gens) > 3
    seen: dict[str, list[int]] = {}
    for p in gens:
        for line in _lines(p):
            name, number, body, end = line.split(" ")
            assert end == "end" and set(body) == {name[0]}, line[:80]  # whole, and nobody else's bytes in it
            seen.setdefault(name, []).append(int(number))
    assert {name: sorted(v) for name, v in seen.items()} == {
        name: list(range(150)) for name in ("alpha", "bravo", "charlie", "delta")
    }
    for numbers in seen.values():
        assert numbers == sorted(numbers)  # each writer's lines in its order across the generations


@pytest.mark.slow
def test_a_daemon_rotates_its_log_and_applies_retention_once(tmp_path):
    """A real daemon, its watch loop quick: daemon.log stays near its cap with its generations beside it, and the
    delivery log's retention runs once (recorded in retention.json), not at every watch."""
    import json

    from tests.test_daemon import make_home, serve, state_is, stop_serving, wait_for

    home = make_home(tmp_path)
    proc = serve(home, CAIRN_DAEMON_WATCH_S="0.2", CAIRN_LOG_MAX_BYTES="400", CAIRN_LOG_KEEP="2")
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")
        record = home / "retention.json"
        wait_for(record.exists, "the daemon's retention run")
        first = json.loads(record.read_text())
        assert first["by"] == f"daemon {proc.pid}" and first["report"]["days"] == 30.0
        logs = home / "logs"
        wait_for(lambda: (logs / "daemon.log.1").exists(), "daemon.log rotated")
        wait_for(lambda: "retention: " in "".join(p.read_text() for p in _generations(logs / "daemon.log")), "logged")
        assert not (logs / "daemon.log.3").exists()
        assert all(p.stat().st_size <= 400 + 1500 for p in _generations(logs / "daemon.log"))  # the cap + a line
        stamp = record.stat().st_mtime_ns
        assert state_is(home, "running")  # many watches later: still one run a day
        assert record.stat().st_mtime_ns == stamp
    finally:
        stop_serving(proc)


def test_an_exclusive_lock_is_held_against_another_process_and_released_after_the_block(tmp_path):
    path = tmp_path / "locks" / "job.lock"
    probe = "import sys\nfrom cairn_cli import files\nwith files.exclusive_lock(sys.argv[1]) as held:\n    print(held)"

    def other() -> str:
        out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip()

    with files.exclusive_lock(path) as held:
        assert (
            held and oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
        )
        assert other() == "False"
        with files.exclusive_lock(path) as again:  # a second descriptor in this process: flock says no too
            assert again is False
    assert other() == "True"
    with pytest.raises(RuntimeError), files.exclusive_lock(path) as held:
        assert held
        raise RuntimeError("the block failed")
    assert other() == "True"  # released on the way out of a failed block
    with pytest.raises(FileNotFoundError), files.exclusive_lock(tmp_path / "nowhere" / "x.lock", make_dirs=False):
        pass
