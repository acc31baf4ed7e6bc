"""A real daemon process: rank through it with the real bundled model, the hot path's imports, status, faults.

Fault tests use the hashing encoder so that a restart costs ~2 s; one test runs the real MiniLM daemon.
Tests wait for evidence (a status, a log line, a process gone), never for a fixed time: behaviour tests give the
client a generous timeout (a loaded machine is slow, not broken); only tests of the timeout itself shorten it.
The helpers here (wait_for, gates, daemon_pids) serve tests/test_daemon_*.py too.
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
# what the hot path never imports (`socket` too: the client speaks through `_socket`, daemon/client.py)
HEAVY = ("torch", "sentence_transformers", "transformers", "rich", "tqdm", "typer", "numpy", "peewee", "socket")


def _env(home, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_HOME": str(home),
            "CAIRN_DAEMON": "auto",
            "CAIRN_EMBED_MODEL": "hashing",
            "HF_HUB_CACHE": str(home / "hf-empty"),
            "CAIRN_DAEMON_TIMEOUT_MS": "60000",
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


def wait_for(predicate, what: str, timeout: float = 60.0, every: float = 0.2):
    """The first truthy value of predicate(), polled until `timeout` (an upper bound, not a wait)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(every)


def daemon_pids(home) -> list[int]:
    """The live `cairn daemon serve` processes whose CAIRN_HOME is `home` (zombies are not alive)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if argv[-3:-1] != [b"daemon", b"serve"] or b"cairn_cli" not in argv:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if f"CAIRN_HOME={home}".encode() in environ and state != "Z":
            pids.append(int(entry))
    return sorted(pids)


GATES_SITECUSTOMIZE = """
# Test gates for a daemon process: while the file DAEMON_TEST_GATES/load exists the daemon does not start
# loading its models; while DAEMON_TEST_GATES/rank (or rank.<session>) exists every rank request (of that session)
# waits inside the daemon, having appended its session to DAEMON_TEST_GATES/rank.inside (the evidence that a
# request is inside the daemon).
import importlib.abc, importlib.util, os, sys, time

GATES = os.environ.get("DAEMON_TEST_GATES")


def _wait(name):
    while os.path.exists(os.path.join(GATES, name)):
        time.sleep(0.02)


class _Gates(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "cairn_cli.daemon.server":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            load, handle = module.Daemon.load, module.Daemon.handle

            def gated_load(self):
                _wait("load")
                load(self)

            def gated_handle(self, req):
                if req.get("op") == "rank":
                    session = str((req.get("request") or {}).get("session_id"))
                    with open(os.path.join(GATES, "rank.inside"), "a") as fh:
                        fh.write(session + "\\n")
                    _wait("rank")
                    _wait("rank." + session)
                return handle(self, req)

            module.Daemon.load, module.Daemon.handle = gated_load, gated_handle

        spec.loader.exec_module = exec_module
        return spec


if GATES:
    sys.meta_path.insert(0, _Gates())
"""


class Gates:
    """Hold a daemon (started with `.env`) before loading its models, or inside every rank request (`rank`) or
    those of one session (`rank.<session>`)."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "gates"
        self.dir.mkdir()
        (self.dir / "sitecustomize.py").write_text(GATES_SITECUSTOMIZE)
        path = os.pathsep.join(p for p in (str(self.dir), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {"DAEMON_TEST_GATES": str(self.dir), "PYTHONPATH": path}

    def close(self, name: str) -> None:
        (self.dir / name).touch()

    def open(self, name: str) -> None:
        (self.dir / name).unlink(missing_ok=True)

    def inside(self) -> int:
        """How many rank requests have reached the daemon's rank gate."""
        path = self.dir / "rank.inside"
        return len(path.read_text().splitlines()) if path.exists() else 0


def serve(home, **extra) -> subprocess.Popen:
    """`cairn daemon serve` as this test's own child (so that the test can wait for its exit)."""
    return subprocess.Popen(
        [*CAIRN, "daemon", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home, **extra),
        cwd=ROOT,
    )


def stop_serving(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)


def prompt_processes(home, n: int, **extra) -> list[subprocess.Popen]:
    """n `cairn hook prompt` processes started at once, as n sessions' hooks would be, waiting for their stdin."""
    return [
        subprocess.Popen(
            [*CAIRN, "hook", "prompt"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(home, **extra),
            cwd=ROOT,
        )
        for _ in range(n)
    ]


def hook_payload(prompt: str, session: str = "hooked") -> str:
    return json.dumps(
        {"session_id": session, "cwd": "/src/webshop", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    )


def hook_lines(home) -> list[str]:
    """hook.log's lines of prompt hooks, in order."""
    path = home / "logs" / "hook.log"
    return [line for line in path.read_text().splitlines() if " prompt session=" in line] if path.exists() else []


def daemon_log(home) -> str:
    path = home / "logs" / "daemon.log"
    return path.read_text() if path.exists() else ""


def start(home, **extra):
    out = run(home, "daemon", "start", "--json", **extra)
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    assert info["state"] == "running"
    return info


def status(home, **extra):
    out = run(home, "daemon", "status", "--json", **extra)
    return out.returncode, json.loads(out.stdout)


def state_is(home, state, **extra):
    """status --json when the daemon is in `state` (for wait_for), else None."""
    st = status(home, **extra)[1]
    return st if st["state"] == state else None


def rank_json(home, prompt, *args, **extra):
    out = run(home, "rank", prompt, "--json", *args, **extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def deliveries(home):
    out = run(home, "deliveries", "--json")
    return json.loads(out.stdout)


def make_home(tmp_path, name="dhome"):
    h = tmp_path / name
    out = run(h, "memory", "import", EXAMPLES)
    assert out.returncode == 0, out.stderr
    return h


def stop_everything(h) -> None:
    """Stop the home's daemon, and kill whatever else a test left behind for it."""
    run(h, "daemon", "stop", "--force")
    for pid in daemon_pids(h):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def home(tmp_path):
    h = make_home(tmp_path)
    yield h
    stop_everything(h)


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_status_start_stop_tell_the_truth(home):
    rc, st = status(home)
    assert (rc, st["state"]) == (3, "stopped")
    info = start(home)
    assert start(home)["pid"] == info["pid"], "a second start must not spawn a second daemon"
    rc, st = status(home)
    assert (rc, st["state"], st["pid"]) == (0, "running", info["pid"])
    out = run(home, "daemon", "stop")
    assert out.returncode == 0 and "stopped" in out.stdout
    from cairn_cli.files import pid_alive

    assert not pid_alive(info["pid"])


@pytest.mark.slow
def test_hung_daemon_times_out_to_the_fallback_and_status_says_hung(home):
    info = start(home)
    os.kill(info["pid"], signal.SIGSTOP)
    try:
        result = rank_json(home, "deploy to production", "--session", "hung", CAIRN_DAEMON_TIMEOUT_MS="300")
        assert result["ranker"] == "cairn-fallback" and result["embed_model"] is None
        assert any("did not answer within 300 ms" in n for n in result["notes"])
        assert result["memories"][0]["id"] == 13
        rc, st = status(home, CAIRN_DAEMON_TIMEOUT_MS="300")
        assert (rc, st["state"]) == (4, "hung")
    finally:
        os.kill(info["pid"], signal.SIGCONT)
    wait_for(lambda: state_is(home, "running"), "running daemon after SIGCONT")  # it woke up...
    # ...and worked off the stale request without logging it a second time: only the fallback's deliveries exist
    wait_for(lambda: "abandoned a request" in daemon_log(home), "'abandoned a request' in daemon.log")
    rows = [d for d in deliveries(home) if d["session_id"] == "hung"]
    assert rows and all(r["ranker"] == "cairn-fallback" for r in rows), "the fallback's deliveries are logged"


@pytest.mark.slow
def test_daemon_killed_mid_request_leaves_a_stale_socket_that_start_recovers(home, tmp_path):
    gates = Gates(tmp_path)
    info = start(home, **gates.env)
    gates.close("rank")  # the daemon takes the request, then holds it
    proc = subprocess.Popen(
        [*CAIRN, "rank", "release to production", "--json", "--session", "killed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(home),
        cwd=ROOT,
    )
    wait_for(gates.inside, "the rank request inside the daemon")
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


@pytest.mark.slow
def test_a_leftover_socket_file_is_recovered(home):
    path = str(home / "daemon.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # bound, never listened, never unlinked: what a crash leaves
    os.chmod(path, 0o600)
    result = rank_json(home, "deploy to production")
    assert result["ranker"] == "cairn-fallback" and "stale socket" in result["notes"][0]
    assert start(home)["state"] == "running"


@pytest.mark.slow
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
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs), "exit of one of the two")
        st = wait_for(lambda: state_is(home, "running"), "running daemon")
        alive = [p for p in procs if p.poll() is None]
        dead = [p for p in procs if p.poll() is not None]
        assert len(alive) == 1 and len(dead) == 1
        assert dead[0].returncode == 1 and "already running" in dead[0].stderr.read()
        assert st["pid"] == alive[0].pid
        assert daemon_pids(home) == [alive[0].pid]
    finally:
        for p in procs:
            stop_serving(p)
    assert alive[0].returncode == 0, "SIGTERM is a clean shutdown"
    assert not (home / "daemon.sock").exists() and not (home / "daemon.json").exists()


@pytest.mark.slow
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


@pytest.mark.slow
def test_autostart_answers_now_and_spawns_the_daemon_for_next_time(home):
    result = rank_json(home, "deploy to production", "--autostart")
    assert result["ranker"] == "cairn-fallback" and "autostarted" in result["notes"][0]
    wait_for(lambda: state_is(home, "running"), "the autostarted daemon running")
    assert rank_json(home, "deploy to production")["ranker"] == "cairn"
    assert daemon_log(home).count("spawn: starting a daemon") == 1


def test_the_lean_entry_accepts_exactly_the_typer_options():
    import typer.main

    from cairn_cli.cli import app
    from cairn_cli.entry import _RANK_FLAGS, _RANK_VALUES

    command = typer.main.get_command(app).commands["rank"]
    typer_opts = {o for p in command.params for o in p.opts if o.startswith("-")}
    assert set(_RANK_VALUES) | set(_RANK_FLAGS) == typer_opts


@pytest.mark.parametrize(
    "argv, want",
    [
        (["hello"], {"prompt": "hello"}),
        (["--scope", "web", "hi", "-k", "3"], {"prompt": "hi", "scope": "web", "k": 3}),
        (
            ["--scope=web", "-k7", "--json", "--no-log"],
            {"prompt": None, "scope": "web", "k": 7, "json": True, "no_log": True},
        ),
        (["--turn", "4", "--", "-starts with a dash"], {"prompt": "-starts with a dash", "turn": 4}),
        (["-", "--session", "s1", "--autostart"], {"prompt": "-", "session": "s1", "autostart": True}),
        (["--scope", "a", "--scope", "b", "x"], {"prompt": "x", "scope": "b"}),
        (["-k", "-1", "x"], {"prompt": "x", "k": -1}),  # out of range: fast_rank hands it to Typer
    ],
)
def test_the_lean_rank_parser_reads_what_typer_reads(argv, want):
    from cairn_cli.entry import parse_rank

    got = parse_rank(argv)
    assert got is not None and {k: got[k] for k in want} == want


@pytest.mark.parametrize(
    "argv",
    [["--bogus", "x"], ["a", "b"], ["--scope"], ["-k", "five"], ["--json=yes"], ["--turn"], ["-x"], ["--sess", "s"]],
)
def test_the_lean_rank_parser_leaves_usage_errors_to_typer(argv):
    from cairn_cli.entry import parse_rank

    assert parse_rank(argv) is None


@pytest.mark.slow
def test_the_daemon_picks_up_a_newly_deployed_student_without_a_restart(home):
    from cairn_cli.core.learning import deploy
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    budget = {"CAIRN_RERANK_BUDGET_MS": "60000"}  # a plan that never skips on a loaded machine: speed is benched
    pid = start(home, **budget)["pid"]
    first = rank_json(home, "how are prices stored?", "--scope", "webshop", **budget)
    assert first["reranker_model"] == "none"
    live = home / "training_data" / "reranker-student"
    model = CrossEncoderModel(bundled_base(), max_length=64)
    names = []
    for _ in range(2):  # two deployments, as train-reranker makes them: a new version, then the atomic swap
        version = deploy.new_version_dir(live)
        model.save(version)
        deploy.deploy(version, live)
        wanted = f"student:{version.resolve()}"

        def swapped(wanted=wanted):  # loaded in the background: every answer meanwhile is the daemon's own
            result = rank_json(home, "how are prices stored?", "--scope", "webshop", **budget)
            assert result["ranker"] == "cairn", result["notes"]
            return result if result["reranker_model"] == wanted else None

        result = wait_for(swapped, f"the daemon ranking with {wanted}", timeout=180, every=0.5)
        components = result["memories"][0]["components"]
        assert "reranker_score" in components and components["rerank_plan"]["skipped"] is False
        names.append(result["reranker_model"])
        # the plan the daemon measured on this CPU: throughput per precision and length, fidelity to fp32
        plan = wait_for(
            lambda: status(home, CAIRN_DAEMON_TIMEOUT_MS="60000", **budget)[1].get("rerank_plan"),
            "the daemon's status with its rerank plan",
            timeout=180,
            every=0.5,
        )
        assert plan["precision"] == components["rerank_plan"]["precision"] and plan["fidelity"]["fp32"]["accepted"]
        assert all(speed > 0 for by_length in plan["throughput"].values() for speed in by_length.values())
    assert names[0] != names[1]
    assert status(home)[1]["pid"] == pid  # the same daemon process throughout
    # the live stage's calls teach the plan its p95 margin (fresh prompts: a cached window costs no stage call)
    from cairn_cli.core.ranking.plan import OBSERVE_MIN

    for i in range(OBSERVE_MIN + 1):
        rank_json(home, f"how are prices stored, question {i}?", "--scope", "webshop", "--no-log", **budget)
    plan = status(home, CAIRN_DAEMON_TIMEOUT_MS="60000", **budget)[1]["rerank_plan"]
    assert plan["observed"]["calls"] >= OBSERVE_MIN and plan["observed"]["p95_ms"] > 0
    assert plan["margin"] >= 1.0
    out = run(home, "daemon", "status", **budget)
    assert "p95 margin" in out.stdout and "learnt from" in out.stdout, out.stdout


@pytest.mark.slow
def test_a_finished_request_leaves_no_connection_open_in_the_daemon(home):
    """Each request is a thread with its own connections to both stores: they are closed when it ends, not left to
    a garbage collector the daemon freezes (they were: 4 descriptors and ~0.6 MB kept for good per prompt)."""
    pid = start(home)["pid"]

    def descriptors() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    for i in range(5):
        rank_json(home, f"how should prices be stored for the checkout? ({i})", "--scope", "webshop")
    before = descriptors()
    for i in range(30):
        assert rank_json(home, f"which database does the webshop use? ({i})", "--scope", "webshop")["delivery_ids"]
    assert descriptors() - before <= 3, f"{descriptors() - before} descriptors more after 30 prompts"
    settled = status(home)[1]["settle_ms"]
    assert settled is not None and settled["of"] >= 30  # the collection after each answer ran


@pytest.mark.slow
def test_status_reports_the_torch_threads_the_daemon_was_given(home):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("on one core, 1 thread is also the default: the test could not fail")
    start(home, CAIRN_TORCH_THREADS="1")
    st = wait_for(lambda: state_is(home, "running"), "running daemon")
    assert st["torch_threads"] == 1, "torch was loaded after the wish was set, and kept its default"
    out = run(home, "daemon", "status")
    assert out.returncode == 0 and "torch threads 1" in out.stdout, out.stdout
