"""The remaining input gaps (issue 24): a mistyped store URL or the other store's database is refused instead of
becoming a new store, input is bounded, a read-only home still ranks, log-delivery is idempotent, and what used
to say `unexpected …` or "no such file" says what is wrong."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_cli import hook_entry
from cairn_cli.commands import _common
from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries, memories
from cairn_cli.db.schema import MIGRATIONS
from tests.conftest import EXAMPLES, ROOT

CAIRN = [sys.executable, "-m", "cairn_cli"]
DELIVERY = {"session_id": "x", "turn": 1, "context_window": "c", "reranker_model": "m"}
ONE = json.dumps({**DELIVERY, "memories": [{"id": 1, "rank": 1, "score": 1.0}]})


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def _ledger(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM cairn_migrations")}


def _files(folder: Path) -> set[str]:
    """What is in `folder` (SQLite's -wal / -shm come and go with connections; logs are not stores)."""
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(("-wal", "-shm")) and "logs" not in p.parts
    }


# -- the table: (argv, stdin, environment, exit code, message fragment) -------------------------------------------
# {missing}: a SQLite file that does not exist; {memory} / {ephemeral}: the home's stores; {notdb}: a text file;
# {fifo}: a FIFO nobody writes to; {dir}: a directory; {big}: a JSONL file of 2,000 bytes
CASES = [
    (["--db-url", "sqlite:///{missing}", "rank", "deploy"], None, {}, 1, "no memory store at {missing}"),
    (["--ephemeral-db-url", "sqlite:///{missing}", "rank", "deploy"], None, {}, 1, "no ephemeral store at {missing}"),
    (["rank", "deploy"], None, {"CAIRN_DB_URL": "sqlite:///{missing}"}, 1, "cairn db init sqlite:///{missing}"),
    (["--db-url", "sqlite:///{missing}", "log-delivery"], ONE, {}, 1, "no memory store at"),
    (["--db-url", "sqlite:///{missing}", "memory", "supersede", "1", "2"], None, {}, 1, "no memory store at"),
    (["--db-url", "sqlite:///{missing}", "grade", "--session", "s", "[cm]{}[/cm]"], None, {}, 1, "no memory store"),
    (
        ["--db-url", "sqlite:///{ephemeral}", "rank", "deploy"],
        None,
        {},
        1,
        "sqlite:///{ephemeral} holds the ephemeral store (deliveries), not the memory store (check --db-url",
    ),
    (
        ["--ephemeral-db-url", "sqlite:///{memory}", "rank", "deploy"],
        None,
        {},
        1,
        "holds the memory store (memories), not the ephemeral store (check --ephemeral-db-url",
    ),
    (
        ["--db-url", "sqlite:///{ephemeral}", "memory", "add", "made on purpose, but not in the delivery log"],
        None,
        {},
        1,
        "holds the ephemeral store",
    ),
    (
        ["db", "copy", "--from", "sqlite:///{ephemeral}", "--to", "sqlite:///{missing}", "--store", "memory"],
        None,
        {},
        1,
        "holds the ephemeral store (deliveries), not the memory store (check --from)",
    ),
    (["--db-url", "sqlite:///{notdb}", "rank", "deploy"], None, {}, 1, "sqlite:///{notdb} is not a SQLite database"),
    (["--db-url", "sqlite:///{notdb}", "memory", "list"], None, {}, 1, "is not a SQLite database"),
    (["db", "init", "sqlite:///{missing}"], None, {}, 2, "add --store memory or --store ephemeral"),
    (["memory", "add", "caf\udcff au lait"], None, {}, 2, "content is not valid UTF-8 text (bytes ff at character 3)"),
    (["memory", "add", "fine", "--scope", "\udcfe\udcff"], None, {}, 2, "scope is not valid UTF-8 text (bytes fe ff"),
    (["grade", "--session", "\udcff", "[cm]{}[/cm]"], None, {}, 2, "session is not valid UTF-8"),
    (["grade", "--session", "s", "--file", "/dev/zero"], None, {}, 2, "/dev/zero is not a regular file"),
    (["grade", "--session", "s", "--file", "{fifo}"], None, {}, 2, "{fifo} is not a regular file"),
    (["grade", "--session", "s", "--file", "{dir}"], None, {}, 2, "{dir} is a directory"),
    (["grade", "--session", "s", "--file", "{missing}"], None, {}, 1, "cannot read {missing}: no such file"),
    (["engage", "--session", "s", "--file", "/dev/zero"], None, {}, 2, "/dev/zero is not a regular file"),
    (["engage", "--session", "s", "--transcript", "/dev/zero"], None, {}, 2, "/dev/zero is not a regular file"),
    (["engage", "--session", "s", "--transcript", "{missing}"], None, {}, 1, "no such transcript: {missing}"),
    (["memory", "import", "{fifo}"], None, {}, 2, "{fifo} is not a regular file"),
    (["memory", "import", "/dev/zero"], None, {}, 2, "/dev/zero is not a regular file"),
    (["memory", "import", "{big}"], None, {"CAIRN_MAX_INPUT_BYTES": "1000"}, 2, "{big} is larger than 1000 bytes"),
    (["rank"], "x" * 1001, {"CAIRN_MAX_INPUT_BYTES": "1000"}, 2, "stdin is larger than 1000 bytes"),
    (["grade", "--session", "s"], "y" * 5000, {"CAIRN_MAX_INPUT_BYTES": "1000"}, 2, "stdin is larger than 1000"),
    (["log-delivery"], " " * 1001, {"CAIRN_MAX_INPUT_BYTES": "1000"}, 2, "raise CAIRN_MAX_INPUT_BYTES"),
]


@pytest.mark.parametrize("argv,stdin,env,code,fragment", CASES, ids=lambda v: str(v)[:50])
def test_bad_input_table(store, cli, cairn_home, tmp_path, monkeypatch, argv, stdin, env, code, fragment):
    """One stderr line with the fix in parentheses, the exit code, nothing on stdout, and nothing written: no
    store made, no migration of one store applied to the other's database, no memory or delivery added."""
    places = {
        "missing": tmp_path / "typo" / "memroy.db",
        "memory": cairn_home / "memory.db",
        "ephemeral": cairn_home / "ephemeral.db",
        "notdb": tmp_path / "notes.txt",
        "fifo": tmp_path / "pipe",
        "dir": tmp_path / "folder",
        "big": tmp_path / "big.jsonl",
    }
    places["notdb"].write_text("a text file, not a database\n" * 10)
    os.mkfifo(places["fifo"])
    places["dir"].mkdir()
    places["big"].write_text(json.dumps({"content": "z" * 1980}) + "\n")

    def fill(text: str) -> str:
        return text.format(**{k: str(v) for k, v in places.items()}) if "{" in text and "[cm]" not in text else text

    for name, value in env.items():
        monkeypatch.setenv(name, fill(value))
    files, ledgers = _files(tmp_path), {k: _ledger(places[k]) for k in ("memory", "ephemeral")}
    before_mem = [(m.id, m.content, m.scope) for m in memories.list_memories(Settings(), include_superseded=True)]
    before_del = len(deliveries.list_deliveries(Settings(), limit=10_000))
    result = cli(*[fill(a) for a in argv], input=stdin)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fill(fragment) in lines[0], result.stderr
    assert "unexpected" not in lines[0]
    assert lines[0].endswith(")"), "the message must carry a hint naming the fix"
    assert result.stdout == ""
    assert _files(tmp_path) == files  # no store made at a mistyped URL
    assert {k: _ledger(places[k]) for k in ("memory", "ephemeral")} == ledgers  # nothing migrated into either
    after_mem = [(m.id, m.content, m.scope) for m in memories.list_memories(Settings(), include_superseded=True)]
    assert after_mem == before_mem
    assert len(deliveries.list_deliveries(Settings(), limit=10_000)) == before_del


# -- store URLs: made only on purpose ------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def new_url(request, tmp_path):
    """A URL that holds no store yet: a SQLite file that does not exist, or an empty PostgreSQL database."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_server").create_database("new")
    return f"sqlite:///{tmp_path / 'elsewhere' / 'memory.db'}"


def _migrations(url: str) -> set[str]:
    from cairn_cli import db

    database = db._connect("memory", url, create=False)
    try:
        database.connect()
        return db.recorded_migrations(database) or set()
    finally:
        database.close()


def test_a_url_without_a_store_is_refused_until_made_on_purpose_then_ranks(store, cli, new_url, tmp_path):
    refused = cli("--db-url", new_url, "rank", "deploy the webshop")
    assert refused.exit_code == 1
    assert "no memory store" in refused.stderr and f"cairn db init {new_url} --store memory" in refused.stderr
    assert not (tmp_path / "elsewhere").exists()
    if new_url.startswith("postgresql"):
        assert _migrations(new_url) == set()  # the empty database stayed empty
    made = cli("db", "init", new_url, "--store", "memory", "--json")
    assert made.exit_code == 0, made.output
    (report,) = json.loads(made.stdout)
    assert report["created"] and report["applied"] == list(MIGRATIONS["memory"])
    again = cli("db", "init", new_url, "--store", "memory")
    assert again.exit_code == 0 and "already at the current schema" in again.stdout  # idempotent
    assert _migrations(new_url) == set(MIGRATIONS["memory"])
    assert cli("--db-url", new_url, "memory", "add", "The staging deploy needs a tag").exit_code == 0
    ranked = cli("--db-url", new_url, "rank", "staging deploy tag", "--json")
    assert ranked.exit_code == 0, ranked.output
    assert [m["content"] for m in json.loads(ranked.stdout)["memories"]] == ["The staging deploy needs a tag"]


def test_memory_import_makes_the_stores_it_is_told_to_use(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_DB_URL", f"sqlite:///{tmp_path / 'team' / 'memory.db'}")
    monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", f"sqlite:///{tmp_path / 'team' / 'ephemeral.db'}")
    assert cli("rank", "deploy").exit_code == 1
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    assert {"memory.db", "ephemeral.db"} <= {p.name for p in (tmp_path / "team").iterdir()}
    assert cli("rank", "deploy").exit_code == 0


def test_db_init_without_a_url_makes_both_configured_stores_once(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_DB_URL", f"sqlite:///{tmp_path / 'm.db'}")
    monkeypatch.setenv("CAIRN_EPHEMERAL_DB_URL", f"sqlite:///{tmp_path / 'e.db'}")
    first = json.loads(cli("db", "init", "--json").stdout)
    assert [(r["store"], r["created"], len(r["applied"])) for r in first] == [
        ("memory", True, len(MIGRATIONS["memory"])),
        ("ephemeral", True, len(MIGRATIONS["ephemeral"])),
    ]
    again = json.loads(cli("db", "init", "--json").stdout)
    assert [(r["created"], r["applied"]) for r in again] == [(False, []), (False, [])]
    assert _ledger(tmp_path / "m.db") == set(MIGRATIONS["memory"])
    assert _ledger(tmp_path / "e.db") == set(MIGRATIONS["ephemeral"])


def test_the_other_stores_database_is_refused_on_postgresql_before_anything_is_migrated(cli, pg_server):
    url = pg_server.create_database("eph")
    assert cli("db", "init", url, "--store", "ephemeral").exit_code == 0
    for argv in (
        ["--db-url", url, "rank", "x"],
        ["--db-url", url, "memory", "add", "x"],
        ["db", "init", url, "--store", "memory"],
    ):
        result = cli(*argv)
        assert result.exit_code == 1 and "holds the ephemeral store (deliveries), not the memory store" in result.stderr
    assert _migrations(url) == set(MIGRATIONS["ephemeral"])


def test_the_daemon_down_fallback_refuses_the_other_store_too(store, cli, cairn_home, monkeypatch):
    """The lean open (stdlib sqlite3, no peewee) takes only a store at its own schema; anything else goes through
    the peewee open, which refuses it."""
    monkeypatch.setenv("CAIRN_DAEMON", "auto")  # no daemon runs: the fallback ranks
    result = cli("--db-url", f"sqlite:///{cairn_home / 'ephemeral.db'}", "rank", "deploy")
    assert result.exit_code == 1 and "holds the ephemeral store" in result.stderr
    assert _ledger(cairn_home / "ephemeral.db") == set(MIGRATIONS["ephemeral"])
    _common._globals.clear()  # the flag of the run before (one process here, a new one per command in real life)
    ranked = cli("rank", "deploy")
    assert ranked.exit_code == 0 and "fallback" in ranked.stderr  # the right stores rank through the fallback


@pytest.mark.parametrize("event", ["prompt", "stop"])
def test_a_hook_given_a_mistyped_url_logs_the_clear_error_and_exits_0(store, cairn_home, tmp_path, monkeypatch, event):
    from cairn_cli import db

    typo = tmp_path / "memroy.db"
    monkeypatch.setenv("CAIRN_DB_URL", f"sqlite:///{typo}")
    db.close_all()
    raw = json.dumps({"session_id": "t1", "cwd": "/src/webshop", "prompt": "deploy", "last_assistant_message": "ok"})
    run = hook_entry.run_prompt if event == "prompt" else hook_entry.run_stop
    assert run(raw.encode()) == 0
    last = (cairn_home / "logs" / "hook.log").read_text().strip().splitlines()[-1]
    assert f"{event} error" in last and f"no memory store at {typo} (check --db-url / CAIRN_DB_URL" in last
    assert "unexpected" not in last and not typo.exists()


@pytest.mark.slow
@pytest.mark.parametrize("event", ["prompt", "stop"])
def test_a_hook_given_a_mistyped_db_url_option_refuses_it_too(store, cairn_home, tmp_path, event):
    """`cairn --db-url X hook ...` (a hook command line written by hand) is held to the same rule as the variable."""
    typo = tmp_path / "memroy.db"
    raw = json.dumps({"session_id": "t2", "cwd": "/src/webshop", "prompt": "deploy", "last_assistant_message": "ok"})
    argv = [sys.executable, "-m", "cairn_cli", "--db-url", f"sqlite:///{typo}", "hook", event]
    proc = subprocess.run(argv, input=raw, capture_output=True, text=True, env=_env(cairn_home), cwd=ROOT)
    assert proc.returncode == 0 and "<memory" not in proc.stdout
    last = (cairn_home / "logs" / "hook.log").read_text().strip().splitlines()[-1]
    assert f"{event} error" in last and f"no memory store at {typo}" in last and not typo.exists()


# -- bounded input -------------------------------------------------------------------------------------------------


def _env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update({"CAIRN_HOME": str(home), "CAIRN_DAEMON": "off", "CAIRN_EMBED_MODEL": "hashing", **extra})
    return env


@pytest.mark.slow
def test_the_prompt_hook_on_dev_zero_stops_at_the_cap_with_little_memory(store, cairn_home):
    """Before: `hook prompt < /dev/zero` grew to 1.7 GB RSS until killed. Now it reads 16 MiB + 1 byte, logs why
    and exits 0; the peak RSS of the process is measured by the parent (getrusage of its only child)."""
    code = (
        "import resource, subprocess, sys\n"
        "with open('/dev/zero', 'rb') as zero:\n"
        "    out = subprocess.run(sys.argv[1:], stdin=zero, capture_output=True)\n"
        "print(out.returncode, len(out.stdout), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, *CAIRN, "hook", "prompt"],
        env=_env(cairn_home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,  # only a safety net: it ran until killed
    )
    rc, printed, peak_kib = map(int, run.stdout.split())
    assert rc == 0 and printed == 0
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib} KiB"
    last = (cairn_home / "logs" / "hook.log").read_text().strip().splitlines()[-1]
    assert "prompt error" in last and "stdin is larger than 16777216 bytes (16 MiB)" in last


@pytest.mark.slow
def test_a_pasted_prompt_of_several_megabytes_still_ranks_through_the_hook(store, cairn_home):
    words = ["integration", "tests", "fail", "with", "connection", "refused", "on", "the", "staging", "deploy"]
    prompt = " ".join(words[i % len(words)] for i in range(500_000))  # about 3.5 MB
    payload = json.dumps({"session_id": "big", "cwd": "/src/webshop", "prompt": prompt}).encode()
    out = subprocess.run(
        [*CAIRN, "hook", "prompt"], input=payload, env=_env(cairn_home), cwd=ROOT, capture_output=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.count(b"<memory id=") == 5
    assert "delivered=5" in (cairn_home / "logs" / "hook.log").read_text()


def test_the_stop_hook_refuses_a_memory_that_is_not_utf8_and_keeps_the_rest(store, cairn_home, capsys):
    assert (
        hook_entry.run_prompt(json.dumps({"session_id": "u8", "prompt": "deploy", "cwd": "/w/webshop"}).encode()) == 0
    )
    capsys.readouterr()
    cm = '[cm]{"m": [{"content": "broken \\ud800 text"}, {"content": "Staging deploys need a tag"}]}[/cm]'
    stop = {"session_id": "u8", "hook_event_name": "Stop", "last_assistant_message": f"ok {cm}"}
    assert hook_entry.run_stop(json.dumps(stop).encode()) == 0
    last = (cairn_home / "logs" / "hook.log").read_text().strip().splitlines()[-1]
    assert "1 memories written" in last and "m[0]: content is not valid UTF-8 text" in last
    assert [m.content for m in memories.list_memories(Settings())][-1] == "Staging deploys need a tag"


# -- log-delivery: idempotent --------------------------------------------------------------------------------------


def test_log_delivery_is_idempotent_for_the_same_session_turn_memory_and_window(backend, store, cli):
    def send(memory_ids: list[int], window: str = "the same window"):
        record = {
            **DELIVERY,
            "context_window": window,
            "memories": [{"id": m, "rank": r, "score": 1.0 / r} for r, m in enumerate(memory_ids, 1)],
        }
        result = cli("log-delivery", "--json", input=json.dumps(record))
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first = send([1, 2])
    assert len(first["delivery_ids"]) == 2 and first["already_logged"] == []
    again = send([1, 2])
    assert again == {"delivery_ids": [], "already_logged": first["delivery_ids"]}
    assert cli("log-delivery", input=ONE).stdout.strip() == "logged 1 deliveries"  # another window: "c"
    assert cli("log-delivery", input=ONE).stdout.strip() == "logged 0 deliveries, 1 already logged (not logged again)"
    partly = send([2, 3])
    assert len(partly["delivery_ids"]) == 1 and partly["already_logged"] == [first["delivery_ids"][1]]
    other_window = send([1], window="another window")
    assert len(other_window["delivery_ids"]) == 1
    rows = deliveries.list_deliveries(Settings(), session_id="x", limit=100)
    keys = [(r.turn, r.memory_id, r.context_key) for r in rows]
    assert len(rows) == 5 and len(keys) == len(set(keys))


# -- a read-only CAIRN_HOME ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0, reason="a home its user cannot write needs root to set up (setpriv to nobody)")
def test_a_read_only_home_still_ranks_and_every_write_is_one_clear_line(request):
    """The whole CAIRN_HOME (folder 0500, files 0400) belongs to `nobody`, who runs cairn: SQLite can read the
    stores but never write them (root would bypass the permission bits, hence setpriv)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="cairn-ro-home-"))  # pytest's own tmp folders are closed to other accounts
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    home = base / "home"
    env = _env(home)
    assert subprocess.run([*CAIRN, "memory", "import", str(EXAMPLES)], env=env, cwd=ROOT).returncode == 0
    assert subprocess.run([*CAIRN, "rank", "deploy"], env=env, cwd=ROOT, capture_output=True).returncode == 0
    for path in [home, *home.rglob("*")]:
        os.chown(path, 65534, 65534)
        path.chmod(0o500 if path.is_dir() else 0o400)
    before = {p.name: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *CAIRN]
    prompt = "how do I deploy the webshop to staging?"

    def run(*argv: str, stdin: bytes | None = None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*as_nobody, *argv], input=stdin, env={**env, **extra}, cwd=ROOT, capture_output=True, timeout=300
        )

    ranked = run("rank", prompt, "--scope", "webshop")
    assert ranked.returncode == 0 and ranked.stdout.count(b"<memory id=") == 5, ranked.stderr
    fallback = run("rank", prompt, "--scope", "webshop", CAIRN_DAEMON="auto")  # no daemon: the lexical fallback
    assert fallback.returncode == 0 and b"<memory id=" in fallback.stdout and b"fallback" in fallback.stderr
    hook = run("hook", "prompt", stdin=json.dumps({"session_id": "ro", "prompt": prompt, "cwd": "/w/webshop"}).encode())
    assert hook.returncode == 0 and hook.stdout.count(b"<memory id=") == 5
    for argv, fragment in (
        (["memory", "add", "a new memory"], b"the store is read-only here (attempt to write a readonly database)"),
        (["daemon", "start", "--wait", "5"], b"cannot start a daemon: " + str(home).encode()),
        (["--db-url", f"sqlite:///{home / 'ephemeral.db'}", "rank", "x"], b"holds the ephemeral store (deliveries)"),
    ):
        refused = run(*argv)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 1 and len(lines) == 1 and fragment in lines[0], (argv, refused.stderr)
        assert b"unexpected" not in lines[0]
    assert {p.name: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before  # nothing written
