"""`<private>…</private>` spans: what is inside is never ranked, sent to the daemon, stored or logged
(docs/privacy.md). No regular expression and nothing else imported: the prompt hook's own process strips the spans
before the prompt leaves it (the secrets are redacted where the window is built, in the warm daemon: core/redact.py)."""

from __future__ import annotations

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_OPEN, _CLOSE = "<private>", "</private>"


def same_length_lower(text: str) -> str:
    """`text` in lower case, position for position (str.lower() makes "İ" two characters: then ASCII only)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def strip_private(text: str) -> str:
    """`text` without its `<private>…</private>` spans, any case; an unclosed tag hides the rest."""
    if "<" not in text:
        return text
    lowered = same_length_lower(text)
    start = lowered.find(_OPEN)
    if start < 0:
        return text
    out, pos = [], 0
    while start >= 0:
        out += [text[pos:start], " "]
        end = lowered.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            return "".join(out)
        pos = end + len(_CLOSE)
        start = lowered.find(_OPEN, pos)
    out.append(text[pos:])
    return "".join(out)
