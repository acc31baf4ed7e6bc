"""A daemon ends by itself when nobody can reach it any more (its home or socket deleted or replaced) or, when asked
to, after a quiet spell. Each test waits for the process to exit (an upper bound, never a fixed sleep)."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from tests.test_daemon import (
    daemon_log,
    daemon_pids,
    make_home,
    rank_json,
    run,
    serve,
    state_is,
    stop_serving,
    wait_for,
)

EXIT_WAIT_S = 60


@pytest.mark.slow
def test_a_daemon_whose_home_is_deleted_exits(tmp_path):
    home = make_home(tmp_path)
    proc = serve(home, CAIRN_DAEMON_WATCH_S="0.5")
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")
        shutil.rmtree(home)
        assert proc.wait(timeout=EXIT_WAIT_S) == 0, proc.stderr.read()
        assert not home.exists(), "the orphan must not recreate its home"
    finally:
        stop_serving(proc)


@pytest.mark.slow
def test_a_daemon_whose_socket_is_deleted_exits(tmp_path):
    home = make_home(tmp_path)
    proc = serve(home, CAIRN_DAEMON_WATCH_S="0.5")
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")
        (home / "daemon.sock").unlink()
        assert proc.wait(timeout=EXIT_WAIT_S) == 0, proc.stderr.read()
        assert "exiting: its socket" in daemon_log(home) and "is gone" in daemon_log(home)
        assert not (home / "daemon.json").exists()
    finally:
        stop_serving(proc)


@pytest.mark.slow
def test_an_orphan_leaves_its_successor_alone(tmp_path):
    """rm -rf the home, a new daemon in the new home: the old one exits without touching the new one's files."""
    home = make_home(tmp_path)
    old = serve(home, CAIRN_DAEMON_WATCH_S="0.5")
    new = None
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")
        os.kill(old.pid, signal.SIGSTOP)  # it cannot notice anything until the successor runs
        shutil.rmtree(home)
        make_home(tmp_path)
        new = serve(home)
        successor = wait_for(lambda: state_is(home, "running"), "the successor running")
        assert successor["pid"] == new.pid
        os.kill(old.pid, signal.SIGCONT)
        assert old.wait(timeout=EXIT_WAIT_S) == 0, old.stderr.read()
        assert state_is(home, "running")["pid"] == new.pid
        assert rank_json(home, "deploy to production")["ranker"] == "cairn"
        assert daemon_pids(home) == [new.pid]
    finally:
        os.kill(old.pid, signal.SIGCONT) if old.poll() is None else None
        stop_serving(old)
        if new is not None:
            stop_serving(new)


@pytest.mark.slow
def test_a_request_to_a_daemon_whose_lock_file_is_gone_makes_it_exit(tmp_path):
    """Checked on every request too, not only on the timer (set here to far beyond the test)."""
    home = make_home(tmp_path)
    proc = serve(home, CAIRN_DAEMON_WATCH_S="3600")
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")
        (home / "daemon.lock").unlink()  # another daemon could now take a new lock: this one is not the home's
        result = rank_json(home, "deploy to production")
        assert result["ranker"] == "cairn-fallback"
        assert "daemon is exiting: its lock file" in result["notes"][0], result["notes"]
        assert proc.wait(timeout=EXIT_WAIT_S) == 0, proc.stderr.read()
    finally:
        stop_serving(proc)


@pytest.mark.slow
def test_an_idle_daemon_exits_when_asked_to(tmp_path):
    home = make_home(tmp_path)
    proc = serve(home, CAIRN_DAEMON_IDLE_EXIT_S="2", CAIRN_DAEMON_WATCH_S="3600")
    try:
        wait_for(lambda: state_is(home, "running"), "running daemon")  # health is not work: it keeps no one alive
        assert proc.wait(timeout=EXIT_WAIT_S) == 0, proc.stderr.read()
        assert "exiting: idle for 2 s" in daemon_log(home)
        assert not (home / "daemon.sock").exists() and not (home / "daemon.json").exists()
        rc = run(home, "daemon", "status").returncode
        assert rc == 3, "stopped"
    finally:
        stop_serving(proc)
