"""The domain's ids as stored: a session id (clean text, bounded length), a turn number (a 32-bit integer), the
global scope.
Stdlib only: the prompt hook's hot path cleans its payload with these."""

from __future__ import annotations

MAX_TURN = 2**31 - 1  # a turn number the databases store as a 32-bit integer
MAX_SESSION_CHARS = 200  # what the session_id columns hold
GLOBAL_SCOPE = "global"  # the scope every scope sees: memories for no project in particular


def clean_text(text: str) -> str:
    """`text` without lone surrogates (a `\\ud800` in a hook's JSON): they cannot be encoded, stored or sent to the
    daemon, so each becomes U+FFFD instead of losing the whole turn."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def session_key(session_id: str) -> str:
    """The session id as stored: clean text, and at most MAX_SESSION_CHARS (a longer one keeps its start and gets
    a hash of the whole, so that it stays unique and the Stop finds the turns its prompt logged)."""
    session_id = clean_text(session_id)
    if len(session_id) <= MAX_SESSION_CHARS:
        return session_id
    import hashlib

    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:16]
    return f"{session_id[: MAX_SESSION_CHARS - 17]}~{digest}"
