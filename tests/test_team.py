"""One team, one PostgreSQL store: two instances (two CAIRN_HOMEs, two daemons) whose hooks write at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import EXAMPLES, QUESTIONS, SHOWN

CAIRN = [sys.executable, "-m", "cairn_cli"]
SESSIONS, PROMPTS = 8, 25


def team_env(pg_server, prefix: str, **extra: str) -> dict:
    """The environment of a machine of the team: fresh memory and delivery-log databases on the session's server
    (one pair per `prefix`), the hashing encoder, the daemon waited for (a loaded 2-core machine never falls back),
    no composite floor; CAIRN_HOME and CAIRN_INSTANCE are each machine's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        CAIRN_DB_URL=pg_server.create_database(f"{prefix}_mem"),
        CAIRN_EPHEMERAL_DB_URL=pg_server.create_database(f"{prefix}_eph"),
        CAIRN_EMBED_MODEL="hashing",
        CAIRN_DAEMON="auto",
        CAIRN_DAEMON_TIMEOUT_MS="60000",
        CAIRN_COMPOSITE_FLOOR="off",
        **extra,
    )
    return env


@pytest.mark.slow
def test_two_instances_hooks_at_once_every_delivery_and_grade_lands_exactly_once(pg_server, tmp_path):
    from cairn_cli import db
    from cairn_cli.config import Settings
    from cairn_cli.core.store import open_stores

    base = team_env(pg_server, "team", CAIRN_HOOK_SCOPE="webshop")
    mem, eph = base["CAIRN_DB_URL"], base["CAIRN_EPHEMERAL_DB_URL"]
    envs = {name: dict(base, CAIRN_HOME=str(tmp_path / name), CAIRN_INSTANCE=name) for name in ("alice", "bob")}

    def cairn(env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        out = subprocess.run([*CAIRN, *args], env=env, input=stdin, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out

    cairn(envs["alice"], "memory", "import", str(EXAMPLES))
    for env in envs.values():
        cairn(env, "daemon", "start", "--wait", "120")

    def session(instance: str, k: int) -> list[int]:
        """25 prompts of one Claude Code session, each followed by its Stop grading what was shown; the counts
        shown per prompt."""
        env, sid, shown = envs[instance], f"{instance}-s{k}", []
        for i in range(PROMPTS):
            payload = {"hook_event_name": "UserPromptSubmit", "session_id": sid, "cwd": "/w/webshop"}
            out = cairn(env, "hook", "prompt", stdin=json.dumps({**payload, "prompt": QUESTIONS[(i + k) % 5]}))
            ids = [int(x) for x in SHOWN.findall(out.stdout)]
            shown.append(len(ids))
            grades = [f"{m}:{3 if j == 0 else 0}" for j, m in enumerate(ids)]
            message = f"Answer {i}.\n[cm]{json.dumps({'rg': grades})}[/cm]"
            stop = {"hook_event_name": "Stop", "session_id": sid, "last_assistant_message": message}
            cairn(env, "hook", "stop", stdin=json.dumps(stop))
        return shown

    try:
        with ThreadPoolExecutor(max_workers=2 * SESSIONS) as pool:
            jobs = {(name, k): pool.submit(session, name, k) for name in envs for k in range(SESSIONS)}
            shown = {key: job.result() for key, job in jobs.items()}
    finally:
        for env in envs.values():
            subprocess.run([*CAIRN, "daemon", "stop"], env=env, capture_output=True, timeout=120)

    for name in envs:  # the hooks never failed quietly
        log = (tmp_path / name / "logs" / "hook.log").read_text()
        assert " error:" not in log, log[-2000:]
    db.close_all()
    open_stores(Settings(DB_URL=mem, EPHEMERAL_DB_URL=eph))
    from cairn_cli.db.tables import HookState, MemoryDelivery

    rows = list(MemoryDelivery.select())
    keys = [(r.session_id, r.turn, r.memory_id) for r in rows]
    assert len(keys) == len(set(keys))  # no delivery twice
    for name in envs:
        mine = [r for r in rows if r.instance == name]
        assert len(mine) == sum(sum(v) for (who, _), v in shown.items() if who == name) > 0  # none lost
        assert all(r.grade is not None for r in mine)  # every grade landed
        assert {r.session_id for r in mine} == {f"{name}-s{k}" for k in range(SESSIONS)}
        turns = HookState.select().where(HookState.instance == name).count()
        assert turns == SESSIONS * PROMPTS
    per = {r["instance"]: r for r in json.loads(cairn(envs["bob"], "stats", "instances", "--json").stdout)}
    assert per["alice"]["prompts"] == per["bob"]["prompts"] == SESSIONS * PROMPTS
    assert per["alice"]["graded"] + per["bob"]["graded"] == len(rows)
    db.close_all()


@pytest.mark.slow
def test_hooks_fail_open_while_the_server_restarts_and_recover_when_it_is_back(pg_server, tmp_path):
    """The team's PostgreSQL restarts under a running daemon: prompts go through without memories (hook exit 0,
    the failure in hook.log), a Stop meanwhile writes nothing half, and once the server is back the same daemon
    ranks and logs again."""
    env = team_env(pg_server, "fault", CAIRN_HOME=str(tmp_path / "home"), CAIRN_HOOK_SCOPE="webshop")

    def cairn(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*CAIRN, *args], env=env, input=stdin, capture_output=True, text=True, timeout=300)

    def prompt(sid: str) -> subprocess.CompletedProcess:
        payload = {"hook_event_name": "UserPromptSubmit", "session_id": sid, "cwd": "/w/webshop"}
        return cairn("hook", "prompt", stdin=json.dumps({**payload, "prompt": QUESTIONS[0]}))

    assert cairn("memory", "import", str(EXAMPLES)).returncode == 0
    assert cairn("daemon", "start", "--wait", "120").returncode == 0
    try:
        assert SHOWN.findall(prompt("before").stdout)
        pg_server.stop_server()
        down = prompt("during")
        assert down.returncode == 0 and down.stdout == ""  # fails open: the prompt goes through, no memories
        stop = {"hook_event_name": "Stop", "session_id": "before", "last_assistant_message": "x [cm]{}[/cm]"}
        assert cairn("hook", "stop", stdin=json.dumps(stop)).returncode == 0
        log = (tmp_path / "home" / "logs" / "hook.log").read_text()
        assert "prompt error" in log and "stop error" in log
        pg_server.start_server()
        back = prompt("after")
        assert back.returncode == 0 and SHOWN.findall(back.stdout)  # the same daemon ranks again
        listed = json.loads(cairn("deliveries", "--json").stdout)
        assert {d["session_id"] for d in listed} == {"before", "after"}  # nothing of the prompt made while down
        assert {d["ranker"] for d in listed if d["session_id"] == "after"} == {"cairn"}  # the daemon, not a fallback
    finally:
        cairn("daemon", "stop")


@pytest.mark.slow
def test_a_student_published_by_one_instance_is_installed_by_the_others_daemon(pg_server, tmp_path, monkeypatch):
    """Alice's machine deploys a student trained on the pool: it is published to the shared store with its checksum,
    and Bob's running daemon installs it (checksum verified) and ranks with it, without a restart. A published
    version whose bytes do not match its checksum is never deployed: Bob keeps his model and says why."""
    from cairn_cli import config, db
    from cairn_cli.config import Settings
    from cairn_cli.core.learning import deploy, team
    from cairn_cli.core.store import open_stores, state
    from cairn_cli.db.tables import StudentVersion
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base
    from tests.test_daemon import wait_for

    base = team_env(
        pg_server,
        "stu",
        CAIRN_RERANK_BUDGET_MS="60000",  # a plan that never skips on a loaded machine: speed is benched
        HF_HUB_CACHE=str(tmp_path / "hf-empty"),  # no user's cross-encoder: Bob starts with none
    )
    bob = dict(base, CAIRN_HOME=str(tmp_path / "bob"), CAIRN_INSTANCE="bob")

    def cairn(*args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([*CAIRN, *args], env=bob, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out

    def ranked_by() -> str:
        out = cairn("rank", "how should prices be stored?", "--scope", "webshop", "--json", "--no-log")
        return json.loads(out.stdout)["reranker_model"]

    cairn("memory", "import", str(EXAMPLES))
    cairn("daemon", "start", "--wait", "180")
    try:
        assert ranked_by() == "none"
        # Alice's machine: a student deployed locally, then published (what train-reranker does on a shared store)
        for key, value in {**base, "CAIRN_HOME": str(tmp_path / "alice"), "CAIRN_INSTANCE": "alice"}.items():
            monkeypatch.setenv(key, value)
        db.close_all()
        s = Settings()
        open_stores(s)
        live = config.student_path()
        version = deploy.new_version_dir(live)
        CrossEncoderModel(bundled_base(), max_length=64).save(version)
        deploy.deploy(version, live)
        state.put(deploy.DEPLOY_KEY, {"version": str(version)}, s, by="test", reason="alice deployed")
        published = team.publish(version, s)
        assert published and StudentVersion.get_by_id(version.name).checksum == published["checksum"]
        mine = tmp_path / "bob" / "training_data" / "reranker-student.versions" / version.name
        wait_for(lambda: ranked_by() == f"student:{mine}", "Bob's daemon ranking with Alice's student", timeout=300)
        # a corrupt publication: the bytes no longer match the published checksum
        broken = deploy.new_version_dir(live)
        shutil.copytree(version, broken)
        team.publish(broken, s)
        StudentVersion.update(blob=b"not a tar").where(StudentVersion.name == broken.name).execute()
        warned = wait_for(
            lambda: (
                [w for w in json.loads(cairn("daemon", "status", "--json").stdout)["warnings"] if broken.name in w]
                or (ranked_by() and None)
            ),
            "Bob's daemon refusing the corrupt version",
            timeout=120,
        )
        assert "checksum does not match" in warned[0]
        assert ranked_by() == f"student:{mine}"  # still Alice's first student
        # a publication that arrives whole but does not load (its weights broken): Bob keeps the student he has
        unloadable = deploy.new_version_dir(live)
        shutil.copytree(version, unloadable)
        for weights in unloadable.glob("*.safetensors"):
            weights.write_bytes(b"not weights")
        team.publish(unloadable, s)
        kept = wait_for(
            lambda: (
                [w for w in json.loads(cairn("daemon", "status", "--json").stdout)["warnings"] if "did not load" in w]
                or (ranked_by() and None)
            ),
            "Bob's daemon keeping its student",
            timeout=300,
        )
        assert unloadable.name in kept[0] and ranked_by() == f"student:{mine}"
    finally:
        subprocess.run([*CAIRN, "daemon", "stop"], env=bob, capture_output=True, timeout=120)
        db.close_all()
