"""A real daemon process: rank through it with the real bundled model, the hot path's imports, status, faults.

Fault tests use the hashing encoder so that a restart costs ~2 s; one test runs the real MiniLM daemon.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import EXAMPLES, ROOT

CAIRN = [sys.executable, "-m", "cairn_cli"]
HEAVY = ("torch", "sentence_transformers", "transformers", "rich", "tqdm", "typer", "numpy", "peewee")


def _env(home, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_HOME": str(home),
            "CAIRN_DAEMON": "auto",
            "CAIRN_EMBED_MODEL": "hashing",
            "HF_HUB_CACHE": str(home / "hf-empty"),
            "CAIRN_DAEMON_TIMEOUT_MS": "3000",
            **extra,
        }
    )
    return env


def run(home, *args, input=None, timeout=120, **extra):
    return subprocess.run(
        [*CAIRN, *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(home, **extra),
        cwd=ROOT,
    )


def start(home, **extra):
    out = run(home, "daemon", "start", "--json", **extra)
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    assert info["state"] == "running"
    return info


def status(home, **extra):
    out = run(home, "daemon", "status", "--json", **extra)
    return out.returncode, json.loads(out.stdout)


def rank_json(home, prompt, *args, **extra):
    out = run(home, "rank", prompt, "--json", *args, **extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def deliveries(home):
    out = run(home, "deliveries", "--json")
    return json.loads(out.stdout)


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "dhome"
    assert run(h, "memory", "import", EXAMPLES).returncode == 0
    yield h
    run(h, "daemon", "stop", "--force")


def _entry_in_fresh_interpreter(home, argv, stdin, **extra):
    """(exit code, stdout, heavy modules imported) of the console script's entry run in a new interpreter."""
    code = (
        "import sys, json\nfrom cairn_cli import entry\n"
        f"sys.argv = ['cairn', *{argv!r}]\nrc = 0\n"
        "try:\n    entry.main()\nexcept SystemExit as exc:\n    rc = exc.code\n"
        f"sys.stderr.write(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\nsys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(home, **extra),
        cwd=ROOT,
    )
    return out.returncode, out.stdout, json.loads(out.stderr.strip().splitlines()[-1])


def test_real_model_daemon_ranks_and_the_hot_path_stays_light(tmp_path):
    h = tmp_path / "real"
    extra = {"CAIRN_EMBED_MODEL": "all-MiniLM-L6-v2"}
    assert run(h, "memory", "import", EXAMPLES, **extra).returncode == 0
    try:
        info = start(h, **extra)
        assert info["embed_model"] == "all-MiniLM-L6-v2" and info["reranker"] == "none"
        assert "not in the local Hugging Face cache" in info["warnings"][0]
        assert oct(os.stat(h / "daemon.sock").st_mode & 0o777) == "0o600"
        # a fresh interpreter, exactly what the hook runs
        code = (
            "import sys, json\nfrom cairn_cli.entry import fast_rank\n"
            "rc = fast_rank(['how should prices be stored for the checkout?', '--scope', 'webshop', '--json',"
            " '--session', 'hot'])\n"
            f"sys.stderr.write(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\nsys.exit(rc)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env(h, **extra), cwd=ROOT
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stderr.strip().splitlines()[-1]) == []
        result = json.loads(out.stdout)
        assert result["ranker"] == "cairn" and result["embed_model"] == "all-MiniLM-L6-v2"
        assert result["memories"][0]["id"] == 2
        rows = [d for d in deliveries(h) if d["session_id"] == "hot"]
        assert [r["memory_id"] for r in rows][:1] == [2] and rows[0]["score_components"]["ranker"] == "cairn"
        # embed op, for engagement later
        from cairn_cli.daemon import client

        vec = client.request("embed", {"texts": ["hello"]}, timeout_ms=5000, base=h)
        assert vec["model"] == "all-MiniLM-L6-v2" and len(vec["vectors"][0]) == 384
        # the hooks, exactly as Claude Code runs them: the lean entry, the daemon's models, no torch in the hook
        prompt = json.dumps(
            {
                "session_id": "hook",
                "cwd": "/src/webshop",
                "hook_event_name": "UserPromptSubmit",
                "prompt": "the integration tests fail with connection refused",
            }
        )
        rc, stdout, heavy = _entry_in_fresh_interpreter(h, ["hook", "prompt"], prompt, **extra)
        assert rc == 0 and heavy == [] and '<memory id="1"' in stdout and "<cairn-rules" in stdout
        stop = json.dumps(
            {
                "session_id": "hook",
                "hook_event_name": "Stop",
                "last_assistant_message": "Bring the Postgres database up before you launch the test suite, or nothing can connect."
                '\n[cm]{"m": ["Flaky checkout tests: clear the Redis cache first"], "rg": ["1:3"]}[/cm]',
            }
        )
        rc, stdout, heavy = _entry_in_fresh_interpreter(h, ["hook", "stop"], stop, **extra)
        assert rc == 0 and stdout == "" and not set(heavy) & {"torch", "sentence_transformers", "transformers"}
        row = next(d for d in deliveries(h) if d["session_id"] == "hook" and d["memory_id"] == 1)
        assert row["grade"] == 3 and row["engaged_method"] == "semantic" and row["engaged_score"] >= 0.55
        written = json.loads(run(h, "memory", "show", "19", "--json", **extra).stdout)
        assert written["source_ref"].startswith("gen-1") and written["embedding_model"] == "all-MiniLM-L6-v2"
        # the daemon sees memories added after it started
        assert (
            run(
                h,
                "memory",
                "add",
                "Gift cards are redeemed with `shop giftcard redeem CODE`",
                "--scope",
                "webshop",
                **extra,
            ).returncode
            == 0
        )
        assert rank_json(h, "how do I redeem a gift card?", "--scope", "webshop", **extra)["memories"][0]["id"] == 20
    finally:
        run(h, "daemon", "stop", "--force")
    rc, st = status(h)
    assert (rc, st["state"]) == (3, "stopped") and not (h / "daemon.sock").exists()


def test_status_start_stop_tell_the_truth(home):
    rc, st = status(home)
    assert (rc, st["state"]) == (3, "stopped")
    info = start(home)
    assert start(home)["pid"] == info["pid"], "a second start must not spawn a second daemon"
    rc, st = status(home)
    assert (rc, st["state"], st["pid"]) == (0, "running", info["pid"])
    out = run(home, "daemon", "stop")
    assert out.returncode == 0 and "stopped" in out.stdout
    from cairn_cli.daemon.control import _alive

    assert not _alive(info["pid"])


def test_hung_daemon_times_out_to_the_fallback_and_status_says_hung(home):
    info = start(home)
    os.kill(info["pid"], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        result = rank_json(home, "deploy to production", "--session", "hung", CAIRN_DAEMON_TIMEOUT_MS="300")
        assert time.monotonic() - t0 < 10
        assert result["ranker"] == "cairn-fallback" and result["embed_model"] is None
        assert any("did not answer within 300 ms" in n for n in result["notes"])
        assert result["memories"][0]["id"] == 13
        rc, st = status(home, CAIRN_DAEMON_TIMEOUT_MS="300")
        assert (rc, st["state"]) == (4, "hung")
    finally:
        os.kill(info["pid"], signal.SIGCONT)
    assert status(home)[1]["state"] == "running"  # it woke up and worked off the stale request...
    rows = [d for d in deliveries(home) if d["session_id"] == "hung"]
    # ...without logging it a second time: only the fallback's deliveries of that prompt exist
    assert "abandoned a request" in (home / "logs" / "daemon.log").read_text()
    assert rows and all(r["ranker"] == "cairn-fallback" for r in rows), "the fallback's deliveries are logged"


def test_daemon_killed_mid_request_leaves_a_stale_socket_that_start_recovers(home):
    info = start(home)
    os.kill(info["pid"], signal.SIGSTOP)
    proc = subprocess.Popen(
        [*CAIRN, "rank", "release to production", "--json", "--session", "killed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home),
        cwd=ROOT,
    )
    time.sleep(0.8)  # the request is connected and waiting
    os.kill(info["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["ranker"] == "cairn-fallback" and result["memories"]
    assert any(d["session_id"] == "killed" for d in deliveries(home))
    assert (home / "daemon.sock").exists()
    rc, st = status(home)
    assert (rc, st["state"]) == (3, "stale")
    again = start(home)
    assert again["pid"] != info["pid"]
    assert rank_json(home, "release to production")["ranker"] == "cairn"


def test_a_leftover_socket_file_is_recovered(home):
    path = str(home / "daemon.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # bound, never listened, never unlinked: what a crash leaves
    os.chmod(path, 0o600)
    result = rank_json(home, "deploy to production")
    assert result["ranker"] == "cairn-fallback" and "stale socket" in result["notes"][0]
    assert start(home)["state"] == "running"


def test_two_daemons_started_at_once_make_one(home):
    procs = [
        subprocess.Popen(
            [*CAIRN, "daemon", "serve"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(home),
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    time.sleep(3)
    alive = [p for p in procs if p.poll() is None]
    dead = [p for p in procs if p.poll() is not None]
    try:
        assert len(alive) == 1 and len(dead) == 1
        assert dead[0].returncode == 1 and "already running" in dead[0].stderr.read()
        deadline = time.monotonic() + 60
        while status(home)[1]["state"] != "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert status(home)[1]["pid"] == alive[0].pid
    finally:
        for p in alive:
            p.terminate()
            p.wait(timeout=30)
    assert alive[0].returncode == 0, "SIGTERM is a clean shutdown"
    assert not (home / "daemon.sock").exists() and not (home / "daemon.json").exists()


@pytest.mark.parametrize("tamper", ["world-writable", "other-owner", "not-a-socket"])
def test_a_socket_we_do_not_own_is_never_used(home, tamper):
    path = home / "daemon.sock"
    if tamper == "not-a-socket":
        path.write_text("planted")
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.listen(1)
        os.chmod(path, 0o666 if tamper == "world-writable" else 0o600)
        if tamper == "other-owner":
            if os.getuid() != 0:
                pytest.skip("chown to another user needs root")
            os.chown(path, 65534, 65534)
    result = rank_json(home, "deploy to production", CAIRN_DAEMON_TIMEOUT_MS="2000")
    assert result["ranker"] == "cairn-fallback"
    expected = {
        "world-writable": "open to other users",
        "other-owner": "belongs to uid 65534",
        "not-a-socket": "is not a socket",
    }[tamper]
    assert expected in result["notes"][0]


def test_autostart_answers_now_and_spawns_the_daemon_for_next_time(home):
    result = rank_json(home, "deploy to production", "--autostart")
    assert result["ranker"] == "cairn-fallback" and "autostarted" in result["notes"][0]
    deadline = time.monotonic() + 60
    while status(home)[1]["state"] != "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert rank_json(home, "deploy to production")["ranker"] == "cairn"


def test_the_lean_entry_accepts_exactly_the_typer_options():
    import typer.main

    from cairn_cli.cli import app
    from cairn_cli.entry import _rank_parser

    command = typer.main.get_command(app).commands["rank"]
    typer_opts = {o for p in command.params for o in p.opts if o.startswith("-")}
    lean_opts = {o for a in _rank_parser()._actions for o in a.option_strings}
    assert lean_opts == typer_opts


def test_the_daemon_picks_up_a_newly_deployed_student_without_a_restart(home):
    from cairn_cli.core.learning import training
    from cairn_cli.ml.training import CrossEncoderModel, bundled_base

    pid = start(home)["pid"]
    first = rank_json(home, "how are prices stored?", "--scope", "webshop")
    assert first["reranker_model"] == "none"
    live = home / "training_data" / "reranker-student"
    model = CrossEncoderModel(bundled_base(), max_length=64)
    names = []
    for _ in range(2):  # two deployments, as train-reranker makes them: a new version, then the atomic swap
        version = training.new_version_dir(live)
        model.save(version)
        training.deploy(version, live)
        deadline, result = time.time() + 90, None
        while time.time() < deadline:  # loaded in the background: every answer meanwhile is the daemon's own
            result = rank_json(home, "how are prices stored?", "--scope", "webshop")
            assert result["ranker"] == "cairn", result["notes"]
            if result["reranker_model"] == f"student:{version.resolve()}":
                break
            time.sleep(0.5)
        assert result["reranker_model"] == f"student:{version.resolve()}"
        assert "reranker_score" in result["memories"][0]["components"]
        names.append(result["reranker_model"])
    assert names[0] != names[1]
    assert status(home)[1]["pid"] == pid  # the same daemon process throughout
