"""The [cm] block parser: well-formed items apply, malformed ones are reported and skipped."""

import pytest

from cairn_cli.core.labels.cm import parse_cm, parse_grade, strip_block


def test_full_block_parses_every_field():
    text = (
        'Done, the proxy forwards to 8080.\n[cm]\n{"m": [{"content": "The api proxy forwards to port 8080; '
        'check nginx.conf first", "keywords": ["proxy", "port"], "scope": "webshop", "kind": "fact"}], '
        '"rg": ["12:3", "15:0!", "7:1"], "cu": [12], "-!": ["#4"]}\n[/cm]'
    )
    cm = parse_cm(text, source_ref="gen-v3", session_id="s1")
    assert cm.found and cm.problems == []
    assert [(g.memory_id, g.grade, g.hard_negative) for g in cm.grades] == [
        (12, 3, False),
        (15, 0, True),
        (7, 1, False),
    ]
    assert cm.corroborate == [12] and cm.contradict == [4]
    (m,) = cm.memories
    assert m.scope == "webshop" and m.source_ref == "gen-v3" and m.session_id == "s1" and "proxy" in m.keywords


def test_fenced_block_without_closing_tag_and_plain_string_memory():
    cm = parse_cm('answer\n[cm]\n```json\n{"m": ["use uv, not pip, in this repo"], "rg": ["3:2"]}\n```')
    assert cm.problems == [] and cm.memories[0].content == "use uv, not pip, in this repo"
    assert cm.grades[0].grade == 2


def test_a_block_written_html_escaped_as_gemini_showed_the_rules_is_read():
    """Gemini CLI escapes `"`, `<` and `>` in what a hook injects; a model may write its block that way."""
    cm = parse_cm(
        "ok\n[cm]{&quot;m&quot;: [{&quot;content&quot;: &quot;wrap &lt;Form&gt; in a Suspense&quot;}], "
        "&quot;rg&quot;: [&quot;3:2&quot;]}[/cm]"
    )
    assert cm.problems == [] and cm.memories[0].content == "wrap <Form> in a Suspense"
    assert [(g.memory_id, g.grade) for g in cm.grades] == [(3, 2)]
    assert parse_cm('[cm]{"m": ["keep &lt;br&gt; as typed"]}[/cm]').memories[0].content == "keep &lt;br&gt; as typed"


def test_malformed_items_are_reported_and_the_rest_applies():
    cm = parse_cm(
        '[cm]{"m": [{"content": ""}, {"content": "ok memory"}], "rg": ["12:7", "x:1", "3:2!", 5, "9:0"],'
        ' "cu": ["abc", 2, true], "zz": 1}[/cm]'
    )
    assert [g.memory_id for g in cm.grades] == [9]
    assert [m.content for m in cm.memories] == ["ok memory"]
    assert cm.corroborate == [2]
    text = " | ".join(cm.problems)
    for needle in ("outside 0-3", "'x:1'", "hard negative", "m[0]", "'abc'", "'zz'"):
        assert needle in text


def test_no_block_and_garbage_block():
    assert not parse_cm("just an answer").found
    cm = parse_cm("[cm] not json at all")
    assert cm.found and cm.grades == [] and "not JSON" in cm.problems[0]
    assert parse_cm("[cm][1, 2][/cm]").problems == ["[cm] block must hold one JSON object"]


def test_last_block_wins_and_conflicts_cancel():
    cm = parse_cm('[cm]{"rg": ["1:0"]}[/cm] later [cm]{"rg": ["1:3"], "cu": [5], "-!": [5, 6]}[/cm]')
    assert [(g.memory_id, g.grade) for g in cm.grades] == [(1, 3)]
    assert cm.corroborate == [] and cm.contradict == [6] and "both corroborated" in cm.problems[0]


def test_dict_grade_and_strip_block():
    assert parse_grade({"id": 4, "grade": 0, "hard_negative": True}).hard_negative
    with pytest.raises(ValueError):
        parse_grade({"id": "4", "grade": 1})
    assert strip_block('The fix is X.\n[cm]{"rg": ["1:3"]}[/cm]') == "The fix is X."
