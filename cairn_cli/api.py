"""cairn as a library, for scripts and notebooks: open a store, add or import memories, list them, rank, train a
student and roll it back, on the same core functions the commands call (as `llm` and `sqlite-utils` offer theirs).

    import cairn_cli

    store = cairn_cli.open_store(home="/tmp/cairn-demo")
    store.add("Run the tests with make test", keywords=["make", "tests"], scope="cairn", kind="procedure")
    for memory in store.rank("how do I run the tests?", scope="cairn").items:
        print(memory.rank, memory.score, memory.content)

A process binds one memory store and one delivery log at a time (as a command does): opening a store rebinds them.
Ranking here loads the models in this process (the daemon serves the hooks, not the API).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE

if TYPE_CHECKING:
    from cairn_cli.core.hooks.prompt import RankResult
    from cairn_cli.core.learning.attempt import TrainReport
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.store.dedup import AddResult
    from cairn_cli.core.store.embeddings import Embedder
    from cairn_cli.core.store.importing import ImportReport
    from cairn_cli.core.store.memories import MemoryInput, MemoryView

__all__ = ["MemoryInput", "Store", "open_store"]


def __getattr__(name: str) -> Any:
    if name == "MemoryInput":  # the typed entry add_many takes as is (a dict is validated first)
        from cairn_cli.core.store.memories import MemoryInput

        return MemoryInput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Store:
    """The memory store and the delivery log named by `settings`, bound for this process."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._engines: dict[bool, RankEngine] = {}

    def add(
        self,
        content: str,
        *,
        keywords: Iterable[str] = (),
        scope: str = GLOBAL_SCOPE,
        kind: str = "fact",
        source_ref: str | None = None,
        session_id: str | None = None,
        embed: Embedder | None = None,
    ) -> AddResult:
        """Add one memory, or merge it into an identical one or a near-duplicate of its scope (`cairn memory add`)."""
        entry = {
            "content": content,
            "keywords": list(keywords),
            "scope": scope,
            "kind": kind,
            "source_ref": source_ref,
            "session_id": session_id,
        }
        return self.add_many([entry], embed=embed)[0]

    def add_many(
        self,
        entries: Iterable[dict | MemoryInput],
        *,
        source_ref: str | None = None,
        embed: Embedder | None = None,
        notes: list[str] | None = None,
    ) -> list[AddResult]:
        """Add or merge each entry, in one transaction. A dict is validated as a line of `cairn memory import` is
        (`source_ref`: for those without their own); `embed`: (texts) -> (model, vectors), default the configured
        model in this process; `notes` receives what the dedup could not do."""
        from cairn_cli.core.store import dedup, memories

        checked = [  # a MemoryInput is validated again (as it is): its text is scrubbed as every entrance's is
            memories.validate_entry(dataclasses.asdict(e))
            if isinstance(e, memories.MemoryInput)
            else memories.validate_entry(e, default_source_ref=source_ref)
            for e in entries
        ]
        return dedup.add_memories(checked, self.settings, embed=embed, notes=notes)

    def import_jsonl(
        self,
        path: str | Path,
        *,
        source_ref: str | None = None,
        skip_invalid: bool = False,
        embed: Embedder | None = None,
    ) -> ImportReport:
        """Import a JSONL file of memories (`cairn memory import`): a bad line aborts it unless `skip_invalid`."""
        from cairn_cli.core.store import importing

        return importing.import_jsonl(
            Path(path), self.settings, source_ref=source_ref, skip_invalid=skip_invalid, embed=embed
        )

    def memories(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        include_superseded: bool = False,
        limit: int | None = None,
    ) -> list[MemoryView]:
        """The memories, oldest first (`cairn memory list`)."""
        from cairn_cli.core.store import memories

        return memories.list_memories(
            self.settings, scope=scope, kind=kind, include_superseded=include_superseded, limit=limit
        )

    def engine(self, *, with_reranker: bool = True) -> RankEngine:
        """The ranking engine in this process (its models loaded once per store and kind)."""
        from cairn_cli.core.ranking.engine import RankEngine

        if with_reranker not in self._engines:
            self._engines[with_reranker] = RankEngine.in_process(self.settings, with_reranker=with_reranker)
        return self._engines[with_reranker]

    def rank(
        self,
        prompt: str,
        *,
        scope: str | None = None,
        k: int | None = None,
        session_id: str = "api",
        transcript: str | None = None,
        log: bool = True,
        with_reranker: bool = True,
    ) -> RankResult:
        """Rank the memories in scope for the prompt (+ the transcript's last turns) as `cairn rank` does, logging
        one delivery per memory shown unless `log` is False; `.items`, `.block`, `.as_dict()`."""
        from cairn_cli.core.hooks.prompt import prompt_turn
        from cairn_cli.core.hooks.request import PromptRequest

        request = PromptRequest(prompt=prompt, session_id=session_id, scope=scope, transcript=transcript, k=k, log=log)
        return prompt_turn(request, self.settings, self.engine(with_reranker=with_reranker))

    def train(self, **options: Any) -> TrainReport:
        """Train a student reranker on the graded deliveries and deploy it if it passes the gate
        (`cairn train-reranker`); `options`: the fields of core/learning/attempt.py's TrainOptions
        (deploy=False, dry_run=True, epochs=..., ...)."""
        from cairn_cli.core.learning import attempt, trainer

        return trainer.train_reranker(self.settings, attempt.TrainOptions(**options))

    def rollback(self) -> dict:
        """Put the student deployed before the live one back (`cairn train-reranker --rollback`)."""
        from cairn_cli.core.learning import deploy

        return deploy.rollback(self.settings)

    def close(self) -> None:
        """Close every connection this process opened."""
        from cairn_cli import db

        db.close_all()
        self._engines.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(
    home: str | Path | None = None,
    db_url: str | None = None,
    *,
    ephemeral_db_url: str | None = None,
    create: bool | None = True,
    **settings: Any,
) -> Store:
    """Bind the memory store and the delivery log and return them as a Store. `home` sets CAIRN_HOME for this
    process (where the default stores, logs and models are); `db_url` / `ephemeral_db_url` name the stores as
    --db-url / --ephemeral-db-url do; `create`: make stores that do not exist yet (None: only the default ones
    under the home; False: none). Any other keyword is a setting by its name without CAIRN_ (EMBED_MODEL="hashing",
    RANK_K=3), over the environment for what this Store does."""
    from cairn_cli.core.store import open_stores

    if home is not None:
        os.environ["CAIRN_HOME"] = str(Path(home).expanduser())
    resolved = Settings(DB_URL=db_url, EPHEMERAL_DB_URL=ephemeral_db_url, **settings)
    open_stores(resolved, create=create)
    return Store(resolved)
