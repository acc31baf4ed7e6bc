"""The frozen follow-up set of #26 (scripts/followups.py): rebuilt from LoCoMo dev read in place, it is the set
scripts/followups_manifest.json froze, its follow-ups need the earlier turn, and its window is the hook's."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.conftest import ROOT, shared

SCRIPTS = ROOT / "scripts"
MANIFEST = SCRIPTS / "followups_manifest.json"


@pytest.fixture(scope="module")
def built():
    data = shared("locomo", "locomo_dev.json")
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    import followups

    return followups, followups.build(data)


def test_the_set_is_the_frozen_one(built):
    followups, items = built
    frozen = json.loads(MANIFEST.read_text())
    assert followups.differences(items, frozen) == []
    assert len(items) == frozen["count"] >= 100
    assert [it["id"] for it in items] == [it["id"] for it in frozen["items"]]
    for item, entry in zip(items, frozen["items"]):
        assert followups._digest(item) == entry["sha256"], item["id"]
        assert (item["sample_id"], item["qa_index"], item["category"], item["rule"], item["template"]) == (
            entry["sample_id"],
            entry["qa_index"],
            entry["category"],
            entry["rule"],
            entry["template"],
        )
    assert followups._digest(items) == frozen["sha256"]
    assert followups.load(shared("locomo", "locomo_dev.json")) == items


def test_it_spans_every_conversation_and_category(built):
    _, items = built
    assert {it["sample_id"] for it in items} == {
        "conv-26",
        "conv-30",
        "conv-41",
        "conv-42",
        "conv-43",
        "conv-44",
        "conv-47",
    }
    assert {it["category"] for it in items} == {1, 2, 3, 4}
    assert len({it["template"] for it in items}) >= 4


def test_the_followup_needs_the_earlier_turn(built):
    _, items = built
    for it in items:
        name = re.compile(rf"\b{re.escape(it['subject'])}\b", re.IGNORECASE)
        assert not name.search(it["followup"]), it["id"]
        assert not name.search(it["reply"]), it["id"]
        assert name.search(it["earlier"]) and name.search(it["question"]), it["id"]
        assert it["followup"] != it["question"]


def test_every_item_has_gold_evidence(built):
    _, items = built
    for it in items:
        assert it["evidence"] and len(it["evidence"]) == len(it["evidence_turns"]) >= 1, it["id"]


def test_the_manifest_holds_no_data_text(built):
    """LoCoMo is CC BY-NC: the repo holds ids and hashes, never a question or a turn."""
    _, items = built
    text = MANIFEST.read_text()
    for it in items:
        assert it["question"] not in text and it["followup"] not in text, it["id"]
    assert {k for entry in json.loads(text)["items"] for k in entry} == {
        "id",
        "sample_id",
        "qa_index",
        "category",
        "rule",
        "template",
        "sha256",
    }


def test_the_window_is_the_hooks(built, tmp_path):
    """The frozen window text is what the hook's build_context_window makes of the same session, written as Claude
    Code writes it. Should the hook's window change shape, benchmark with build_context_window over `turns`."""
    import loopdata

    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.context import build_context_window

    _, items = built
    s = Settings()
    for i, it in enumerate(items):
        path = tmp_path / f"{i}.jsonl"
        writer = loopdata.TranscriptWriter(path, f"session-{i}", f"/locomo/{it['sample_id']}")
        (_, earlier), (_, reply), (_, followup) = it["turns"]
        writer.user(earlier)
        writer.assistant([reply])
        writer.user(followup)
        window = build_context_window(followup, path, max_turns=s.CONTEXT_MAX_TURNS, max_chars=s.CONTEXT_MAX_CHARS)
        assert window.text == it["window"], it["id"]
        assert window.prompt == it["followup"] and window.turns_used == 1
