"""Redaction against the labelled corpus (tests/data/secrets_corpus.jsonl): real-format fake secrets of every kind,
a part of them the scanners' own test fixtures, and look-alikes that are not secrets. scripts/bench_redaction.py
reports the same numbers with every miss and false positive."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cairn_cli.core.redact import redact

CORPUS = Path(__file__).parent / "data" / "secrets_corpus.jsonl"
KINDS = {
    "aws-key",
    "aws-secret",
    "gcp-key",
    "gcp-oauth-token",
    "azure-key",
    "azure-client-secret",
    "azure-sas",
    "github-token",
    "gitlab-token",
    "slack-token",
    "slack-webhook",
    "stripe-key",
    "openai-key",
    "anthropic-key",
    "huggingface-token",
    "npm-token",
    "pypi-token",
    "sendgrid-key",
    "digitalocean-token",
    "shopify-token",
    "databricks-token",
    "telegram-bot-token",
    "jwt",
    "private-key",
    "authorization",
    "url-password",
    "secret",
}
PLACEHOLDER = re.compile(r"\[redacted:([a-z0-9-]+)\]")
MIN_RECALL = 0.99
MAX_FALSE_POSITIVES = 0.01


def _rows() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


ROWS = _rows()
SECRETS = [r for r in ROWS if r["label"] == "secret"]
LOOKALIKES = [r for r in ROWS if r["label"] == "lookalike"]


@pytest.fixture(scope="module")
def redacted() -> dict[str, str]:
    """Every corpus text -> its redaction (computed once for the module)."""
    return {r["text"]: redact(r["text"])[0] for r in ROWS}


def _show(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"  {what}: {text[:150]!r}" for what, text in rows)


def test_corpus_shape():
    assert len(ROWS) >= 200
    assert len(SECRETS) >= 150
    assert len(LOOKALIKES) >= 120
    public = [r for r in ROWS if r["source"] != "written"]
    assert len(public) * 3 >= len(ROWS), f"{len(public)} of {len(ROWS)} rows from public fixtures"
    assert {r["kind"] for r in SECRETS} == KINDS
    assert len({r["text"] for r in ROWS}) == len(ROWS), "duplicate texts"
    for r in ROWS:
        assert r["label"] in ("secret", "lookalike") and r["source"], r
        if r["label"] == "secret":
            assert r["secret"] and r["secret"] in r["text"], r
        else:
            assert r["secret"] is None and r["kind"] == "none", r
            assert not PLACEHOLDER.search(r["text"]), r


def test_recall_on_secrets(redacted):
    missed = [(r["kind"], r["text"]) for r in SECRETS if r["secret"] in redacted[r["text"]]]
    recall = 1 - len(missed) / len(SECRETS)
    assert recall >= MIN_RECALL, f"recall {recall:.3f} < {MIN_RECALL}; missed {len(missed)}:\n{_show(missed)}"


def test_false_positives_on_lookalikes(redacted):
    changed = [(repr(r["text"])[:150], redacted[r["text"]]) for r in LOOKALIKES if redacted[r["text"]] != r["text"]]
    rate = len(changed) / len(LOOKALIKES)
    assert rate <= MAX_FALSE_POSITIVES, f"false positives {rate:.3f} > {MAX_FALSE_POSITIVES}:\n{_show(changed)}"


def test_caught_secrets_leave_a_typed_placeholder(redacted):
    bad = []
    for r in SECRETS:
        out = redacted[r["text"]]
        if r["secret"] in out:
            continue  # a miss: test_recall_on_secrets reports it
        kinds = PLACEHOLDER.findall(out)
        if not kinds or not set(kinds) <= KINDS:
            bad.append((f"{r['kind']} -> {kinds}", out))
    assert not bad, f"caught without a [redacted:<kind>] placeholder of a known kind:\n{_show(bad)}"


def test_redacting_twice_changes_nothing(redacted):
    moved = [(r["kind"], r["text"]) for r in ROWS if redact(redacted[r["text"]])[0] != redacted[r["text"]]]
    assert not moved, f"a second pass changed {len(moved)} rows:\n{_show(moved)}"
