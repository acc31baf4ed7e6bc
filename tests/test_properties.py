"""Property tests (hypothesis): the parsers cairn runs on what an agent, Claude Code or another ranker hands it never
raise anything but cairn's own error, never hang, and give back what they should."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn_cli.core.hooks.payload import PROMPT_EVENT, STOP_EVENT, parse_payload
from cairn_cli.core.labels.cm import MAX_ID, parse_cm
from cairn_cli.core.store.deliveries import parse_external
from cairn_cli.core.transcript import read_transcript
from cairn_cli.errors import CairnError

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@FAST
@given(st.text())
def test_parse_cm_never_raises_on_any_text(text):
    cm = parse_cm(text)
    assert cm.found == ("[cm]" in text.lower())


@FAST
@given(st.dictionaries(st.sampled_from(["m", "rg", "cu", "-!", "x"]), json_values, max_size=5))
def test_parse_cm_never_raises_on_any_json_in_the_block(data):
    cm = parse_cm(f"answer\n[cm]{json.dumps(data)}[/cm]")
    assert cm.found
    assert all(0 < i <= MAX_ID for i in cm.corroborate + cm.contradict)
    assert all(0 < g.memory_id <= MAX_ID and 0 <= g.grade <= 3 for g in cm.grades)


@FAST
@given(
    st.dictionaries(st.integers(1, MAX_ID), st.tuples(st.integers(0, 3), st.booleans()), max_size=8),
    st.lists(st.integers(1, MAX_ID), max_size=5, unique=True),
)
def test_well_formed_grades_and_evidence_round_trip(grades, evidence):
    items = [f"{i}:{g}{'!' if hard and g == 0 else ''}" for i, (g, hard) in grades.items()]
    cm = parse_cm("done " + "[cm]" + json.dumps({"rg": items, "cu": evidence}) + "[/cm]")
    assert {(g.memory_id, g.grade, g.hard_negative) for g in cm.grades} == {
        (i, g, hard and g == 0) for i, (g, hard) in grades.items()
    }
    assert cm.corroborate == evidence and cm.problems == []


@FAST
@given(st.binary(max_size=3000))
def test_the_transcript_reader_survives_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_bytes(data)
    transcript = read_transcript(path, max_bytes=1000)
    transcript.turns()
    transcript.last_response()


@FAST
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["user", "assistant", "x"]),
                "message": json_values,
                "uuid": json_values,
                "isSidechain": json_values,
            }
        ),
        max_size=6,
    )
)
def test_the_transcript_reader_survives_any_json_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    read_transcript(path).last_response()


@FAST
@given(st.binary(max_size=2000), st.sampled_from([PROMPT_EVENT, STOP_EVENT]))
def test_hook_payload_parsing_raises_only_cairns_error(raw, event):
    try:
        parse_payload(raw, event)
    except CairnError:
        pass


@FAST
@given(st.text(min_size=1).filter(str.strip), st.text(min_size=1).filter(str.strip))
def test_a_hook_payload_round_trips_its_session_and_prompt(session, prompt):
    payload = parse_payload(json.dumps({"session_id": session, "prompt": prompt}), PROMPT_EVENT)
    expected = session.strip().encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    assert payload.session_id == expected or (len(expected) > 200 and payload.session_id.startswith(expected[:100]))
    assert payload.prompt == prompt.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@FAST
@given(json_values)
def test_log_delivery_validation_raises_only_cairns_error(record):
    try:
        parse_external(record)
    except CairnError:
        pass


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["session_id", "turn", "context_window", "reranker_model", "memories", "layer"]),
        json_values,
        max_size=6,
    ),
    st.lists(st.dictionaries(st.sampled_from(["id", "rank", "score"]), json_values), max_size=3),
)
def test_log_delivery_validation_on_near_valid_records(record, memories):
    try:
        rows = parse_external({**record, "memories": memories})
    except CairnError:
        return
    assert all(r.memory_id > 0 and r.turn >= 0 for r in rows)


@given(st.text(), st.booleans())
def test_text_escape_is_html_escape(text, quote):
    """core/text.escape stands in for html.escape on the hot path: the same output for any text."""
    import html

    from cairn_cli.core.text import escape

    assert escape(text, quote) == html.escape(text, quote)
