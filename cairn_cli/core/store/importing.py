"""Importing memories from a JSONL file: every line validated first, then added with dedup a batch at a time, each
batch its own transaction: a large import never holds one transaction, and an import killed midway keeps the batches
it committed; run again, it adds nothing twice (the lines already in are exact repeats, merged, not re-embedded)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from cairn_cli.config import Settings
from cairn_cli.core.store.dedup import AddResult, add_memories, plan
from cairn_cli.core.store.embedders import local_embedder
from cairn_cli.core.store.embeddings import Embedder
from cairn_cli.core.store.memories import MemoryInput, validate_entry
from cairn_cli.core.store.semantic_index import SemanticIndexes
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
    batch_size: int = 512,
) -> ImportReport:
    """Import a JSONL file. Any rejected line aborts the whole import unless skip_invalid (then it is reported).
    `batch_size` lines are embedded together and written in one transaction; the semantic dedup index is read once
    and kept across the batches."""
    valid, rejected = parse_jsonl(path, default_source_ref=source_ref)
    if rejected and not skip_invalid:
        first = ", ".join(f"line {no}: {why}" for no, why in rejected[:3])
        more = f" (+{len(rejected) - 3} more)" if len(rejected) > 3 else ""
        raise InvalidInput(
            f"{path}: {len(rejected)} invalid line(s), nothing imported — {first}{more}",
            "fix those lines or pass --skip-invalid",
        )
    notes: list[str] = []
    results: list[AddResult] = []
    indexes = SemanticIndexes(settings.DEDUP_SEMANTIC_MIN)
    entries = [entry for _, entry in valid]
    batches = [entries[start : start + batch_size] for start in range(0, len(entries), batch_size)]
    embedder = embed or local_embedder(settings)
    # the next batch is embedded (the daemon's cores, or the model's threads) while this one is written
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-import-embed") as pool:
        upcoming = pool.submit(plan(batches[0]).embed, embedder) if batches else None
        for i, batch in enumerate(batches):
            assert upcoming is not None
            embedded = upcoming.result()
            upcoming = pool.submit(plan(batches[i + 1]).embed, embedder) if i + 1 < len(batches) else None
            said: list[str] = []
            results += add_memories(batch, settings, progress=progress, notes=said, indexes=indexes, embedded=embedded)
            notes += [n for n in said if n not in notes]  # a batch's note once, not once per batch
    return ImportReport(
        added=sum(r.action == "added" for r in results),
        merged=sum(r.action == "merged" for r in results),
        rejected=rejected,
        results=results,
        notes=notes,
    )
