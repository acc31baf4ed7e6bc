"""build_context_window: the cleaned recent-context window a ranking (and later a grade) is keyed by.

The window is the current prompt followed by the last CONTEXT_MAX_TURNS earlier turns of the session, newest
first ("user: ..." / "assistant: ..."), so that models that truncate long inputs keep the prompt. Tool output,
thinking, system reminders, slash-command chatter, IDE wrappers, and cairn's own injected block and [cm]
answers are dropped (cairn must never rank on its own output). Whitespace is folded; the whole is bounded by
CONTEXT_MAX_CHARS. Secrets are redacted and `<private>` spans removed (core/redact.py) from the prompt and from
each earlier turn the window keeps, before it is cut to fit: the window is what is ranked and logged. Its key is
the first 16 hex digits of its SHA-256: the same window, the same key.
`earlier` keeps the earlier pieces apart, (role, text) newest first, as the window holds them: the ranking reads the
prompt as the query and the earlier turns as context that can only add to it (core/ranking/query.py).
Stdlib only (hot path).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.core.labels.cm import strip_block
from cairn_cli.core.private import strip_private
from cairn_cli.core.redact import scrub
from cairn_cli.core.text import context_key
from cairn_cli.errors import InvalidInput, NotFound

INJECTION_TAG = "cairn-memories"

_DROP_BLOCKS = re.compile(
    r"<(system-reminder|cairn-memories|cairn-rules|cairn-ab|ide_opened_file|ide_selection|command-name|command-message|"
    r"command-args|local-command-stdout|local-command-caveat|task-notification)\b[^>]*>.*?</\1>",
    re.DOTALL | re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")


@dataclass
class ContextWindow:
    text: str
    key: str
    prompt: str
    turns_used: int = 0
    notes: list[str] = field(default_factory=list)
    earlier: list[tuple[str, str]] = field(default_factory=list)  # (role, text) after the prompt, newest first


def _dropped(text: str) -> str:
    """The text without the blocks that are not the user's or agent's own words (whitespace kept)."""
    return strip_block(_DROP_BLOCKS.sub(" ", text), " ")


def clean(text: str) -> str:
    """Drop the blocks that are not the user's or agent's own words, fold whitespace."""
    return _SPACE.sub(" ", _dropped(text)).strip()


def _kept(text: str, chars: int, max_chars: int) -> str:
    """The cleaned text as the window keeps it (at most `chars` of it), scrubbed: only the head that can be kept
    (within `max_chars`, the window's size) is scanned — a long pasted log costs the scan of its head — and before
    its whitespace is folded (a private-key block is known by its lines)."""
    return clean(_scrubbed(_dropped(text)[: max_chars + max_chars // 2 + 256]))[:chars]


@functools.lru_cache(maxsize=256)
def _scrubbed(text: str) -> str:
    """scrub, remembered: the window of the next prompt holds most of this one's earlier turns again (the daemon
    scans a turn once, not once per prompt that keeps it)."""
    return scrub(text)


def _earlier_turns(transcript_path: Path, prompt: str, max_bytes: int) -> list[tuple[str, str]]:
    """(role, text) of the main chain, oldest first, the current prompt (`prompt`: cleaned, not scrubbed) excluded;
    the texts are as the transcript holds them (the window cleans and scrubs the few it keeps: scrubbing a whole
    transcript would cost the hook)."""
    from cairn_cli.core.transcript import read_transcript

    try:
        transcript = read_transcript(transcript_path, max_bytes=max_bytes, raw=True)
    except FileNotFoundError:
        raise NotFound(f"transcript {transcript_path} does not exist", "pass a valid --transcript or omit it") from None
    except (PermissionError, IsADirectoryError, OSError) as exc:
        raise NotFound(f"cannot read transcript {transcript_path}: {exc}", "pass a readable --transcript") from None
    pieces: list[tuple[str, str]] = []
    for turn in transcript.turns():
        if turn.prompt.kind == "prompt":
            pieces.append(("user", turn.prompt.text))
        for response in turn.responses:
            if response.is_sidechain:
                continue
            pieces.append(("assistant", response.text))
    pieces = [(role, text) for role, text in pieces if clean(text)]
    if pieces and pieces[-1][0] == "user" and clean(strip_private(pieces[-1][1])) == prompt:
        pieces.pop()  # the hook may fire after the prompt was written to the transcript
    return pieces


def build_context_window(
    prompt: str,
    transcript_path: str | Path | None = None,
    *,
    max_turns: int,
    max_chars: int,
    max_bytes: int = 4_000_000,
) -> ContextWindow:
    """The cleaned, bounded window for `prompt` plus the session's last turns. Empty prompt is an error."""
    cleaned_prompt = _kept(prompt or "", max_chars, max_chars)
    if not cleaned_prompt:
        raise InvalidInput("the prompt is empty", "pass the prompt as an argument or on stdin")
    parts = [cleaned_prompt]
    pieces: list[tuple[str, str]] = []
    used = 0
    notes: list[str] = []
    if transcript_path:
        earlier = _earlier_turns(Path(transcript_path), clean(strip_private(prompt))[:max_chars], max_bytes)
        # a turn = a user prompt plus what the assistant answered; take pieces newest first
        budget = max_chars - len(cleaned_prompt)
        users_seen = 0
        for role, text in reversed(earlier):
            if budget <= 8 or users_seen >= max_turns:
                break
            text = _kept(text, budget, max_chars)
            if not text:
                continue
            piece = f"{role}: {text}"[: budget - 1]
            parts.append(piece)
            pieces.append((role, piece[len(role) + 2 :]))
            budget -= len(piece) + 1
            if role == "user":
                users_seen += 1
        used = users_seen
        if not earlier:
            notes.append("transcript had no earlier turns")
    text = " ".join(parts)
    return ContextWindow(
        text=text, key=context_key(text), prompt=cleaned_prompt, turns_used=used, notes=notes, earlier=pieces
    )


_ROLE_MARK = re.compile(r"(?:^| )(user|assistant): ")


def window_of(text: str, prompt: str | None = None) -> ContextWindow:
    """The ContextWindow a logged window `text` was ranked as (its prompt, its earlier turns), so that it can be
    ranked again exactly as the hook ranked it (the learning gate). `prompt`: the turn's prompt as hook_state kept it
    (cleaned, perhaps cut at its PROMPT_CHARS): the window starts with it, so the prompt ends where it says even
    when the prompt itself holds "user: ". Without it (or when it does not open the window) the prompt ends at the
    first " user: " / " assistant: " mark: only a prompt that quotes such a mark is then cut short. The earlier
    pieces are the marks' texts, newest first, as build_context_window joined them."""
    start = 0
    if prompt and text.startswith(prompt):
        if len(text) == len(prompt):
            return ContextWindow(text=text, key=context_key(text), prompt=text)
        start = len(prompt)  # the prompt kept whole, or its cut end: the earlier turns start at a mark after it
    first = next((m for m in _ROLE_MARK.finditer(text, start) if m.start() >= start and m.start() > 0), None)
    if first is None:
        return ContextWindow(text=text, key=context_key(text), prompt=text)
    marks = [first, *(m for m in _ROLE_MARK.finditer(text, first.end()))]
    earlier = [
        (m.group(1), text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)])
        for i, m in enumerate(marks)
    ]
    return ContextWindow(
        text=text,
        key=context_key(text),
        prompt=text[: first.start()],
        turns_used=sum(1 for role, _ in earlier if role == "user"),
        earlier=earlier,
    )
