"""Learned embedder versions: which embedder made the store's vectors, and how the store moves to another one.

A learned embedder is a fine-tuned copy of a base one (core/learning/embedder.py trains it), named
`<base>@<version>` and saved in `embedder_versions_dir()/<version>` (a sentence-transformers model,
`calibration.json`, `model_card.json`). Every stored vector carries the name of the embedder that made it
(`memories.embedding_model`); the store's record (machine state KEY, shared by every instance of a team store) says
which one is live:

    {"live": name | None, "pending": name | None, "previous": name | None, "requested_at", "deployed_at",
     "card": the pending or live version's model card, "published": {name: {"checksum", "size"}}}

`live` None: the base model (CAIRN_EMBED_MODEL). A deploy (`request`) names the version `pending`; ranking keeps the
live vectors until `finish_pending` has embedded every live memory with it into the staging table
(`memory_vectors`, in batches, resumable, memories written meanwhile included) and copied them into `memories` in
one transaction that also makes it live. The previous embedder's vectors stay staged, so a `rollback` (the previous
one requested again, by the same mechanism) re-embeds only what changed since. More in docs/store.md.

Cosine thresholds were fitted on the base embedder's cosines; a learned version's `Calibration` maps its cosines to
the base's scale (quantile matching of the two embedders' cosines on the same text pairs), so the composite's
weights and floor, the diversity threshold, semantic dedup and engagement's semantic test read the scale they were
fitted on.

Stdlib only at import (numpy when a map is applied): the rank path, even the fallback's, reads the names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from cairn_cli import config
from cairn_cli.clock import iso_now
from cairn_cli.config import Settings
from cairn_cli.core.store import state
from cairn_cli.core.store.embeddings import Embedder
from cairn_cli.errors import NotFound

KEY = "embedder"
QUERY, MEMORY = "query", "memory"  # the two calibration maps: query text vs memory, memory vs memory
STAGE_BATCH = 256  # memories embedded and staged per batch (one short transaction each)
CALIBRATION_FILE = "calibration.json"
CALIBRATION_FORMAT = 1


def learned_name(base: str, version: str) -> str:
    return f"{base}@{version}"


def base_of(name: str) -> str:
    return name.partition("@")[0]


def version_of(name: str) -> str | None:
    return name.partition("@")[2] or None


def version_dir(name: str) -> Path:
    version = version_of(name)
    if version is None:
        raise NotFound(f"{name} is a base embedder, not a learned version", "name one as <base>@<version>")
    return config.embedder_versions_dir() / version


def usable(name: str) -> bool:
    """The embedder can be loaded here: a base model, or a learned version whose directory holds its model (the
    hashing encoder's versions, for tests, need only the directory)."""
    if version_of(name) is None:
        return True
    directory = version_dir(name)
    return (directory / "modules.json").is_file() or (base_of(name) == "hashing" and directory.is_dir())


def record(settings: Settings) -> dict:
    value = state.get(KEY, settings)
    return dict(value) if isinstance(value, dict) else {}


def store_model(settings: Settings) -> str:
    """The embedder the store's vectors are made with: the live learned version of the configured base, whether or
    not this machine has it (then nothing here may write vectors of another model over the store's), else the base."""
    live = record(settings).get("live")
    return live if live and base_of(live) == settings.EMBED_MODEL else settings.EMBED_MODEL


def live_name(settings: Settings) -> str:
    """The embedder to rank and write with: the live learned version when its base is CAIRN_EMBED_MODEL and it is
    installed here, else CAIRN_EMBED_MODEL. One machine-state read (the daemon reads it per request)."""
    name = store_model(settings)
    return name if usable(name) else settings.EMBED_MODEL


def live_encoder(settings: Settings):
    from cairn_cli.ml.models import get_encoder

    return get_encoder(live_name(settings), settings.EMBED_DTYPE)


# -- calibration --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Map:
    """A monotone piecewise-linear map: `xs` strictly increasing, `ys` non-decreasing, both within [-1, 1]."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, cos):
        import numpy as np

        out = np.clip(np.interp(cos, self.xs, self.ys), -1.0, 1.0)
        if isinstance(cos, np.ndarray):
            return out.astype(cos.dtype if cos.dtype.kind == "f" else np.float64, copy=False)
        return float(out)

    @classmethod
    def matching(cls, base, learned, knots: int) -> Map:
        """The learned cosines' quantiles onto the base's: np.quantile at `knots` evenly spaced levels, the learned
        side made strictly increasing (ties nudged apart), extended linearly to -1 and 1."""
        import numpy as np

        base_arr, learned_arr = np.asarray(base, dtype=np.float64), np.asarray(learned, dtype=np.float64)
        if len(base_arr) != len(learned_arr) or len(base_arr) < 2:
            raise ValueError("a calibration needs at least two paired cosines, as many under each embedder")
        levels = np.linspace(0.0, 1.0, knots)
        xs = np.clip(np.quantile(learned_arr, levels), -1.0, 1.0)
        ys = np.maximum.accumulate(np.clip(np.quantile(base_arr, levels), -1.0, 1.0))
        for i in range(1, len(xs)):
            xs[i] = max(xs[i], xs[i - 1] + 1e-9)
        if xs[0] > -1.0:
            xs, ys = np.concatenate([[-1.0], xs]), np.concatenate([[-1.0], ys])
        if xs[-1] < 1.0:
            xs, ys = np.concatenate([xs, [1.0]]), np.concatenate([ys, [1.0]])
        return cls(tuple(float(x) for x in xs), tuple(float(y) for y in ys))

    def as_dict(self) -> dict:
        return {"x": list(self.xs), "y": list(self.ys)}


@dataclass(frozen=True)
class Calibration:
    """A learned embedder's cosines on the base embedder's scale: `query` for a query's or a response's text
    against a memory (the composite's similarity and floor, engagement's semantic test), `memory` for a memory
    against a memory (semantic dedup, the near-duplicate skip)."""

    query: Map
    memory: Map

    @classmethod
    def fit(cls, base_query, learned_query, base_memory, learned_memory, knots: int = 101) -> Calibration:
        """Arrays of paired cosines: the same text pairs under the base and the learned embedder."""
        return cls(Map.matching(base_query, learned_query, knots), Map.matching(base_memory, learned_memory, knots))

    def to_base(self, cos, which: str = QUERY):
        """`cos` (a float or an array) on the base embedder's scale."""
        if which not in (QUERY, MEMORY):
            raise ValueError(f"which is {QUERY!r} or {MEMORY!r}, not {which!r}")
        return (self.query if which == QUERY else self.memory)(cos)

    def to_json(self) -> str:
        return json.dumps({"format": CALIBRATION_FORMAT, QUERY: self.query.as_dict(), MEMORY: self.memory.as_dict()})

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        data = json.loads(text)
        maps = [Map(tuple(map(float, data[k]["x"])), tuple(map(float, data[k]["y"]))) for k in (QUERY, MEMORY)]
        return cls(*maps)


_calibrations: dict[str, Calibration | None] = {}


def calibration(name: str | None) -> Calibration | None:
    """The calibration of a learned version (read once per process from its directory); None for a base model, or
    a version without one (its cosines are taken as they are)."""
    if not name or version_of(name) is None:
        return None
    if name not in _calibrations:
        try:
            text = (version_dir(name) / CALIBRATION_FILE).read_text(encoding="utf-8")
        except OSError:
            return None  # not installed (yet): asked again once it is
        try:
            _calibrations[name] = Calibration.from_json(text)
        except (ValueError, KeyError, TypeError, IndexError):
            _calibrations[name] = None  # a broken file never breaks a ranking: its cosines are taken as they are
    return _calibrations[name]


def to_base(name: str | None, cos, which: str = QUERY):
    """`cos` of embedder `name` on its base's scale (unchanged for a base model)."""
    cal = calibration(name)
    return cos if cal is None else cal.to_base(cos, which)


# -- deploy, re-embed, swap, rollback -----------------------------------------------------------------------------
def request(name: str, settings: Settings, *, card: dict, by: str = "cairn train-reranker") -> dict:
    """Deploy `name`: it becomes pending; the live vectors keep ranking until `finish_pending` has made the new
    ones (the daemon does it in the background; without one, `cairn memory embed`)."""
    if not usable(name):
        raise NotFound(f"the embedder {name} is not installed here", f"save it under {config.embedder_versions_dir()}")
    value = {**record(settings), "pending": name, "requested_at": iso_now(), "card": card}
    state.put(KEY, value, settings, by=by, reason=f"deploy {name}: re-embedding the store")
    return value


def rollback(settings: Settings) -> dict:
    """Request the embedder live before this one again (the base when there was none): the same re-embed and swap,
    cheap because its vectors are still staged."""
    rec = record(settings)
    live = rec.get("live") or settings.EMBED_MODEL
    target = rec.get("previous") or settings.EMBED_MODEL
    if target == live:
        raise NotFound(f"there is no embedder to roll back to from {live}", "deploy a learned embedder first")
    card: dict = {}
    if version_of(target) is not None:  # the version's own card (teacher demotion reads its auto_promote_safe)
        try:
            card = json.loads((version_dir(target) / "model_card.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            card = {}
    return request(target, settings, card={**card, "rollback_of": live}, by="cairn train-reranker --rollback")


def _missing(name: str, limit: int | None = None):
    """The live memories without a fresh staged vector of `name` (none, or one made from an older version of the
    memory), oldest first."""
    from peewee import JOIN

    from cairn_cli.db.tables import Memory, MemoryVector

    query = (
        Memory.select(Memory.id, Memory.content, Memory.keywords, Memory.updated_at)
        .join(
            MemoryVector,
            JOIN.LEFT_OUTER,
            on=(MemoryVector.memory_id == Memory.id) & (MemoryVector.embedding_model == name),
        )
        .where(
            Memory.superseded_by.is_null()
            & (MemoryVector.id.is_null() | (MemoryVector.memory_updated_at != Memory.updated_at))
        )
        .order_by(Memory.id)
    )
    return query.limit(limit) if limit else query


def stage(
    settings: Settings,
    name: str,
    encoder,
    *,
    batch: int = STAGE_BATCH,
    max_batches: int | None = None,
    progress: Callable[[int], None] | None = None,
    hold: Callable[[], AbstractContextManager] | None = None,
) -> int:
    """Embed the live memories that lack a fresh staged vector of `name` with `encoder` into the staging table, a
    batch at a time (a killed run continues where it stopped), until none lacks one (memories written meanwhile
    included) or `max_batches`. Returns how many were staged. `hold()`: held around each database step (the daemon's
    store binding), never around the model call."""
    import numpy as np

    from cairn_cli.core.store.embeddings import embedding_text
    from cairn_cli.db.tables import MemoryVector, memory_proxy

    hold = hold or nullcontext
    done = batches = 0
    while max_batches is None or batches < max_batches:
        with hold():
            rows = list(_missing(name, batch).tuples())
        if not rows:
            break
        vectors = encoder.encode([embedding_text(content, keywords or []) for _, content, keywords, _ in rows])
        with hold(), memory_proxy.atomic():
            ids = [r[0] for r in rows]
            MemoryVector.delete().where(
                MemoryVector.memory_id.in_(ids) & (MemoryVector.embedding_model == name)
            ).execute()
            MemoryVector.insert_many(
                [
                    {
                        "memory_id": memory_id,
                        "embedding_model": name,
                        "embedding": np.asarray(vec, dtype=np.float32).tobytes(),
                        "memory_updated_at": updated,
                    }
                    for (memory_id, _, _, updated), vec in zip(rows, vectors)
                ]
            ).execute()
        done, batches = done + len(rows), batches + 1
        if progress:
            progress(len(rows))
    return done


def to_stage(settings: Settings, name: str) -> int:
    """How many live memories still lack a fresh staged vector of `name`."""
    return _missing(name).count()


def swap(settings: Settings, name: str) -> dict:
    """One transaction: the old live embedder's vectors staged (for a rollback), the staged vectors of `name` copied
    into `memories` (those of a memory changed since it was staged are left: the live engine re-embeds them), `name`
    live, the old one previous, and the staged vectors of embedders neither live nor previous pruned."""
    from peewee import fn

    from cairn_cli.db.tables import Memory, MemoryVector, memory_proxy

    with memory_proxy.atomic():
        rec = record(settings)
        if rec.get("pending") != name:
            return rec  # another deploy replaced it meanwhile: that one is finished instead
        old = rec.get("live") or settings.EMBED_MODEL
        live_old = Memory.superseded_by.is_null() & (Memory.embedding_model == old) & Memory.embedding.is_null(False)
        MemoryVector.delete().where(
            (MemoryVector.embedding_model == old) & MemoryVector.memory_id.in_(Memory.select(Memory.id).where(live_old))
        ).execute()
        MemoryVector.insert_from(
            Memory.select(Memory.id, Memory.embedding_model, Memory.embedding, Memory.updated_at).where(live_old),
            [
                MemoryVector.memory_id,
                MemoryVector.embedding_model,
                MemoryVector.embedding,
                MemoryVector.memory_updated_at,
            ],
        ).execute()
        staged = MemoryVector.alias("staged")
        fresh = (
            (staged.memory_id == Memory.id)
            & (staged.embedding_model == name)
            & (staged.memory_updated_at == Memory.updated_at)
        )
        Memory.update(embedding=staged.select(staged.embedding).where(fresh), embedding_model=name).where(
            Memory.superseded_by.is_null() & fn.EXISTS(staged.select(staged.id).where(fresh))
        ).execute()
        value = {
            **rec,
            "live": None if name == settings.EMBED_MODEL else name,
            "previous": old,
            "pending": None,
            "deployed_at": iso_now(),
        }
        state.put(KEY, value, settings, by="cairn embedder swap", reason=f"{name} live: every live memory re-embedded")
        keep = {name, old}
        MemoryVector.delete().where(MemoryVector.embedding_model.not_in(list(keep))).execute()
    return value


def finish_pending(
    settings: Settings,
    *,
    encoder=None,
    progress: Callable[[int], None] | None = None,
    hold: Callable[[], AbstractContextManager] | None = None,
) -> str | None:
    """The background re-embed of a deploy: stage every live memory with the pending embedder (`encoder`: loaded
    here when None), then swap. Returns a line saying what happened; None when nothing is pending. Idempotent."""
    hold = hold or nullcontext
    with hold():
        pending = record(settings).get("pending")
    if not pending:
        return None
    if encoder is None:
        from cairn_cli.ml.models import get_encoder

        encoder = get_encoder(pending, settings.EMBED_DTYPE)
    staged = stage(settings, pending, encoder, progress=progress, hold=hold)
    with hold():
        value = swap(settings, pending)
    if value.get("pending"):
        return f"{pending} was replaced by {value['pending']} while re-embedding; nothing swapped"
    return f"{pending} live ({staged} memories embedded; previous {value.get('previous')})"


# -- a team store: one embedder version for every instance --------------------------------------------------------
def publish(version: Path, settings: Settings, *, force: bool = False) -> dict | None:
    """Write a learned version's directory to the shared store (beside the team's students, named by the learned
    name) and list it, with its checksum, in the embedder record; None when the store is this machine's own, unless
    `force`."""
    from cairn_cli.core.store.versions import shared_store, tar_directory
    from cairn_cli.db.tables import StudentVersion, memory_proxy

    if not (force or shared_store()):
        return None
    name = learned_name(settings.EMBED_MODEL, version.name)
    blob = tar_directory(version)
    published = {"checksum": hashlib.sha256(blob).hexdigest(), "size": len(blob)}
    card_path = version / "model_card.json"
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    with memory_proxy.atomic():
        StudentVersion.delete().where(StudentVersion.name == name).execute()
        StudentVersion.insert(name=name, blob=blob, card=card, **published).execute()
        rec = record(settings)
        rec["published"] = {**(rec.get("published") or {}), name: published}
        state.put(KEY, rec, settings, by="cairn train-reranker", reason=f"published {name}")
    return {"name": name, **published}


def sync(settings: Settings, *, refused: set[str] | None = None) -> str | None:
    """Install the store's live and pending learned versions this machine lacks, from the shared store (checksum
    verified), so that every instance ranks with the embedder the store's vectors were made with. Returns what
    happened (a line for the daemon's log), None when there was nothing to do."""
    from cairn_cli.core.store.versions import unpack
    from cairn_cli.db.tables import StudentVersion

    rec = record(settings)
    notes = []
    for name in dict.fromkeys(n for n in (rec.get("live"), rec.get("pending")) if n and version_of(n)):
        if usable(name) or name in (refused or set()):
            continue
        published = (rec.get("published") or {}).get(name) or {}
        row = StudentVersion.get_or_none(StudentVersion.name == name)
        why = None
        if row is None or not published:
            why = "it is not published in the store"
        elif hashlib.sha256(bytes(row.blob)).hexdigest() != published.get("checksum"):
            why = "its checksum does not match the published one"
        else:
            why = unpack(bytes(row.blob), version_dir(name))
        if why:
            if refused is not None:
                refused.add(name)
            notes.append(f"the team's embedder {name} was not installed ({why})")
        else:
            notes.append(f"installed the team's embedder {name} (checksum verified)")
    return "; ".join(notes) or None


# -- the live embedder in this process ----------------------------------------------------------------------------
def local_embedder(settings: Settings) -> Embedder:
    """The live embedder loaded in this process: (model name, vectors)."""

    def embed(texts: list[str]):
        encoder = live_encoder(settings)
        return encoder.name, encoder.encode(texts)

    return embed


def embed_missing(settings: Settings, *, progress: Callable[[int], None] | None = None) -> int:
    """(Re)embed live memories that lack an embedding from the live embedder. Returns how many."""
    from cairn_cli.core.store.embeddings import embedding_text, store_embeddings
    from cairn_cli.db.tables import Memory
    from cairn_cli.ml.models import get_encoder

    name = live_name(settings)
    if name != store_model(settings):  # never another model's vectors over the store's
        raise NotFound(
            f"the store's embedder {store_model(settings)} is not installed here",
            "start the daemon (it installs a team's published version) or roll the embedder back",
        )
    encoder = get_encoder(name, settings.EMBED_DTYPE)
    stale = list(
        Memory.select().where(
            Memory.superseded_by.is_null()
            & ((Memory.embedding_model != encoder.name) | Memory.embedding_model.is_null())
        )
    )
    for start in range(0, len(stale), 256):
        batch = stale[start : start + 256]
        store_embeddings(
            [m.id for m in batch], encoder.encode([embedding_text(m.content, m.keywords) for m in batch]), encoder.name
        )
        if progress:
            progress(len(batch))
    return len(stale)
