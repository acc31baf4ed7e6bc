"""cairn_cli/wire.py: the hot path's JSON gives json's own answers, value for value and byte for byte."""

from __future__ import annotations

import json
import math
import random

import pytest

from cairn_cli import wire

TEXTS = [
    "",
    "plain",
    'quote " backslash \\ slash /',
    "control \x00\x01\x1f\t\n\r\b\f",
    "naïve café — ümlaut ÿ",
    "emoji 🧭 and CJK 漢字",
    "lone surrogate \ud800 here",
    "\u2028 line separators \u2029",
    '<cairn-memories>\n<memory id="3">x</memory>',
]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice(TEXTS) + str(rng.random())
    if kind == 1:
        return rng.randrange(-(10**20), 10**20)
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e-300, 1e300, 0.1, rng.uniform(-1e6, 1e6), 5e-324])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice(TEXTS)
    if kind == 5:
        return rng.randrange(-5, 5)
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {rng.choice(TEXTS) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(40))
def test_dumps_is_json_dumps_compact_and_loads_is_json_loads(seed):
    rng = random.Random(seed)
    value = {"op": "rank", "seed": seed, "payload": _value(rng), "more": [_value(rng) for _ in range(5)]}
    for ascii_only in (True, False):
        text = wire.dumps(value, ensure_ascii=ascii_only)
        assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
        assert wire.loads(text) == json.loads(text)
    ascii_text = wire.dumps(value)
    assert json.dumps(wire.loads(ascii_text.encode())) == json.dumps(json.loads(ascii_text))  # the socket's bytes


def test_what_json_accepts_reads_the_same():
    for text in [
        '  {"a": [1, 2.5, -3e2, true, false, null], "b": {"c": "\\u00e9\\ud83e\\udded"}}\n',
        "[]",
        "0",
        '"x"',
        "\t\r\n  [1]  \n",
        "[NaN, Infinity, -Infinity]",
        '{"dup": 1, "dup": 2}',
        "123456789012345678901234567890",
    ]:
        got, want = wire.loads(text), json.loads(text)
        assert json.dumps(got) == json.dumps(want), text
    assert math.isnan(wire.loads("NaN"))


def test_non_finite_and_odd_keys_write_as_json_writes_them():
    value = {3: float("nan"), 2.5: float("inf"), True: float("-inf"), None: [], "s": ()}
    assert wire.dumps(value) == json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize(
    "text",
    ["", "   ", "{", '{"a":1,}', "[1 2]", '{"a" 1}', "[1] [2]", "tru", '"unterminated', '"bad \\x escape"', "\ufeff[]"],
)
def test_what_json_refuses_is_a_value_error(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        wire.loads(text)


def test_what_json_cannot_write_is_refused_as_json_refuses_it():
    for bad in ({1, 2}, object(), b"bytes", {("a",): 1}):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            wire.dumps(bad)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        wire.dumps(loop)
    shared = [1]
    assert wire.dumps([shared, shared]) == "[[1],[1]]"  # the same list twice is no loop
