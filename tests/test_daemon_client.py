"""The client's side of the circuit breaker, in this process against fake daemons (no model, no daemon process):
why the daemon did not answer, the back-off after a timeout, and one spawn per CAIRN_HOME."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.daemon import client, dispatch, singleton


class FakeDaemon:
    """A Unix socket at CAIRN_HOME/daemon.sock that counts connections and answers `reply` (None: never)."""

    def __init__(self, home, reply: dict | None):
        home.mkdir(parents=True, exist_ok=True)
        self.path = client.socket_path(home)
        self.reply = reply
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)  # held open: a daemon that never answers
            if self.reply is not None:
                conn.makefile("rb").readline()
                conn.sendall(json.dumps(self.reply).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def auto(monkeypatch, cairn_home):
    monkeypatch.setenv("CAIRN_DAEMON", "auto")
    spawned: list[str] = []
    monkeypatch.setattr(dispatch, "spawn", lambda home, why: spawned.append(why))
    yield spawned
    singleton.release(cairn_home)


def _rank(**kw) -> dict:
    return dispatch.rank(PromptRequest("deploy to production", "t", log=False), {}, **kw)


@pytest.mark.parametrize(
    "reply, error, text",
    [
        (None, client.NoAnswer, "did not answer within 300 ms"),
        ({"ok": False, "kind": "loading", "error": "daemon is still loading its models"}, client.Loading, "loading"),
        ({"ok": False, "kind": "busy", "error": "busy: another request held it"}, client.Busy, "busy"),
        ({"ok": False, "kind": "internal", "error": "boom"}, client.Unavailable, "daemon failed: boom"),
    ],
)
def test_an_alive_daemon_that_does_not_answer_is_told_from_no_daemon(cairn_home, reply, error, text):
    fake = FakeDaemon(cairn_home, reply)
    try:
        with pytest.raises(client.Unavailable) as got:
            client.request("rank", {}, timeout_ms=300)
    finally:
        fake.close()
    assert type(got.value) is error and text in str(got.value)
    assert not isinstance(got.value, client.NotRunning)


def test_no_daemon_and_a_stale_socket_are_not_running(cairn_home):
    with pytest.raises(client.NotRunning, match="no socket"):
        client.request("health", timeout_ms=300)
    cairn_home.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(client.socket_path(cairn_home))  # bound, never listening: what a crash leaves
    os.chmod(client.socket_path(cairn_home), 0o600)
    try:
        with pytest.raises(client.NotRunning, match="stale socket"):
            client.request("health", timeout_ms=300)
    finally:
        stale.close()


def test_a_timeout_starts_a_back_off_and_the_next_prompts_skip_the_daemon(cairn_home, auto, monkeypatch):
    monkeypatch.setenv("CAIRN_DAEMON_TIMEOUT_MS", "300")
    fake = FakeDaemon(cairn_home, None)
    try:
        first = _rank(autostart=True)
        assert first["ranker"] == "cairn-fallback"
        assert "did not answer within 300 ms; skipping the daemon for 10 s (back-off)" in first["notes"][0]
        for _ in range(3):
            later = _rank(autostart=True)
            assert "daemon skipped for" in later["notes"][0]
            assert "back-off after: daemon did not answer within 300 ms" in later["notes"][0]
        assert fake.accepted == 1, "a prompt in the back-off never connects"
        assert auto == [], "an alive daemon is never a reason to start another"
        monkeypatch.setenv("CAIRN_DAEMON_BACKOFF_S", "0")
        _rank()
        assert fake.accepted == 2
    finally:
        fake.close()


def test_an_answer_ends_the_back_off(cairn_home, auto, monkeypatch):
    client.start_backoff("daemon did not answer within 300 ms", base=cairn_home)
    assert client.backoff_reason(10.0, base=cairn_home)
    assert client.backoff_reason(0.0, base=cairn_home) is None
    monkeypatch.setenv("CAIRN_DAEMON_BACKOFF_S", "0")
    fake = FakeDaemon(cairn_home, {"ok": True, "result": {"ranker": "cairn"}})
    try:
        assert _rank() == {"ranker": "cairn"}
    finally:
        fake.close()
    assert not os.path.exists(client.backoff_path(cairn_home))


@pytest.mark.parametrize(
    "reply", [{"ok": False, "kind": "loading", "error": "loading"}, {"ok": False, "kind": "busy", "error": "busy"}]
)
def test_a_loading_or_busy_daemon_is_left_alone(cairn_home, auto, reply):
    fake = FakeDaemon(cairn_home, reply)
    try:
        for _ in range(3):
            note = _rank(autostart=True)["notes"][0]
            assert "daemon alive but" in note and "back-off" not in note and "autostart" not in note
    finally:
        fake.close()
    assert auto == [] and not os.path.exists(client.backoff_path(cairn_home))


def test_one_spawn_per_home_while_it_comes_up(cairn_home, auto):
    notes = [_rank(autostart=True)["notes"][0] for _ in range(5)]
    assert len(auto) == 1
    assert "daemon autostarted for next time" in notes[0]
    assert all("no daemon started: a daemon was started 0 s ago and is coming up" in n for n in notes[1:])


def test_no_spawn_while_a_daemon_holds_the_lock(cairn_home, auto):
    assert singleton.hold(cairn_home)  # a daemon that has no socket yet (starting) or any more (orphaned)
    assert singleton.held(cairn_home)
    note = _rank(autostart=True)["notes"][0]
    assert "no daemon started: a daemon holds daemon.lock" in note and auto == []
    singleton.release(cairn_home)
    assert not singleton.held(cairn_home)
    assert "daemon autostarted" in _rank(autostart=True)["notes"][0] and len(auto) == 1


def test_the_daemon_taking_the_lock_ends_the_spawn_in_flight(cairn_home, auto):
    assert singleton.claim_spawn(cairn_home) is None
    assert "coming up" in singleton.claim_spawn(cairn_home)
    assert singleton.hold(cairn_home)  # the spawned daemon arrived
    assert "holds daemon.lock" in singleton.claim_spawn(cairn_home)
    singleton.release(cairn_home)  # and died
    assert singleton.claim_spawn(cairn_home) is None


def test_when_the_back_off_runs_out_one_caller_asks_and_the_others_keep_skipping(cairn_home):
    client.start_backoff("daemon did not answer within 300 ms", base=cairn_home)
    long_ago = os.stat(client.backoff_path(cairn_home)).st_mtime - 60
    os.utime(client.backoff_path(cairn_home), (long_ago, long_ago))
    assert client.backoff_reason(10.0, base=cairn_home) is None, "this caller asks the daemon again"
    assert "daemon skipped for 10 s more" in client.backoff_reason(10.0, base=cairn_home), "while it asks"


def test_a_daemon_gone_ends_the_back_off_and_may_be_started_again(cairn_home, auto, monkeypatch):
    monkeypatch.setenv("CAIRN_DAEMON_BACKOFF_S", "5")
    client.start_backoff("daemon did not answer within 300 ms", base=cairn_home)
    long_ago = os.stat(client.backoff_path(cairn_home)).st_mtime - 60
    os.utime(client.backoff_path(cairn_home), (long_ago, long_ago))
    note = _rank(autostart=True)["notes"][0]
    assert "no socket" in note and "daemon autostarted" in note and len(auto) == 1
    assert not os.path.exists(client.backoff_path(cairn_home))


def test_the_stop_hooks_embedding_respects_the_back_off(cairn_home, monkeypatch):
    monkeypatch.setenv("CAIRN_DAEMON", "auto")
    monkeypatch.setenv("CAIRN_DAEMON_TIMEOUT_MS", "300")
    fake = FakeDaemon(cairn_home, None)
    try:
        assert dispatch.embed_with_model(["hello"], timeout_ms=300) is None
        assert dispatch.embed_with_model(["hello"]) is None
        assert fake.accepted == 1, "the second embedding skipped the hung daemon"
    finally:
        fake.close()


def test_a_slow_daemon_with_a_live_heartbeat_costs_this_prompt_alone(cairn_home, auto, monkeypatch):
    """No answer in time, but daemon.json's mtime keeps moving (the daemon's heartbeat): slow under load, not hung.
    This prompt falls back; there is no back-off, and the next prompt asks the daemon again."""
    monkeypatch.setenv("CAIRN_DAEMON_TIMEOUT_MS", "300")
    fake = FakeDaemon(cairn_home, None)
    status = client.status_path(cairn_home)
    with open(status, "w") as fh:
        fh.write("{}")
    stop = threading.Event()

    def beat():
        while not stop.wait(0.02):
            os.utime(status)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        first = _rank(autostart=True)
        note = first["notes"][0]
        assert first["ranker"] == "cairn-fallback"
        assert "did not answer within 300 ms (alive, heartbeat" in note and "back-off" not in note, note
        assert not os.path.exists(client.backoff_path(cairn_home))
        again = _rank(autostart=True)
        assert "alive, heartbeat" in again["notes"][0] and fake.accepted == 2, "the next prompt asks again"
    finally:
        stop.set()
        beating.join()
        fake.close()
    assert auto == [], "an alive daemon is never a reason to start another"


def test_a_heartbeat_that_stopped_is_a_hung_daemon(cairn_home):
    fake = FakeDaemon(cairn_home, None)
    status = client.status_path(cairn_home)
    with open(status, "w") as fh:
        fh.write("{}")
    long_ago = os.stat(status).st_mtime - 60
    os.utime(status, (long_ago, long_ago))
    try:
        with pytest.raises(client.NoAnswer):
            client.request("rank", {}, timeout_ms=300)
    finally:
        fake.close()
