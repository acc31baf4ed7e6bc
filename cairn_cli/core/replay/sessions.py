"""The sessions a replay reads: Claude Code transcripts on disk, main-agent turns only. More in docs/learning.md."""

from __future__ import annotations

import datetime as dt
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.errors import InvalidInput, NotFound

DEFAULT_DIR = "~/.claude/projects"
PROMPT_CHARS = 4000
RESPONSE_CHARS = 6000


@dataclass
class ReplayTurn:
    index: int  # the turn's position among the session's typed prompts (0-based)
    prompt: str
    response: str


@dataclass
class ReplaySession:
    id: str
    path: str
    modified: str  # ISO time of the transcript's last write
    turns: list[ReplayTurn] = field(default_factory=list)


def discover(spec: str | None, *, since: dt.datetime | None = None, limit: int | None = None) -> list[Path]:
    """Transcript files: `spec` a directory (searched recursively) or a glob; default ~/.claude/projects. Subagent
    transcripts excluded; newest first; `since` by modification time; at most `limit`."""
    raw = os.path.expanduser(spec or DEFAULT_DIR)
    if os.path.isdir(raw):
        paths = [Path(p) for p in glob.glob(os.path.join(raw, "**", "*.jsonl"), recursive=True)]
    elif any(ch in raw for ch in "*?["):
        paths = [Path(p) for p in glob.glob(raw, recursive=True)]
    elif os.path.isfile(raw):
        paths = [Path(raw)]
    else:
        raise NotFound(f"no transcripts at {raw}", "pass --transcripts DIR or a glob of Claude Code .jsonl files")
    paths = [p for p in paths if p.is_file() and "subagents" not in p.parts and not p.name.startswith("agent-")]
    if since is not None:
        paths = [p for p in paths if dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC).replace(tzinfo=None) >= since]
    paths.sort(key=lambda p: (-p.stat().st_mtime, str(p)))
    return paths[:limit] if limit else paths


def load(path: Path) -> ReplaySession:
    """The session's main-agent turns (see docs/learning.md): `<private>` spans removed; secrets are redacted (and
    counted) by the Caller, as each prompt leaves (`--no-redact` sends them as they are)."""
    from cairn_cli.core.labels.cm import strip_block
    from cairn_cli.core.private import strip_private
    from cairn_cli.core.ranking.context import clean
    from cairn_cli.core.transcript import read_transcript

    transcript = read_transcript(path, raw=True)
    turns = []
    for i, turn in enumerate(t for t in transcript.turns() if t.source == "prompt"):
        prompt = clean(strip_private(turn.prompt.text))[:PROMPT_CHARS]
        response = strip_block(strip_private("\n".join(m.text for m in turn.responses if m.text))).strip()
        response = response[:RESPONSE_CHARS]
        if prompt and response:
            turns.append(ReplayTurn(i, prompt, response))
    modified = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).replace(tzinfo=None)
    return ReplaySession(path.stem, str(path), modified.isoformat(timespec="seconds"), turns)


def sessions(spec: str | None, *, since: dt.datetime | None = None, limit: int | None = None) -> list[ReplaySession]:
    """The sessions with at least one turn (an unreadable transcript is an error naming it)."""
    out = []
    for path in discover(spec, since=since, limit=None):
        try:
            session = load(path)
        except OSError as exc:
            raise InvalidInput(f"cannot read transcript {path}: {exc}", "check the path and its permissions") from None
        if session.turns:
            out.append(session)
        if limit and len(out) >= limit:
            break
    return out
