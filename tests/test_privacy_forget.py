"""`cairn forget` (by id, by pattern, by scope, --dry-run), `cairn redact --scan`, `cairn memory export` and
`cairn memory edit` (issue #28, point 4), through the real CLI on SQLite and on PostgreSQL (tests/conftest.py
`backend`): what is forgotten or redacted is gone from the rows and from every file under CAIRN_HOME."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cairn_cli.config import Settings
from tests.conftest import EXAMPLES, SHOWN

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")

NAME = "Zanzibar-Quokka"

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_R7x2Kq9LmN4pT8vW1yZ3aB5cD6eF0gH2iJ4k"
PASSWORD = "Hunter2Zebra9"
PEM_BODY = "MIIEowIBAAKCAQEA7mK3xQ9vLpR2sT4uW6yZ8bD0fH2jK4mN6pR8tV0xZ2bD4fH6"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\nqL3nP5rT7vX9zB1dF3hJ5lN7pR9tV1xZ3bD5fH7jK9m=\n-----END RSA PRIVATE KEY-----"
PRIVATE_SPAN = "<private>my flat is at 12 Wombat Crescent</private>"
# what must be gone after a scan (the private span's inside included)
SECRETS = (AWS_KEY, GITHUB_TOKEN, PASSWORD, PEM_BODY, "Wombat Crescent")


# -- helpers ------------------------------------------------------------------------------------------------------


def files_holding(home: Path, needle: str) -> list[str]:
    """The files under CAIRN_HOME (databases and their write-ahead logs included) whose bytes hold `needle`, any
    case."""
    lowered = needle.lower().encode()
    out = []
    for root, _, names in os.walk(home):
        for name in names:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink() and lowered in path.read_bytes().lower():
                out.append(str(path.relative_to(home)))
    return sorted(out)


def pg_rows_holding(needle: str) -> list[str]:
    """On PostgreSQL: the tables of both stores with a row whose text holds `needle` (any case); [] on SQLite."""
    urls = [os.environ.get("CAIRN_DB_URL"), os.environ.get("CAIRN_EPHEMERAL_DB_URL")]
    if not all(u and u.startswith("postgresql") for u in urls):
        return []
    import psycopg2

    out = []
    for url in urls:
        conn = psycopg2.connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
                )
                for (table,) in cur.fetchall():
                    cur.execute(
                        f'SELECT count(*) FROM "{table}" AS r WHERE position(lower(%s) in lower(r::text)) > 0',
                        (needle,),
                    )
                    if cur.fetchone()[0]:
                        out.append(f"{url.rsplit('/', 1)[1]}.{table}")
        finally:
            conn.close()
    return out


def stored_anywhere(home: Path, needle: str) -> list[str]:
    return files_holding(home, needle) + pg_rows_holding(needle)


def add(cli, content: str, *args) -> int:
    result = cli("memory", "add", content, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["id"]


def prompt(cli, session: str, text: str, scope_dir: str = "/w/webshop") -> list[int]:
    payload = {"session_id": session, "cwd": scope_dir, "hook_event_name": "UserPromptSubmit", "prompt": text}
    result = cli("hook", "prompt", input=json.dumps(payload))
    assert result.exit_code == 0, result.output
    return [int(i) for i in SHOWN.findall(result.stdout)]


def stop(cli, session: str, message: str) -> None:
    payload = {"session_id": session, "hook_event_name": "Stop", "last_assistant_message": message}
    result = cli("hook", "stop", input=json.dumps(payload))
    assert result.exit_code == 0, result.output


def cm(**block) -> str:
    return f"[cm]{json.dumps(block)}[/cm]"


def forget(cli, *args, code: int = 0) -> dict:
    result = cli("forget", *args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if code == 0 else {}


def scan(cli, *args) -> dict:
    result = cli("redact", "--scan", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rank_ids(cli, query: str, monkeypatch, scope: str = "webshop") -> list[int]:
    """The memories the full-text fallback ranks for `query` (the daemon is down: the index alone answers)."""
    monkeypatch.setenv("CAIRN_DAEMON", "auto")
    result = cli("rank", query, "--scope", scope, "--no-log", "--json")
    monkeypatch.setenv("CAIRN_DAEMON", "off")
    assert result.exit_code == 0, result.output
    ranked = json.loads(result.stdout)
    assert ranked["ranker"] == "cairn-fallback"
    return [m["id"] for m in ranked["memories"]]


def reopen(monkeypatch, **env: str) -> None:
    """Point cairn at other stores (a fresh CAIRN_HOME or database URLs), as a new process would."""
    from cairn_cli import db
    from cairn_cli.commands import _common

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    db.close_all()
    _common._globals.clear()


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


# -- forget by id -------------------------------------------------------------------------------------------------


def test_forget_by_id_deletes_the_memory_its_deliveries_merges_vectors_evidence_and_its_text_elsewhere(
    store, cli, cairn_home
):
    from cairn_cli.clock import utcnow
    from cairn_cli.db.tables import EvidenceApplied, HookState, Memory, MemoryDelivery, MemoryMerge, MemoryVector

    text = "Rotate the billing webhook secret through the vault-rotor job every quarter"
    mid = add(cli, text, "--keywords", "billing", "--scope", "webshop")
    assert add(cli, text, "--keywords", "rotation", "--scope", "webshop") == mid  # merged: a merge record
    MemoryVector.create(memory_id=mid, embedding_model="learned-e1", embedding=b"\0" * 16, memory_updated_at=utcnow())
    shown = prompt(cli, "s1", "how is the billing webhook secret rotated with vault-rotor?")
    assert mid in shown
    stop(cli, "s1", "Done. " + cm(rg=[f"{i}:{3 if i == mid else 0}" for i in shown], cu=[mid]))
    assert cli("train-reranker", "--export").exit_code == 0  # the memory's text in exported training data
    silver = cairn_home / "training_data" / "relevance_silver.jsonl"
    assert text in silver.read_text()
    other = next(i for i in shown if i != mid)
    counts = {
        "deliveries": MemoryDelivery.select().where(MemoryDelivery.memory_id == mid).count(),
        "merges": MemoryMerge.select().where(MemoryMerge.memory_id == mid).count(),
        "vectors": MemoryVector.select().where(MemoryVector.memory_id == mid).count(),
        "evidence": EvidenceApplied.select().where(EvidenceApplied.memory_id == mid).count(),
    }
    assert counts == {"deliveries": 1, "merges": 1, "vectors": 1, "evidence": 1}

    # an unknown id among the ids: a clear error, exit 1, nothing deleted
    result = cli("forget", mid, 987654)
    assert result.exit_code == 1 and "987654" in result.output, result.output
    assert Memory.get_or_none(Memory.id == mid) is not None
    assert MemoryDelivery.select().where(MemoryDelivery.memory_id == mid).count() == 1

    report = forget(cli, mid)
    assert report["dry_run"] is False and report["memories"] == [mid]
    assert {k: report[k] for k in counts} == counts
    assert Memory.get_or_none(Memory.id == mid) is None
    assert MemoryDelivery.select().where(MemoryDelivery.memory_id == mid).count() == 0
    assert MemoryMerge.select().where(MemoryMerge.memory_id == mid).count() == 0
    assert MemoryVector.select().where(MemoryVector.memory_id == mid).count() == 0
    assert EvidenceApplied.select().where(EvidenceApplied.memory_id == mid).count() == 0
    delivered = [i for h in HookState.select() for i in (h.data or {}).get("delivered", [])]
    assert mid not in delivered and other in delivered  # only the forgotten id left the turn's list
    assert MemoryDelivery.select().where(MemoryDelivery.memory_id == other).count() == 1
    result = cli("memory", "show", mid)
    assert result.exit_code == 1 and f"no memory with id {mid}" in result.output
    # its text is gone from the training export and from the stores' files (SQLite compacted) and tables
    assert text not in silver.read_text() and json.loads(silver.read_text().splitlines()[0])
    assert stored_anywhere(cairn_home, "vault-rotor job every quarter") == []
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 18


def test_forget_by_id_leaves_the_text_of_other_memories_alone(cli):
    """Issue #28: forgetting by id purges the memory's text from deliveries, hook state, merges, the spool and
    exported training data; only `--pattern` also removes matching text wherever else it is. Another memory that
    happens to contain the forgotten memory's (short) text keeps its own text."""
    short = add(cli, "Run make test", "--scope", "webshop")
    other = add(cli, "Always run make test before pushing to main", "--scope", "webshop")
    report = forget(cli, short)
    assert report["memories"] == [short]
    shown = json.loads(cli("memory", "show", other, "--json").stdout)
    assert shown["content"] == "Always run make test before pushing to main"
    assert other not in report["purged"]["memories"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        ((), 2, "nothing to forget"),
        (("--pattern", "  "), 2, "the pattern is empty"),
        (("--pattern", "acme("), 2, "not a regular expression"),
        (("--scope", "no-such-scope"), 0, "forgot 0 memories"),
    ],
)
def test_forget_refuses_what_names_nothing(store, cli, args, code, message):
    result = cli("forget", *args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 18


# -- forget --pattern ---------------------------------------------------------------------------------------------


def test_forget_pattern_removes_the_name_from_every_row_and_every_file_under_cairn_home(store, cli, cairn_home):
    from cairn_cli.core.hooks import spool
    from cairn_cli.db.tables import Memory, ReplayCall
    from cairn_cli.files import append_log

    named = add(cli, f"{NAME} owns the billing cron; page them before changing its schedule", "--scope", "webshop")
    by_keyword = add(cli, "The on-call rota lives in the ops wiki", "--keywords", NAME.upper())
    shown = prompt(cli, "s1", f"ask {NAME} why the billing cron schedule failed last night")
    assert named in shown
    stop(cli, "s1", f"I asked {NAME.lower()}. " + cm(rg=[f"{i}:{3 if i == named else 1}" for i in shown]))
    assert cli("train-reranker", "--export").exit_code == 0
    spool.write(
        str(cairn_home),
        {
            "turn": 1,
            "payload": {"session_id": "s9", "hook_event_name": "Stop", "last_assistant_message": f"Ask {NAME} first"},
            "error": "OperationalError: database is locked",
        },
    )
    append_log(cairn_home / "logs" / "hook.log", f"prompt hook failed: could not rank 'who is {NAME}?'")
    ReplayCall.create(
        key="k" * 64,
        backend="command",
        model="m",
        role="judge",
        answer=f"{NAME} wins",
        input_tokens=9,
        output_tokens=2,
        run_id="r1",
    )
    before = files_holding(cairn_home, NAME)
    for place in ("training_data/relevance_silver.jsonl", "logs/hook.log"):
        assert place in before
    assert any(p.startswith("spool/") for p in before)
    assert stored_anywhere(cairn_home, NAME)

    # a dry run counts and changes nothing
    dry = forget(cli, "--pattern", NAME, "--dry-run")
    assert dry["dry_run"] is True and dry["memories"] == [named, by_keyword]
    delivered = len({named, by_keyword} & set(shown))
    assert dry["deliveries"] == delivered and dry["learners_trained_on_forgotten_text"] == []
    for place in ("memory_deliveries", "hook_state", "spool", "logs", "files", "replay_calls"):
        assert dry["purged"]["replaced"].get(place, 0) >= 1, (place, dry["purged"])
    assert files_holding(cairn_home, NAME) == before
    assert Memory.get_or_none(Memory.id == named) is not None
    assert stored_anywhere(cairn_home, NAME)

    report = forget(cli, "--pattern", NAME)
    assert report["memories"] == [named, by_keyword] and report["deliveries"] == delivered
    assert report["notes"] == []  # compacted: SQLite's files rebuilt, PostgreSQL vacuumed
    assert Memory.select().where(Memory.id.in_([named, by_keyword])).count() == 0
    assert stored_anywhere(cairn_home, NAME) == []
    assert stored_anywhere(cairn_home, "zanzibar") == [] and stored_anywhere(cairn_home, "quokka") == []
    # what held the name is still well-formed: the spooled Stop still waits, a placeholder where the name was
    (waiting,) = spool.waiting(str(cairn_home))
    record = json.loads(Path(waiting.path).read_text())
    assert record["payload"]["last_assistant_message"] == "Ask [redacted:forgotten] first"
    assert stat.S_IMODE(os.stat(waiting.path).st_mode) == 0o600
    silver = (cairn_home / "training_data" / "relevance_silver.jsonl").read_text().splitlines()
    assert silver and all(json.loads(line) for line in silver)
    assert len(json.loads(cli("memory", "list", "--json").stdout)) == 18
    # forgetting is audited by counts, never the pattern
    from cairn_cli.db.tables import MachineState

    audit = MachineState.get_by_id("privacy_forget")
    assert audit.value["memories"] == 2 and NAME.lower() not in json.dumps(audit.history).lower()


# -- forget --scope -----------------------------------------------------------------------------------------------


def test_forget_scope_and_scope_with_pattern(cli, cairn_home):
    alpha = [
        add(cli, "Alpha builds run on the blue runner pool", "--scope", "alpha"),
        add(cli, "Alpha releases are signed by the Kestrel-Ferry service", "--scope", "alpha"),
    ]
    beta = [
        add(cli, "Beta stores uploads in the cold bucket", "--scope", "beta"),
        add(cli, "Beta deploys go through the Kestrel-Ferry gate", "--scope", "beta"),
        add(cli, "Beta logs rotate daily", "--keywords", "kestrel-ferry", "--scope", "beta"),
    ]
    kept = add(cli, "Gamma owns the search cluster", "--scope", "gamma")

    def ids(scope=None):
        listed = json.loads(cli("memory", "list", "--json", *(["--scope", scope] if scope else [])).stdout)
        return sorted(m["id"] for m in listed)

    dry = forget(cli, "--scope", "beta", "--pattern", "kestrel-ferry", "--dry-run")
    assert dry["memories"] == beta[1:] and ids("beta") == sorted(beta)

    report = forget(cli, "--scope", "beta", "--pattern", "kestrel-ferry")
    assert report["memories"] == beta[1:]
    assert ids("beta") == [beta[0]] and ids("alpha") == sorted(alpha)
    # the alpha memory that matches is kept (not of the scope), the matching text in it is not
    shown = json.loads(cli("memory", "show", alpha[1], "--json").stdout)
    assert shown["content"] == "Alpha releases are signed by the [redacted:forgotten] service"

    report = forget(cli, "--scope", "alpha")
    assert report["memories"] == sorted(alpha)
    assert ids() == sorted([beta[0], kept])
    assert stored_anywhere(cairn_home, "blue runner pool") == []


# -- a deployed learner trained on forgotten text -----------------------------------------------------------------


def test_a_learner_deployed_after_the_forgotten_memorys_labels_is_reported(store, cli):
    from cairn_cli.core.store import state

    mid = add(cli, "The nightly ledger export is written by the otter-batch worker", "--scope", "webshop")
    shown = prompt(cli, "s1", "which worker writes the nightly ledger export?")
    assert mid in shown
    # deployed before the labels: not trained on them
    state.put("learned_profile", {"version": "fusion-1"}, Settings(), by="test", reason="deployed before")
    result = cli("grade", "--session", "s1", "ok " + cm(rg=[f"{i}:{3 if i == mid else 0}" for i in shown]))
    assert result.exit_code == 0, result.output
    state.put("reranker_student", {"version": "student-7"}, Settings(), by="test", reason="trained on the labels")

    dry = forget(cli, mid, "--dry-run")
    assert [(x["learner"], x["version"]) for x in dry["learners_trained_on_forgotten_text"]] == [
        ("student", "student-7")
    ]
    result = cli("forget", mid)
    assert result.exit_code == 0, result.output
    assert "the deployed student (student-7" in result.output and "trained on" in result.output
    assert "fusion-1" not in result.output
    # its labels are gone: the next training does not see them
    from cairn_cli.core.learning.export import graded_rows

    assert all(r.memory_id != mid for r in graded_rows(Settings()))


def test_a_memory_never_labelled_taints_no_learner(store, cli):
    from cairn_cli.core.store import state

    mid = add(cli, "The ledger export is zipped before upload", "--scope", "webshop")
    prompt(cli, "s1", "is the ledger export zipped?")
    state.put("reranker_student", {"version": "student-8"}, Settings(), by="test", reason="deployed")
    assert forget(cli, mid)["learners_trained_on_forgotten_text"] == []


# -- redact --scan ------------------------------------------------------------------------------------------------


def _seed_secrets(cli, home: Path) -> int:
    """Secrets as a version before redaction stored them: in a memory (text and keywords), a merge, deliveries'
    context windows, hook state, the spool, a log and exported training data. Returns the memory's id."""
    from cairn_cli.core.store import dedup
    from cairn_cli.core.store.memories import MemoryInput
    from cairn_cli.db.tables import HookState, Memory, MemoryDelivery, MemoryMerge

    content = (
        f"The pelican-ledger billing mirror deploys with AWS key {AWS_KEY} and password={PASSWORD}; "
        f"the CI mirror job pushes with {GITHUB_TOKEN} {PRIVATE_SPAN}"
    )
    (added,) = dedup.add_memories(
        [MemoryInput(content=content, keywords=["pelican-ledger", GITHUB_TOKEN], scope="webshop")], Settings()
    )
    mid = added.id
    assert Memory.get_by_id(mid).content == content  # stored raw, as an earlier version did
    MemoryMerge.create(
        memory_id=mid,
        content=f"billing mirror key:\n{PEM}",
        keywords=["mirror"],
        scope="webshop",
        kind="fact",
        method="exact",
    )
    prompt(cli, "s1", "how does the pelican-ledger billing mirror deploy?")
    window = f"deploy the mirror with {AWS_KEY} and password={PASSWORD}\n{PEM}\n{PRIVATE_SPAN}"
    assert MemoryDelivery.update(context_window=window).execute() >= 1
    for row in HookState.select():
        data = {**row.data, "prompt": f"use {GITHUB_TOKEN} and password={PASSWORD} {PRIVATE_SPAN}"}
        HookState.update(data=data).where(HookState.id == row.id).execute()
    record = {
        "version": 1,
        "turn": 1,
        "payload": {"session_id": "s7", "hook_event_name": "Stop", "last_assistant_message": f"key {AWS_KEY}\n{PEM}"},
        "error": "OperationalError: database is locked",
    }
    (home / "spool").mkdir(mode=0o700, exist_ok=True)
    with open(home / "spool" / "stop-1700000000000000000-1.json", "w") as fh:
        json.dump(record, fh)
    (home / "logs").mkdir(mode=0o700, exist_ok=True)
    with open(home / "logs" / "hook.log", "a") as fh:
        fh.write(f"2024-01-01T00:00:00 prompt failed: token {GITHUB_TOKEN} password={PASSWORD} {AWS_KEY}\n")
    (home / "training_data").mkdir(mode=0o700, exist_ok=True)
    with open(home / "training_data" / "relevance_silver.jsonl", "w") as fh:
        fh.write(json.dumps({"query": f"key {AWS_KEY}", "memory": content, "grade": 3}) + "\n")
    return mid


def test_redact_scan_finds_stored_secrets_redacts_them_in_place_audited_and_idempotent(
    store, cli, cairn_home, monkeypatch
):
    from cairn_cli.db.tables import MachineState, Memory

    mid = _seed_secrets(cli, cairn_home)
    for secret in SECRETS:
        assert stored_anywhere(cairn_home, secret), secret

    dry = scan(cli, "--dry-run")
    assert dry["dry_run"] is True and dry["secrets"] >= 15
    for kind in ("aws-key", "github-token", "secret", "private-key", "private"):
        assert dry["kinds"].get(kind, 0) >= 1, (kind, dry["kinds"])
    for place in ("memories", "memory_merges", "memory_deliveries", "hook_state", "spool", "logs", "files"):
        assert dry["replaced"].get(place, 0) >= 1, (place, dry["replaced"])
    assert dry["memories"] == [mid]
    for secret in SECRETS:
        assert stored_anywhere(cairn_home, secret), f"the dry run removed {secret}"
    assert MachineState.get_or_none(MachineState.key == "privacy_scan") is None

    done = scan(cli)
    assert done["dry_run"] is False and done["secrets"] == dry["secrets"] and done["kinds"] == dry["kinds"]
    for secret in SECRETS:
        assert stored_anywhere(cairn_home, secret) == [], secret
    memory = Memory.get_by_id(mid)
    assert "[redacted:aws-key]" in memory.content and "[redacted:github-token]" in memory.content
    assert "password=[redacted:secret]" in memory.content and "<private>" not in memory.content
    assert memory.keywords == ["pelican-ledger", "[redacted:github-token]"]
    log = (cairn_home / "logs" / "hook.log").read_text()
    assert "[redacted:github-token]" in log and "[redacted:aws-key]" in log
    spooled = json.loads((cairn_home / "spool" / "stop-1700000000000000000-1.json").read_text())
    assert spooled["payload"]["last_assistant_message"].startswith("key [redacted:aws-key]\n[redacted:private-key]")
    # re-indexed: its remaining words still find it, its secret no longer does
    assert mid in rank_ids(cli, "pelican-ledger billing mirror", monkeypatch)
    assert mid not in rank_ids(cli, AWS_KEY.lower(), monkeypatch)

    again = scan(cli)
    assert again["secrets"] == 0 and again["kinds"] == {} and again["memories"] == [] and again["files"] == []
    # audited once (the second scan found nothing), by counts, never the secrets
    audit = MachineState.get_by_id("privacy_scan")
    assert len(audit.history) == 1 and audit.value["secrets"] == done["secrets"]
    assert audit.history[0]["by"] == "cairn redact --scan"
    history = json.dumps(audit.history).lower()
    assert not [s for s in SECRETS if s.lower() in history]


def test_redact_scan_on_a_clean_store_finds_nothing_and_audits_nothing(store, cli):
    from cairn_cli.db.tables import MachineState

    prompt(cli, "s1", "how should prices be stored for the checkout?")
    report = scan(cli)
    assert report["secrets"] == 0 and report["replaced"] == {}
    assert MachineState.get_or_none(MachineState.key == "privacy_scan") is None
    result = cli("redact", "--scan", "some text")
    assert result.exit_code == 2 and "--scan reads the stores" in result.output


# -- memory export / import ---------------------------------------------------------------------------------------


def test_memory_export_then_import_into_a_fresh_store_loses_nothing_a_user_wrote(
    store, cli, backend, tmp_path, monkeypatch, request
):
    from cairn_cli.core.store.editing import EXPORT_FIELDS

    ops = {
        "content": "Käse und Brot: the canteen menu is in the ops wiki 🧀",
        "keywords": ["canteen", "menü"],
        "scope": "ops",
        "kind": "preference",
        "source_ref": "gen-v3",
        "session_id": "sess-42",
    }
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps(ops, ensure_ascii=False) + "\n", encoding="utf-8")
    assert cli("memory", "import", first).exit_code == 0
    add(cli, "Use make lint before pushing", "--keywords", "lint", "--scope", "webshop", "--kind", "procedure")
    add(cli, "Use make lint before pushing", "--keywords", "ruff", "--scope", "webshop")  # keywords unioned

    def entries() -> set[tuple]:
        listed = json.loads(cli("memory", "list", "--json").stdout)
        return {tuple(tuple(m[f]) if f == "keywords" else m[f] for f in EXPORT_FIELDS) for m in listed}

    original = entries()
    assert len(original) == 20
    out = tmp_path / "export" / "memories.jsonl"
    out.parent.mkdir()
    result = cli("memory", "export", "--out", out)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 20 and all(set(line) <= set(EXPORT_FIELDS) for line in lines)
    lint = next(line for line in lines if line["content"] == "Use make lint before pushing")
    assert lint == {
        "content": "Use make lint before pushing",
        "keywords": ["lint", "ruff"],
        "scope": "webshop",
        "kind": "procedure",
    }
    stdout = cli("memory", "export", "--scope", "ops")
    assert stdout.exit_code == 0 and [json.loads(line) for line in stdout.stdout.splitlines()] == [ops]

    # a fresh store: another home, and on PostgreSQL two new databases
    env = {"CAIRN_HOME": str(tmp_path / "fresh-home")}
    if backend == "postgresql":
        server = request.getfixturevalue("pg_server")
        env.update(CAIRN_DB_URL=server.create_database("fresh"), CAIRN_EPHEMERAL_DB_URL=server.create_database("fe"))
    reopen(monkeypatch, **env)
    result = cli("memory", "import", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 20
    assert entries() == original


def test_memory_add_splits_its_comma_separated_keywords_so_that_the_export_holds_each(cli, tmp_path):
    """`memory add --keywords a,b` (its help: "Comma-separated keywords") stores two keywords, which the export
    writes as a list of two."""
    mid = add(cli, "Use make lint before pushing", "--keywords", "ruff,pre-push", "--scope", "webshop")
    assert json.loads(cli("memory", "show", mid, "--json").stdout)["keywords"] == ["ruff", "pre-push"]
    (line,) = cli("memory", "export").stdout.splitlines()
    assert json.loads(line)["keywords"] == ["ruff", "pre-push"]


def test_memory_export_leaves_superseded_memories_out_unless_all(cli):
    old = add(cli, "Deploy from the release branch", "--scope", "webshop")
    new = add(cli, "Deploy from a tagged release", "--scope", "webshop")
    assert cli("memory", "supersede", old, new).exit_code == 0
    contents = [json.loads(line)["content"] for line in cli("memory", "export").stdout.splitlines()]
    assert contents == ["Deploy from a tagged release"]
    contents = [json.loads(line)["content"] for line in cli("memory", "export", "--all").stdout.splitlines()]
    assert contents == ["Deploy from the release branch", "Deploy from a tagged release"]


# -- memory edit --------------------------------------------------------------------------------------------------


def test_memory_edit_keeps_the_old_text_as_a_merge_reindexes_and_forget_removes_both(
    store, cli, cairn_home, monkeypatch
):
    from cairn_cli.db.tables import Memory, MemoryMerge

    old = "Ship the storefront with make heron-launch from the release branch"
    mid = add(cli, old, "--keywords", "heron", "--scope", "webshop")
    assert mid in rank_ids(cli, "heron-launch", monkeypatch)

    new = f"Ship the storefront with make osprey-deploy from main; the mirror pushes with {GITHUB_TOKEN}"
    result = cli("memory", "edit", mid, "--content", new, "--keywords", "ship,osprey", "--json")
    assert result.exit_code == 0, result.output
    edited = json.loads(result.stdout)
    assert edited["content"] == new.replace(GITHUB_TOKEN, "[redacted:github-token]")
    assert edited["keywords"] == ["ship", "osprey"] and edited["embedding_model"] == "hashing"
    shown = json.loads(cli("memory", "show", mid, "--json").stdout)
    assert [(m["method"], m["content"], m["keywords"]) for m in shown["merges"]] == [("edit", old, ["heron"])]
    assert GITHUB_TOKEN not in json.dumps(shown) and stored_anywhere(cairn_home, GITHUB_TOKEN) == []
    # the full-text index follows: found by a new word, no longer by a removed one
    assert mid in rank_ids(cli, "osprey-deploy", monkeypatch)
    assert mid not in rank_ids(cli, "heron-launch", monkeypatch)

    # keywords alone
    result = cli("memory", "edit", mid, "--keywords", "ship,osprey,storefront", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["keywords"] == ["ship", "osprey", "storefront"]
    assert MemoryMerge.select().where(MemoryMerge.memory_id == mid).count() == 2

    # a text that is mostly secret is refused: exit 2, nothing changes
    before = Memory.get_by_id(mid).content
    result = cli("memory", "edit", mid, "--content", f"{GITHUB_TOKEN} {AWS_KEY}")
    assert result.exit_code == 2 and "mostly a secret" in result.output
    assert Memory.get_by_id(mid).content == before
    assert MemoryMerge.select().where(MemoryMerge.memory_id == mid).count() == 2
    result = cli("memory", "edit", mid)
    assert result.exit_code == 2 and "nothing to change" in result.output
    assert cli("memory", "edit", 987654, "--content", "some new text here").exit_code == 1

    # forget removes the memory and the old text its merge kept, from the rows and the files
    report = forget(cli, mid)
    assert report["memories"] == [mid] and report["merges"] == 2
    assert MemoryMerge.select().where(MemoryMerge.memory_id == mid).count() == 0
    assert stored_anywhere(cairn_home, "heron-launch") == [] and stored_anywhere(cairn_home, "osprey-deploy") == []
