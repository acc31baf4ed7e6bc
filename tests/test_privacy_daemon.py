"""Nothing secret is kept, end to end with the real bundled model and a real daemon: the hooks as Claude Code runs
them (fresh interpreters, the lean entry) send a prompt holding a secret of every kind and a `<private>` span, and a
Stop whose response and [cm] block hold them too; afterwards no file under CAIRN_HOME holds any of them — the
databases, daemon.log and hook.log included — and the memories were still ranked and the turn still labelled."""

from __future__ import annotations

import json

import pytest

from tests.test_daemon import _entry_in_fresh_interpreter, deliveries, make_home, run, start
from tests.test_privacy_entrances import BLOB, PRIVATE_NAME, SECRETS, needle


@pytest.mark.slow
def test_the_real_daemon_and_hooks_keep_no_secret_and_no_private_span(tmp_path):
    h = make_home(tmp_path, "private")
    extra = {"CAIRN_EMBED_MODEL": "all-MiniLM-L6-v2"}
    try:
        start(h, **extra)
        prompt = json.dumps(
            {
                "session_id": "p1",
                "cwd": "/src/webshop",
                "hook_event_name": "UserPromptSubmit",
                "prompt": f"the integration tests fail with connection refused <private>{PRIVATE_NAME}</private> {BLOB}",
            }
        )
        rc, stdout, _ = _entry_in_fresh_interpreter(h, ["hook", "prompt"], prompt, **extra)
        assert rc == 0 and '<memory id="1"' in stdout
        cm = {"m": [f"the staging key: {SECRETS[0]['text']}", "Run make db-up before the integration tests"]}
        stop = json.dumps(
            {
                "session_id": "p1",
                "hook_event_name": "Stop",
                "last_assistant_message": f"Start Postgres first. <private>{PRIVATE_NAME}</private> {BLOB}\n"
                f"[cm]{json.dumps({**cm, 'rg': ['1:3']})}[/cm]",
            }
        )
        rc, _, _ = _entry_in_fresh_interpreter(h, ["hook", "stop"], stop, **extra)
        assert rc == 0
        row = next(d for d in deliveries(h) if d["session_id"] == "p1" and d["memory_id"] == 1)
        assert row["grade"] == 3
        listed = run(h, "memory", "list", "--json", **extra)
        contents = [m["content"] for m in json.loads(listed.stdout)]
        assert "Run make db-up before the integration tests" in contents
        assert not any("staging key" in c for c in contents)
    finally:
        run(h, "daemon", "stop", "--force")
    assert (h / "logs" / "daemon.log").exists()
    data = b"\n".join(p.read_bytes() for p in h.rglob("*") if p.is_file() and not p.is_symlink()).lower()
    left = [n for n in [PRIVATE_NAME, *(needle(r["secret"]) for r in SECRETS)] if n.lower().encode() in data]
    assert left == []
