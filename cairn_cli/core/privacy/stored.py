"""Every place cairn keeps user text, rewritten by one transform: what `cairn forget` and `cairn redact --scan` walk
(docs/privacy.md). The tables of both stores (memories, merges, replay calls and runs, deliveries' context windows,
hook state), whichever backend holds them, and the text files under CAIRN_HOME (the Stop spool, the logs, exported
training data). Model weights are not text and are never rewritten: a learner trained on a text is reported
instead (`tainted_learners`)."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.clock import utcnow
from cairn_cli.core.redact import transform_strings

# a transform: (text) -> (new text, how many things it replaced)
Transform = Callable[[str], tuple[str, int]]

_DB_SUFFIXES = (".db", ".db-wal", ".db-shm", ".db-journal", ".sqlite", ".sqlite3")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".npy", ".npz", ".pkl", ".gz", ".zip")
_TEXT_LIMIT = 256 * 1024 * 1024  # a text file larger than this is not rewritten in memory (reported instead)


@dataclass
class Rewrites:
    """What a walk found (and, unless a dry run, rewrote): per place, rows or files changed and replacements."""

    rows: Counter = field(default_factory=Counter)  # place -> rows (or files) changed
    hits: Counter = field(default_factory=Counter)  # place -> replacements made
    files: list[str] = field(default_factory=list)  # files changed, relative to CAIRN_HOME
    skipped: list[str] = field(default_factory=list)  # what could not be rewritten, and why
    memories: list[int] = field(default_factory=list)  # memories whose text changed (re-embedded, re-indexed)

    def count(self, place: str, hits: int) -> None:
        if hits:
            self.rows[place] += 1
            self.hits[place] += hits

    def as_dict(self) -> dict:
        return {
            "rows": dict(self.rows),
            "replaced": dict(self.hits),
            "files": self.files,
            "skipped": self.skipped,
            "memories": self.memories,
        }


def rewrite_tables(
    transform: Transform,
    *,
    apply: bool,
    out: Rewrites,
    skip: frozenset[int] = frozenset(),
    memory_transform: Transform | None = None,
) -> None:
    """Every text column of both stores, each in its store's transaction. A memory whose text changes gets its
    hashes again, loses its vectors (re-embedded by `cairn memory embed` or the daemon) and is re-indexed. `skip`:
    memories left alone (those a dry run of `forget` would delete); `memory_transform`: the memories' own (default
    `transform`; `forget ID` purges a memory's text from the log, never from another memory)."""
    memory_transform = transform if memory_transform is None else memory_transform
    from cairn_cli import db
    from cairn_cli.core.store import search_index
    from cairn_cli.core.text import normalise, sha256
    from cairn_cli.db.tables import (
        HookState,
        Memory,
        MemoryDelivery,
        MemoryMerge,
        MemoryVector,
        ReplayCall,
        ReplayRun,
    )

    with db.transaction("memory"):
        for mem in Memory.select().iterator():
            if mem.id in skip:
                continue
            content, n = memory_transform(mem.content)
            keywords, k = transform_strings(list(mem.keywords or []), memory_transform)
            out.count("memories", n + k)
            if n + k and apply:
                mem.content, mem.keywords = content, keywords
                mem.content_hash, mem.norm_hash = sha256(content), sha256(normalise(content))
                mem.embedding, mem.embedding_model, mem.updated_at = None, None, utcnow()
                mem.save()
                MemoryVector.delete().where(MemoryVector.memory_id == mem.id).execute()
            if n + k:
                out.memories.append(mem.id)
        for merge in MemoryMerge.select().iterator():
            content, n = transform(merge.content)
            keywords, k = transform_strings(list(merge.keywords or []), transform)
            out.count("memory_merges", n + k)
            if n + k and apply:
                MemoryMerge.update(content=content, keywords=keywords).where(MemoryMerge.id == merge.id).execute()
        for call in ReplayCall.select(ReplayCall.key, ReplayCall.answer).iterator():
            answer, n = transform(call.answer)
            out.count("replay_calls", n)
            if n and apply:
                ReplayCall.update(answer=answer).where(ReplayCall.key == call.key).execute()
        for run in ReplayRun.select(ReplayRun.id, ReplayRun.config, ReplayRun.report).iterator():
            config_value, n = transform_strings(run.config, transform)
            report, m = transform_strings(run.report, transform)
            out.count("replay_runs", n + m)
            if n + m and apply:
                ReplayRun.update(config=config_value, report=report).where(ReplayRun.id == run.id).execute()
        if apply and out.memories:
            search_index.sync()  # the changed memories' index rows, in this transaction
    with db.transaction("ephemeral"):
        rows = MemoryDelivery.select(MemoryDelivery.id, MemoryDelivery.context_window).iterator()
        for delivery in rows:
            window, n = transform(delivery.context_window or "")
            out.count("memory_deliveries", n)
            if n and apply:
                MemoryDelivery.update(context_window=window).where(MemoryDelivery.id == delivery.id).execute()
        for hook in HookState.select(HookState.id, HookState.data, HookState.transcript_path).iterator():
            data, n = transform_strings(hook.data, transform)
            out.count("hook_state", n)
            if n and apply:
                HookState.update(data=data).where(HookState.id == hook.id).execute()


def _text_files(home: Path) -> Iterable[Path]:
    """The files under CAIRN_HOME that hold text cairn wrote: not the databases (rewritten through their tables),
    not model weights or a model's directory, not sockets or links."""
    for root, dirs, files in os.walk(home):
        names = set(files)
        if "config.json" in names and ({"model.safetensors", "pytorch_model.bin"} & names):
            dirs[:] = []  # a model's directory: weights, tokenizer and vocabulary, no user text
            continue
        for name in files:
            path = Path(root) / name
            if name.endswith(_DB_SUFFIXES + _WEIGHT_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            yield path


def _rewrite_json_lines(text: str, transform: Transform) -> tuple[str, int]:
    """A JSON (or JSONL) text with its strings transformed, so that a replacement never breaks its syntax; other
    text transformed whole."""
    try:
        value, n = transform_strings(json.loads(text), transform)
        return (json.dumps(value, ensure_ascii=False) if n else text), n
    except ValueError:
        pass
    lines, total = [], 0
    for line in text.splitlines(keepends=True):
        try:
            value, n = transform_strings(json.loads(line), transform)
        except ValueError:
            new, n = transform(line)
            lines.append(new)
        else:
            lines.append(json.dumps(value, ensure_ascii=False) + ("\n" if line.endswith("\n") else "") if n else line)
        total += n
    return "".join(lines), total


def rewrite_files(home: Path, transform: Transform, *, apply: bool, out: Rewrites) -> None:
    """Every text file under CAIRN_HOME: JSON and JSONL by their strings (the spool's records, exported training
    data), the rest (logs) line by line; rewritten atomically with the file's mode."""
    from cairn_cli.files import atomic_write

    for path in _text_files(home):
        try:
            if path.stat().st_size > _TEXT_LIMIT:
                out.skipped.append(f"{path.relative_to(home)}: larger than {_TEXT_LIMIT // 2**20} MiB")
                continue
            raw = path.read_bytes()
        except OSError as exc:
            out.skipped.append(f"{path.relative_to(home)}: {exc.strerror or exc}")
            continue
        if b"\0" in raw[:4096]:
            continue  # binary
        text = raw.decode("utf-8", errors="replace")
        if path.suffix in (".json", ".jsonl"):
            new, n = _rewrite_json_lines(text, transform)
        else:
            new, n = transform(text)
        if not n:
            continue
        place = "spool" if "spool" in path.parts else "logs" if "logs" in path.parts else "files"
        out.count(place, n)
        out.files.append(str(path.relative_to(home)))
        if apply:
            atomic_write(path, new, mode=path.stat().st_mode & 0o777)


def compact_stores() -> list[str]:
    """Each store compacted (db.compact): what was deleted or rewritten is gone from the files too, not only from
    the rows; what could not be compacted."""
    from cairn_cli import config, db
    from cairn_cli.core.store import vector_index

    # the vector indexes are derived from the store: dropped, a daemon builds them again from what is left
    vector_index.drop_saved(config.home_dir(), config.memory_db_url())
    return [note for note in (db.compact(kind) for kind in ("memory", "ephemeral")) if note]


def tainted_learners(labelled_before: Iterable[object]) -> list[dict]:
    """The deployed learners (student, learned profile, learned embedder) deployed after one of these label times:
    they were trained on text that is now forgotten. The next training no longer sees it (its rows are gone)."""
    from cairn_cli.core.learning.deploy import DEPLOY_KEY
    from cairn_cli.core.learning.fusion import LEARNED_KEY
    from cairn_cli.core.store.embedders import KEY as EMBEDDER_KEY
    from cairn_cli.db.tables import MachineState

    times = [t for t in labelled_before if t is not None]
    if not times:
        return []
    earliest = min(str(t) for t in times)
    out = []
    for learner, key in (("student", DEPLOY_KEY), ("fusion", LEARNED_KEY), ("embedder", EMBEDDER_KEY)):
        row = MachineState.get_or_none(MachineState.key == key)
        if row is None or not isinstance(row.value, dict):
            continue
        version = row.value.get("version") or row.value.get("name") or row.value.get("live")
        if str(row.updated_at) >= earliest:
            out.append({"learner": learner, "version": version, "deployed_at": str(row.updated_at)})
    return out
