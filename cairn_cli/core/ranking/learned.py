"""The learned profile in force: the composite's weights fit per kind of store from the graded deliveries
(core/learning/fusion.py), served in place of a shipped profile's. Stdlib only: the rank path reads it.

The live artifact is a small JSON file named by a symlink (`learned_path()`, one version file per deploy under
`<it>.versions/`, swapped atomically like the student); it is read once per version, not per request: a ranking
costs one `readlink`. A learned profile replaces a shipped one only when it was fit for the same embedding model and
from the same shipped profile (an operator's CAIRN_SCORE_W_* or a changed shipped profile wins until a new fit), and
only where an embedder ranks (the lexical fallback keeps the shipped weights: they were fit with the similarity in
play, and the fallback's floor is the shipped profile's).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.ranking.profiles import Profile

FORMAT = 1
LIVE_NAME = "learned-profile.json"
PREFIX = "learned:"  # a delivery's profile_by under a learned profile: learned:<version>

_cache: dict[str, tuple[str, dict | None]] = {}  # live path -> (the version it names, its artifact)


def learned_path() -> Path:
    """The live learned profile (a symlink to a version file) under CAIRN_HOME."""
    return config.home() / "training_data" / LIVE_NAME


def shipped_params(profile: Profile) -> dict:
    """What a fit starts from and is checked against when served: the profile's weights and neighbour terms."""
    return {
        "weights": dict(profile.weights),
        "neighbour_weight": profile.neighbour_weight,
        "context_keywords": profile.context_keywords,
    }


def live_artifact(settings: Settings) -> dict | None:
    """The deployed artifact (None: none deployed, or CAIRN_LEARNED_PROFILE=off); read from disk only when the
    live link names another version than last time."""
    if str(settings.LEARNED_PROFILE).strip().lower() == "off":
        return None
    path = learned_path()
    try:
        target = os.readlink(path)
    except OSError:  # none deployed (or a plain file: read it each time, it has no version to cache by)
        return _read(path) if path.is_file() else None
    cached = _cache.get(str(path))
    if cached is not None and cached[0] == target:
        return cached[1]
    artifact = _read(path)
    _cache[str(path)] = (target, artifact)
    return artifact


def _read(path: Path) -> dict | None:
    try:
        artifact = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a broken deploy never breaks a ranking: the shipped profile ranks
    return artifact if isinstance(artifact, dict) and artifact.get("format") == FORMAT else None


def apply(profile: Profile, artifact: dict | None, embed_model: str | None) -> Profile:
    """`profile` with the artifact's learned weights for its kind of store, when it has some that fit (see the
    module note); else `profile` as it is. The delivery records `profile_by` learned:<version>."""
    from cairn_cli.core.store.embedders import base_of

    # fit on the base embedder's cosines: a learned version of it, calibrated to its scale, reads the same weights
    if artifact is None or embed_model is None or artifact.get("embed_model") != base_of(embed_model):
        return profile
    fitted = (artifact.get("profiles") or {}).get(profile.name)
    if not fitted or fitted.get("shipped") != shipped_params(profile):
        return profile
    return replace(
        profile,
        weights={**profile.weights, **{k: float(v) for k, v in fitted["weights"].items()}},
        neighbour_weight=float(fitted["neighbour_weight"]),
        context_keywords=float(fitted["context_keywords"]),
        chosen_by=f"{PREFIX}{artifact.get('version')}",
    )


def served(profile: Profile, settings: Settings, embed_model: str | None) -> Profile:
    """The profile the rank path serves for `profile`: the live learned one where it applies."""
    if embed_model is None:
        return profile
    return apply(profile, live_artifact(settings), embed_model)


def live(settings: Settings):
    """What a shipped profile is ranked as now (for the gate: the live ranking it judges a candidate against)."""
    artifact, model = live_artifact(settings), settings.EMBED_MODEL
    return lambda profile: apply(profile, artifact, model)
