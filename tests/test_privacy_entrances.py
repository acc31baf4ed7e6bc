"""Nothing secret is kept (#28): a secret of every kind the corpus holds, sent through each entrance with the real
commands, is found afterwards in no file under CAIRN_HOME (databases and their logs included) and, on PostgreSQL,
in no table; `<private>` spans are never stored; a memory that is mostly secret is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cairn_cli import hook_entry
from cairn_cli.core.hooks.payload import PROMPT_EVENT, STOP_EVENT, parse_payload
from cairn_cli.core.redact import scrub
from tests.conftest import EXAMPLES
from tests.test_hooks import prompt_payload, stop_payload

pytestmark = pytest.mark.usefixtures("backend")

CORPUS = Path(__file__).parent / "data" / "secrets_corpus.jsonl"
PRIVATE_NAME = "Zanzibar-Quokka"


def _one_per_kind() -> list[dict]:
    """The first secret of each kind in the corpus, with the text it stands in."""
    seen: dict[str, dict] = {}
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["label"] == "secret" and row["kind"] not in seen:
            seen[row["kind"]] = row
    return list(seen.values())


SECRETS = _one_per_kind()
BLOB = "\n".join(row["text"] for row in SECRETS)


def needle(secret: str) -> str:
    """What must not be found: the secret's longest run of letters and digits (a JSON column escapes the rest),
    or the secret itself when it is short."""
    runs = sorted(re.findall(r"[A-Za-z0-9]+", secret), key=len, reverse=True)
    return runs[0] if runs and len(runs[0]) >= 8 else secret


def stored_bytes(home: Path, backend: str) -> bytes:
    """Every byte under CAIRN_HOME, and on PostgreSQL every row of every table of both stores."""
    out = [p.read_bytes() for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    if backend == "postgresql":
        from cairn_cli import db

        for kind in ("memory", "ephemeral"):
            tables = db.execute(kind, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            for (table,) in tables:
                out.append(repr(db.execute(kind, f"SELECT * FROM {table}")).encode())
    return b"\n".join(out)


def survivors(home: Path, backend: str, texts: list[str] | None = None) -> list[str]:
    data = stored_bytes(home, backend).lower()
    wanted = texts if texts is not None else [needle(row["secret"]) for row in SECRETS]
    return [t for t in wanted if t.lower().encode() in data]


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def transcript_with(tmp_path: Path, user: str, assistant: str) -> Path:
    path = tmp_path / "s1.jsonl"
    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": user}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": assistant}]},
        },
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_the_corpus_gives_every_kind_to_the_entrances():
    assert len(SECRETS) >= 25 and all(needle(r["secret"]) not in scrub(r["text"]) for r in SECRETS)


def test_a_prompt_and_its_transcript_leave_no_secret(store, capsys, cairn_home, backend, tmp_path):
    transcript = transcript_with(tmp_path, f"earlier: {BLOB}", f"answer quoting {BLOB}")
    raw = prompt_payload(f"integration tests fail with connection refused; {BLOB}", transcript_path=str(transcript))
    assert hook_entry.run_prompt(raw) == 0
    out = capsys.readouterr().out
    assert '<memory id="' in out  # ranked and injected all the same
    assert survivors(cairn_home, backend) == []
    from cairn_cli.db.tables import HookState, MemoryDelivery

    window = MemoryDelivery.select().first().context_window
    assert "[redacted:aws-key]" in window and "[redacted:github-token]" in window  # ranking saw something was there
    assert "[redacted:" in HookState.select().first().data["prompt"]


def test_a_stop_keeps_no_secret_and_never_makes_one_a_memory(store, capsys, cairn_home, backend, tmp_path):
    assert hook_entry.run_prompt(prompt_payload()) == 0
    capsys.readouterr()
    cm = {
        "m": [
            {"content": f"the staging credentials: {SECRETS[0]['text']}", "keywords": ["staging"]},
            {"content": "integration tests need the staging database on port 5433", "keywords": ["tests"]},
        ]
    }
    message = f"Fixed it. {BLOB}\n[cm]{json.dumps(cm)}[/cm]"
    assert hook_entry.run_stop(stop_payload(message)) == 0
    assert survivors(cairn_home, backend) == []
    from cairn_cli.config import Settings
    from cairn_cli.core.store import memories

    contents = [m.content for m in memories.list_memories(Settings())]
    assert "integration tests need the staging database on port 5433" in contents
    assert not any("staging credentials" in c for c in contents)  # a redacted credential is not a memory
    assert "holds a redacted credential" in (cairn_home / "logs" / "hook.log").read_text()


def test_a_stop_reading_its_response_from_the_transcript_keeps_no_secret(store, capsys, cairn_home, backend, tmp_path):
    transcript = transcript_with(tmp_path, "tests fail", f"Here is what I found: {BLOB}\n[cm]{{}}[/cm]")
    assert hook_entry.run_prompt(prompt_payload(transcript_path=str(transcript))) == 0
    payload = json.loads(stop_payload(None))
    payload.pop("last_assistant_message")
    payload["transcript_path"] = str(transcript)
    assert hook_entry.run_stop(json.dumps(payload).encode()) == 0
    assert survivors(cairn_home, backend) == []


def test_memory_add_import_and_log_delivery_keep_no_secret(cli, cairn_home, backend, tmp_path):
    for row in SECRETS:
        result = cli("memory", "add", f"how the service authenticates to the vendor api: {row['text']}", "--scope", "p")
        assert result.exit_code in (0, 2), result.output  # stored redacted, or refused as mostly secret
    lines = tmp_path / "m.jsonl"
    lines.write_text(
        "\n".join(
            json.dumps(
                {"content": f"rotate quarterly, see the runbook: {r['text']}", "keywords": ["ops", r["text"][:200]]}
            )
            for r in SECRETS
        )
        + "\n"
    )
    assert cli("memory", "import", lines, "--skip-invalid").exit_code == 0
    record = {
        "session_id": "ext",
        "turn": 1,
        "context_window": f"why does auth fail {BLOB}",
        "reranker_model": "other",
        "memories": [{"id": 1, "rank": 1, "score": 0.5}],
    }
    result = cli("log-delivery", input=json.dumps(record))
    assert result.exit_code == 0, result.output
    assert cli("rank", f"why does auth fail {BLOB}", "--session", "cli").exit_code == 0
    assert survivors(cairn_home, backend) == []


def test_a_memory_that_is_mostly_secret_is_refused(cli, cairn_home, backend):
    result = cli("memory", "add", "AKIAIOSFODNN7EXAMPLE")
    assert result.exit_code == 2 and "mostly a secret" in result.output
    result = cli("memory", "add", "password: Tr0ub4dor&3xyz")
    assert result.exit_code == 2
    kept = cli("memory", "add", "the deploy reads its token from GITHUB_TOKEN=ghp_" + "a1B2" * 9 + " in the ci secrets")
    assert kept.exit_code == 0
    assert survivors(cairn_home, backend, ["AKIAIOSFODNN7EXAMPLE", "Tr0ub4dor", "a1B2a1B2a1B2"]) == []


def test_hook_log_lines_keep_no_secret(cairn_home, backend):
    """An error that quotes the payload (the wrong event, named by the payload itself) is logged scrubbed."""
    secret = "ghp_" + "Zz9Y" * 9
    raw = json.dumps({"session_id": "s1", "hook_event_name": f"Stop {secret}", "prompt": "x"}).encode()
    assert hook_entry.run_prompt(raw) == 0
    log = (cairn_home / "logs" / "hook.log").read_text()
    assert "prompt error" in log and secret not in log and "[redacted:github-token]" in log


def test_private_spans_are_never_ranked_stored_or_logged(store, capsys, cairn_home, backend, tmp_path):
    transcript = transcript_with(tmp_path, f"earlier <private>{PRIVATE_NAME} payroll</private> question", "ok")
    prompt = f"integration tests fail with connection refused <private>the client is {PRIVATE_NAME}</private>"
    assert parse_payload(prompt_payload(prompt), PROMPT_EVENT).prompt.count(PRIVATE_NAME) == 0  # before the daemon
    assert hook_entry.run_prompt(prompt_payload(prompt, transcript_path=str(transcript))) == 0
    assert '<memory id="' in capsys.readouterr().out
    message = f"Done <private>{PRIVATE_NAME} notes</private>.\n[cm]{{}}[/cm]"
    assert parse_payload(stop_payload(message), STOP_EVENT).last_assistant_message.count(PRIVATE_NAME) == 0
    assert hook_entry.run_stop(stop_payload(message)) == 0
    assert cairn_home.joinpath("logs", "hook.log").exists()
    assert survivors(cairn_home, backend, [PRIVATE_NAME]) == []


def test_a_prompt_that_is_only_private_is_not_ranked(cairn_home, backend, capsys):
    assert hook_entry.run_prompt(prompt_payload(f"<private>{PRIVATE_NAME}</private>")) == 0
    assert capsys.readouterr().out == ""
    assert "only a private span" in (cairn_home / "logs" / "hook.log").read_text()
    assert survivors(cairn_home, backend, [PRIVATE_NAME]) == []


def test_the_training_export_keeps_no_secret_a_store_from_before_holds(cli, cairn_home, backend):
    """Rows an earlier version stored with a secret in them leave the export scrubbed."""
    from cairn_cli import db
    from cairn_cli.db.tables import MemoryDelivery

    assert cli("memory", "add", "integration tests need the staging database up", "--scope", "p").exit_code == 0
    with db.transaction("ephemeral"):
        MemoryDelivery.create(
            session_id="old",
            turn=1,
            memory_id=1,
            context_window=f"why do the tests fail {BLOB}",
            context_key="k",
            rank=1,
            final_score=0.5,
            score_components={},
            reranker_model="none",
            layer="prompt",
            scope="p",
            grade=3,
        )
    assert cli("train-reranker", "--export").exit_code == 0
    exported = (cairn_home / "training_data" / "relevance_silver.jsonl").read_text().lower()
    assert "why do the tests fail" in exported
    assert [n for n in (needle(r["secret"]) for r in SECRETS) if n.lower() in exported] == []
