"""The autostart storm and its circuit breaker, with real daemon processes and the real hook entry.

Only "no daemon listens" may start one, one spawn per CAIRN_HOME at a time; a daemon that is loading or busy said
so and is left alone; one that did not answer in time and has no heartbeat is skipped for a back-off. Every assertion is on evidence
(hook.log's notes, daemon.log's spawn lines, the processes alive for a home), never on wall-clock time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from tests.test_daemon import (
    CAIRN,
    ROOT,
    Gates,
    _env,
    daemon_log,
    daemon_pids,
    hook_lines,
    hook_payload,
    make_home,
    prompt_processes,
    rank_json,
    run,
    serve,
    start,
    state_is,
    stop_serving,
    wait_for,
)

SPAWNED = "spawn: starting a daemon"
DUPLICATE = "already running"  # what a second daemon says (to daemon.log, its stderr) before it exits


@pytest.fixture
def home(tmp_path):
    h = make_home(tmp_path)
    yield h
    run(h, "daemon", "stop", "--force")
    for pid in daemon_pids(h):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)


def _prompts_at_once(home, n: int, **extra) -> None:
    """`cairn hook prompt` n times concurrently, as n sessions' hooks would."""
    procs = prompt_processes(home, n, **extra)
    for i, proc in enumerate(procs):
        proc.communicate(hook_payload(f"how do I deploy to production? ({i})", session=f"s{i}"), timeout=120)
        assert proc.returncode == 0


@pytest.mark.slow
def test_a_stopped_daemon_costs_one_prompt_its_timeout_then_the_back_off_answers(home):
    pid = start(home)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        for i in range(10):
            out = run(
                home,
                "hook",
                "prompt",
                input=hook_payload(f"how do I deploy to production? ({i})"),
                CAIRN_DAEMON_TIMEOUT_MS="1000",
                CAIRN_DAEMON_BACKOFF_S="3600",  # the test never depends on how fast the machine is
            )
            assert out.returncode == 0 and "<memory" in out.stdout, out.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    lines = hook_lines(home)
    assert len(lines) == 10 and all("ranker=cairn-fallback" in line for line in lines)
    assert "did not answer within 1000 ms" in lines[0] and "back-off" in lines[0], lines[0]
    for line in lines[1:]:
        assert "daemon skipped for" in line and "back-off after: daemon did not answer within 1000 ms" in line, line
    log = daemon_log(home)
    assert log.count(SPAWNED) + log.count(DUPLICATE) <= 1, log
    wait_for(lambda: state_is(home, "running"), "running daemon after SIGCONT")
    assert daemon_pids(home) == [pid]
    # the back-off over, the daemon answers again, and an answer ends the back-off
    assert rank_json(home, "deploy to production", CAIRN_DAEMON_BACKOFF_S="0")["ranker"] == "cairn"
    assert not (home / "daemon.backoff").exists()
    assert rank_json(home, "deploy to production")["ranker"] == "cairn"


@pytest.mark.slow
def test_concurrent_prompts_against_a_loading_daemon_start_no_other(home, tmp_path):
    gates = Gates(tmp_path)
    gates.close("load")
    proc = serve(home, **gates.env)
    try:
        # "loading" also covers the moment between taking daemon.lock and binding the socket; wait for the
        # daemon itself to answer that it is loading, which is what the hooks must then hear
        wait_for(lambda: (st := state_is(home, "loading")) and st["detail"] == "loading models", "a loading daemon")
        _prompts_at_once(home, 8)
        lines = hook_lines(home)
        assert len(lines) == 8
        for line in lines:
            assert "daemon alive but daemon is still loading its models" in line, line
            assert "autostart" not in line and "no daemon started" not in line, line
        log = daemon_log(home)
        assert SPAWNED not in log and DUPLICATE not in log, log
        assert daemon_pids(home) == [proc.pid]
        gates.open("load")
        wait_for(lambda: state_is(home, "running"), "running daemon")
        assert rank_json(home, "deploy to production")["ranker"] == "cairn"
        assert daemon_pids(home) == [proc.pid]
    finally:
        gates.open("load")
        stop_serving(proc)


@pytest.mark.slow
def test_concurrent_prompts_with_no_daemon_start_exactly_one(home):
    _prompts_at_once(home, 8)
    lines = hook_lines(home)
    assert len(lines) == 8  # the later ones may find the new daemon loading, or even answering
    assert sum("daemon autostarted for next time" in line for line in lines) == 1, lines
    wait_for(lambda: state_is(home, "running"), "the autostarted daemon running")
    wait_for(lambda: len(daemon_pids(home)) == 1, "one daemon process for the home")
    log = daemon_log(home)
    assert log.count(SPAWNED) == 1 and DUPLICATE not in log, log


@pytest.mark.slow
def test_a_request_held_in_the_daemon_does_not_hold_back_the_next(home, tmp_path):
    """Requests run concurrently: one held inside the daemon does not make the next one wait, let alone answer
    "busy" (the daemon used to serve one request at a time); nothing is started, nothing backs off."""
    gates = Gates(tmp_path)
    pid = start(home, **gates.env)["pid"]
    gates.close("rank.first")
    first = subprocess.Popen(
        [*CAIRN, "rank", "deploy to production", "--json", "--session", "first"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home),
        cwd=ROOT,
    )
    try:
        wait_for(gates.inside, "the first rank request inside the daemon")
        second = rank_json(home, "deploy to production", "--autostart", "--session", "second")
        assert second["ranker"] == "cairn" and second["memories"], second["notes"]
        assert first.poll() is None, "the first is still held inside"
        assert not (home / "daemon.backoff").exists()
    finally:
        gates.open("rank.first")
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert '"ranker": "cairn"' in out
    log = daemon_log(home)
    assert log.count(SPAWNED) == 1 and DUPLICATE not in log, log  # the one of `daemon start`
    assert daemon_pids(home) == [pid]


@pytest.mark.slow
def test_the_listen_queue_takes_the_hooks_of_many_sessions(home):
    pid = start(home)["pid"]
    os.kill(pid, signal.SIGSTOP)  # nothing is accepted: every connection waits in the listen queue
    conns = []
    try:
        for _ in range(40):
            s = socket.socket(socket.AF_UNIX)
            conns.append(s)
            s.setblocking(False)
            s.connect(str(home / "daemon.sock"))  # BlockingIOError once the queue is full
    finally:
        for s in conns:
            s.close()
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: state_is(home, "running"), "running daemon after SIGCONT")
