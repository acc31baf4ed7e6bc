"""`cairn memory import` embeds through the warm daemon, in batches, instead of loading a model in its own process
(200 lines took 35 s when each import loaded torch); without a daemon, or with CAIRN_DAEMON=off, it embeds in
process as before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.test_daemon import ROOT, _env, make_home, run, start, status

MODEL_MODULES = ("torch", "sentence_transformers", "transformers", "cairn_cli.ml.models")


@pytest.fixture
def home(tmp_path):
    h = make_home(tmp_path)
    yield h
    run(h, "daemon", "stop", "--force")


def _import_in_fresh_interpreter(home, path, **extra) -> tuple[dict, list[str]]:
    """(the import's --json report, the model modules the import process loaded)."""
    code = (
        "import sys, json\nfrom cairn_cli.cli import main\n"
        f"sys.argv = ['cairn', 'memory', 'import', {str(path)!r}, '--json']\nrc = 0\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    rc = exc.code\n"
        f"sys.stderr.write('\\n' + json.dumps([m for m in {MODEL_MODULES!r} if m in sys.modules]))\nsys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env(home, **extra), cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), json.loads(out.stderr.strip().splitlines()[-1])


def _jsonl(tmp_path, name, n):
    path = tmp_path / name
    path.write_text(
        "".join(
            json.dumps({"content": f"{name}: service {i} listens on port {8000 + i}", "scope": "infra"}) + "\n"
            for i in range(n)
        )
    )
    return path


@pytest.mark.slow
def test_memory_import_embeds_through_the_daemon_and_loads_no_model(home, tmp_path):
    start(home)
    report, loaded = _import_in_fresh_interpreter(home, _jsonl(tmp_path, "bulk", 300))
    assert report["added"] == 300
    assert loaded == [], "the import loaded a model in its own process"
    assert status(home)[1]["ops"].get("embed") == 2, "300 texts, 256 to a request"
    shown = json.loads(run(home, "memory", "show", str(report["ids"][-1]), "--json").stdout)
    assert shown["embedding_model"] == "hashing"
    # CAIRN_DAEMON=off: in this process, as before, even with the daemon up
    report, loaded = _import_in_fresh_interpreter(home, _jsonl(tmp_path, "local", 3), CAIRN_DAEMON="off")
    assert report["added"] == 3 and "cairn_cli.ml.models" in loaded
    assert status(home)[1]["ops"].get("embed") == 2
    shown = json.loads(run(home, "memory", "show", str(report["ids"][-1]), "--json").stdout)
    assert shown["embedding_model"] == "hashing"


@pytest.mark.slow
def test_memory_import_without_a_daemon_embeds_in_process(home, tmp_path):
    report, loaded = _import_in_fresh_interpreter(home, _jsonl(tmp_path, "alone", 3))
    assert report["added"] == 3 and "cairn_cli.ml.models" in loaded
    shown = json.loads(run(home, "memory", "show", str(report["ids"][-1]), "--json").stdout)
    assert shown["embedding_model"] == "hashing"
