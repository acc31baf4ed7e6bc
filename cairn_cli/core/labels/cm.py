"""The agent's `[cm]` block: new memories, relevance grades (rg), corroborations (cu) and contradictions (-!).

Specified in docs/cm-block.md. Parsing is tolerant: the last `[cm]` block of the response is read, each malformed
item is reported as a problem and skipped, and everything that is well formed still applies. Never raises on
the agent's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn_cli.errors import InvalidInput

if TYPE_CHECKING:
    from cairn_cli.core.store.memories import MemoryInput

_BLOCK = re.compile(r"\[cm\](.*?)(?:\[/cm\]|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$")
# ids and grades are ASCII digits only: int() would read "١٦" or "１６" as 16 and grade a memory nobody named
_GRADE = re.compile(r"^\s*#?([0-9]+)\s*:\s*(-?[0-9]+)\s*(!?)\s*$", re.ASCII)
_ID = re.compile(r"^\s*#?([0-9]+)\s*$", re.ASCII)
MAX_GRADE = 3
MAX_ID = 2**63 - 1  # a database row id; anything larger cannot name a memory (and overflows the driver)


@dataclass(frozen=True)
class Grade:
    memory_id: int
    grade: int
    hard_negative: bool


@dataclass
class CmBlock:
    found: bool = False
    memories: list[MemoryInput] = field(default_factory=list)
    grades: list[Grade] = field(default_factory=list)
    corroborate: list[int] = field(default_factory=list)
    contradict: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "found": self.found,
            "memories": [m.content for m in self.memories],
            "grades": [
                {"memory_id": g.memory_id, "grade": g.grade, "hard_negative": g.hard_negative} for g in self.grades
            ],
            "corroborate": self.corroborate,
            "contradict": self.contradict,
            "problems": self.problems,
        }


def strip_block(text: str, sep: str = "") -> str:
    """The text without its [cm] block(s), each replaced by `sep`: what engagement detection reads, and what a
    context window keeps of an earlier answer."""
    return _BLOCK.sub(sep, text or "").strip()


def parse_grade(item: object) -> Grade:
    """`"12:3"`, `"15:0!"` (hard negative), or `{"id": 12, "grade": 3, "hard_negative": false}`."""
    if isinstance(item, dict):
        mid, grade, hard = item.get("id"), item.get("grade"), bool(item.get("hard_negative", False))
        if not isinstance(mid, int) or isinstance(mid, bool) or not isinstance(grade, int) or isinstance(grade, bool):
            raise ValueError(f"grade item {json.dumps(item)[:60]} needs an integer id and grade")
    elif isinstance(item, str):
        m = _GRADE.match(item)
        if not m:
            raise ValueError(f'grade item {item[:40]!r} is not "id:grade" (e.g. "12:3" or "15:0!")')
        mid, grade, hard = int(m.group(1)), int(m.group(2)), bool(m.group(3))
    else:
        raise ValueError(f'grade item {item!r:.40} is not a string "id:grade"')
    if memory_id(mid) is None:
        raise ValueError(f"grade item: {str(mid)[:30]!r} is not a memory id")
    if not 0 <= grade <= MAX_GRADE:
        raise ValueError(f"grade {str(grade)[:30]} for memory {mid} is outside 0-{MAX_GRADE}")
    if hard and grade != 0:
        raise ValueError(f"memory {mid}: a hard negative (!) must have grade 0, got {grade}")
    return Grade(mid, grade, hard)


def memory_id(item: object) -> int | None:
    """A memory id from the agent: a positive integer (or its ASCII-digit string, `#` allowed) a row id can be."""
    if isinstance(item, bool):
        return None
    if isinstance(item, str):
        m = _ID.match(item)
        item = int(m.group(1)) if m else None
    return item if isinstance(item, int) and 0 < item <= MAX_ID else None


def _ids(value: object, key: str, problems: list[str]) -> list[int]:
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        mid = memory_id(item)
        if mid is None:
            problems.append(f"{key}: {str(item)[:40]!r} is not a memory id")
        else:
            out.append(mid)
    return list(dict.fromkeys(out))


def _load(body: str) -> object:
    body = _FENCE.sub("", body.strip())
    try:
        return _decode(body)
    except ValueError:
        if "&" not in body:
            raise
    # Gemini CLI hands the model cairn's rules with `"`, `<` and `>` escaped (`{&quot;m&quot;: …}`); a model that
    # writes its block the way it read the example is understood
    import html

    return _decode(html.unescape(body))


def _decode(body: str) -> object:
    start = 0 if body[:1] in "{[" else body.find("{")
    if start < 0 or not body:
        raise ValueError("no JSON object after [cm]")
    obj, _ = json.JSONDecoder().raw_decode(body[start:])
    return obj


def parse_cm(text: str, *, source_ref: str | None = None, session_id: str | None = None) -> CmBlock:
    """Parse the last [cm] block of `text`. Problems are collected, never raised."""
    blocks = _BLOCK.findall(text or "")
    out = CmBlock()
    if not blocks:
        return out
    out.found = True
    try:
        data = _load(blocks[-1])
    except ValueError as exc:
        out.problems.append(f"[cm] block is not JSON: {str(exc)[:80]}")
        return out
    if not isinstance(data, dict):
        out.problems.append("[cm] block must hold one JSON object")
        return out
    for key in sorted(set(data) - {"m", "rg", "cu", "-!"}):
        out.problems.append(f"unknown [cm] key {key!r} ignored (known: m, rg, cu, -!)")
    raw_memories = data.get("m", [])
    for i, entry in enumerate(raw_memories if isinstance(raw_memories, list) else [raw_memories]):
        if isinstance(entry, str):
            entry = {"content": entry}
        if isinstance(entry, dict):
            entry = {k: v for k, v in entry.items() if k in ("content", "keywords", "scope", "kind", "source_ref")}
            entry.setdefault("session_id", session_id)
        try:
            from cairn_cli.core.redact import holds_placeholder
            from cairn_cli.core.store.memories import validate_entry  # the write path's, not the hook's

            memory = validate_entry(entry, default_source_ref=source_ref)
            if holds_placeholder(memory.content):  # the response was scrubbed: the agent wrote down a credential
                out.problems.append(f"m[{i}]: holds a redacted credential; not stored (a memory never keeps one)")
                continue
            out.memories.append(memory)
        except InvalidInput as exc:
            out.problems.append(f"m[{i}]: {exc.message}")
    grades = data.get("rg", [])
    seen: dict[int, Grade] = {}
    for item in grades if isinstance(grades, list) else [grades]:
        try:
            g = parse_grade(item)
        except ValueError as exc:
            out.problems.append(f"rg: {exc}")
            continue
        if g.memory_id in seen and seen[g.memory_id] != g:
            out.problems.append(f"rg: memory {g.memory_id} graded twice; the last grade is kept")
        seen[g.memory_id] = g
    out.grades = list(seen.values())
    out.corroborate = _ids(data.get("cu", []), "cu", out.problems)
    out.contradict = _ids(data.get("-!", []), "-!", out.problems)
    both = set(out.corroborate) & set(out.contradict)
    if both:
        out.problems.append(f"memories {sorted(both)} both corroborated and contradicted; neither applied")
        out.corroborate = [i for i in out.corroborate if i not in both]
        out.contradict = [i for i in out.contradict if i not in both]
    return out
