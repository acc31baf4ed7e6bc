"""JSON on the prompt hook's hot path, without importing the `json` package: its import pulls in `re` and `enum`
(~7.5 ms of a hook started without `site`, launcher.py). Reading uses the C scanner `json` itself uses (CPython's
`_json`), so what it accepts and returns is json.loads' own; writing is a small encoder for the types a hook sends
(dict, list, tuple, str, int, float, bool, None), with json.dumps' output for them (tests/test_wire.py holds both to
the json package). Without `_json` (another Python), the json package does both.

Errors are json's: a malformed text raises ValueError (json.JSONDecodeError when `_json` words it), a value of
another type TypeError."""

from __future__ import annotations

try:
    import _json
except ImportError:  # pragma: no cover - not CPython
    _json = None  # type: ignore[assignment]

TYPE_CHECKING = False  # typing is not imported at run time: the hot path
if TYPE_CHECKING:
    from typing import Any

_SPACE = " \t\n\r"
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Decoding:
    """What `_json.make_scanner` reads from a JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


# typeshed types the context as a JSONDecoder's class; any object with these attributes is what the C code reads
_scan = _json.make_scanner(_Decoding()) if _json is not None else None  # type: ignore[arg-type]


def loads(text: str | bytes) -> Any:
    """json.loads for a str (or UTF-8 bytes): one JSON value, whitespace around it allowed, nothing after it."""
    if _scan is None:  # pragma: no cover - not CPython
        import json

        return json.loads(text)
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_SPACE):
        raise ValueError(f"Extra data: char {end + len(text[end:]) - len(text[end:].lstrip(_SPACE))}")
    return value


def dumps(value: object, *, ensure_ascii: bool = True) -> str:
    """json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii) for dict, list, tuple, str, int,
    float, bool and None (dict keys: str, int, float, bool or None, as json converts them)."""
    if _json is None:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii)
    out: list[str] = []
    _write(value, out, _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring, set())
    return "".join(out)


def _number(value: int | float) -> str:
    if isinstance(value, int):
        return int.__repr__(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, (int, float)):
        return _number(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _write(value: object, out: list[str], text, seen: set[int]) -> None:
    if isinstance(value, str):
        out.append(text(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(_number(value))
    elif isinstance(value, (dict, list, tuple)):
        if id(value) in seen:
            raise ValueError("Circular reference detected")
        seen.add(id(value))
        if isinstance(value, dict):
            out.append("{")
            for i, (key, item) in enumerate(value.items()):
                out.append(("," if i else "") + text(_key(key)) + ":")
                _write(item, out, text, seen)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _write(item, out, text, seen)
            out.append("]")
        seen.discard(id(value))
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
