"""Importing memories from a JSONL file: every line validated, then all added with dedup in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from cairn_cli.config import Settings
from cairn_cli.core.store.dedup import AddResult, add_memories
from cairn_cli.core.store.embeddings import Embedder
from cairn_cli.core.store.memories import MemoryInput, validate_entry
from cairn_cli.errors import InvalidInput


@dataclass
class ImportReport:
    added: int = 0
    merged: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    results: list[AddResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "added": self.added,
            "merged": self.merged,
            "rejected": [{"line": n, "reason": r} for n, r in self.rejected],
            "ids": [r.id for r in self.results],
            "merged_by": {m: sum(r.method == m for r in self.results) for m in ("exact", "normalised", "semantic")},
            "notes": self.notes,
        }


def lines_to_import(path: Path) -> int | None:
    """The non-blank lines of a regular file `import_jsonl` will read (a progress bar's total); None for a FIFO or an
    oversized file, which it refuses."""
    from cairn_cli.inputs import max_input_bytes

    small = path.is_file() and path.stat().st_size <= max_input_bytes()
    return sum(1 for line in path.open("rb") if line.strip()) if small else None


def parse_jsonl(
    path: Path, *, default_source_ref: str | None = None
) -> tuple[list[tuple[int, MemoryInput]], list[tuple[int, str]]]:
    """Valid entries and rejected lines (1-based line numbers with the reason). Blank lines are skipped."""
    from cairn_cli.inputs import read_file

    data = read_file(path, "pass the path of a JSONL file")  # within CAIRN_MAX_INPUT_BYTES, never a FIFO's endless wait
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark (Windows editors write one): not content
        data = data[3:]
    valid, rejected = [], []
    for no, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            valid.append((no, validate_entry(orjson.loads(line), default_source_ref=default_source_ref)))
        except orjson.JSONDecodeError as exc:
            rejected.append((no, f"not valid JSON ({exc.msg})"))
        except InvalidInput as exc:
            rejected.append((no, exc.one_line()))
    return valid, rejected


def import_jsonl(
    path: Path,
    settings: Settings,
    *,
    source_ref: str | None = None,
    skip_invalid: bool = False,
    progress: Callable[[int], None] | None = None,
    embed: Embedder | None = None,
) -> ImportReport:
    """Import a JSONL file. Any rejected line aborts the whole import unless skip_invalid (then it is reported)."""
    valid, rejected = parse_jsonl(path, default_source_ref=source_ref)
    if rejected and not skip_invalid:
        first = ", ".join(f"line {no}: {why}" for no, why in rejected[:3])
        more = f" (+{len(rejected) - 3} more)" if len(rejected) > 3 else ""
        raise InvalidInput(
            f"{path}: {len(rejected)} invalid line(s), nothing imported — {first}{more}",
            "fix those lines or pass --skip-invalid",
        )
    notes: list[str] = []
    results = add_memories([entry for _, entry in valid], settings, progress=progress, embed=embed, notes=notes)
    return ImportReport(
        added=sum(r.action == "added" for r in results),
        merged=sum(r.action == "merged" for r in results),
        rejected=rejected,
        results=results,
        notes=notes,
    )
