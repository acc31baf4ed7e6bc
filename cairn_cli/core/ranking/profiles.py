"""Ranking profiles: how the composite combines its components for a kind of store, chosen per scope.

The shipped default, `auto`, reads the kind of store the scope is (core/ranking/kinds.py) and ranks it with that
kind's profile; CAIRN_RANK_PROFILE=default or =dialog forces one everywhere (an override). Every delivery records
the profile it was ranked with and what chose it.

- `default` (notes, facts, passages): the seed's composite, the weights in the settings (similarity 0.50,
  keywords 0.15, scope 0.05, confidence and recency 0).
- `dialog` (conversation turns): the same weights, plus a turn is read with the turns around it: the keywords of a
  memory joined with its previous neighbour's (the turn it answers) weigh CONTEXT_KEYWORDS, and each memory gets
  NEIGHBOUR_WEIGHT of the better of its two neighbours' scores (the memories written just before and after it in
  the same session, else scope). Fitted on the four LoCoMo dev conversations (scripts/bench_ranking.py: the grid
  is in bench/ranking.md), reported on the other three and on stores never fitted on (bench/relevance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.ranking.kinds import DIALOG
from cairn_cli.errors import ConfigError

AUTO = "auto"
PROFILES = ("default", "dialog")
CONTEXT_KEYWORDS = 0.30
NEIGHBOUR_WEIGHT = 0.5


@dataclass(frozen=True)
class Profile:
    name: str  # default | dialog: the floor's key and what the delivery log records
    weights: dict[str, float]
    neighbour_weight: float = 0.0
    context_keywords: float = 0.0
    chosen_by: str = "CAIRN_RANK_PROFILE"  # or "auto": the scope's kind of store


def profile(settings: Settings, name: str | None = None, *, kind: str | None = None) -> Profile:
    """The ranking profile in force: CAIRN_RANK_PROFILE (or `name`), where `auto` takes the one of the scope's
    kind of store (`kind`, core/ranking/kinds.py; None, unknown: default)."""
    name = name or settings.RANK_PROFILE
    chosen_by = "CAIRN_RANK_PROFILE"
    if name == AUTO:
        name, chosen_by = ("dialog" if kind == DIALOG else "default"), AUTO
    weights = settings.weights()
    if name == "default":
        return Profile("default", weights, chosen_by=chosen_by)
    if name == "dialog":
        return Profile(
            "dialog", weights, neighbour_weight=NEIGHBOUR_WEIGHT, context_keywords=CONTEXT_KEYWORDS, chosen_by=chosen_by
        )
    raise ConfigError(f"unknown ranking profile {name!r}", "set CAIRN_RANK_PROFILE to auto, default or dialog")


# Shipped composite floors, per (profile, embedding model; "lexical": the fallback, no similarity), read off the
# trade-off table of scripts/bench_relevance.py (bench/relevance.md): fitted on 4 LoCoMo dev conversations, reported
# on the other 3. default/MiniLM 0.32: dev 51.9% of nothing-relevant prompts abstain for 0.014 R@5 (0.325 would
# drop a shipped example's right memory, relevance 0.322); lexical 0.065 and dialog 0.445: the highest floors losing
# <= 0.01 R@5 on dev. A store without a shipped floor (the hashing test encoder) has 0.
SHIPPED_FLOORS = {
    ("default", "all-MiniLM-L6-v2"): 0.32,
    ("default", "lexical"): 0.065,
    ("dialog", "all-MiniLM-L6-v2"): 0.445,
    ("dialog", "lexical"): 0.065,
}
LEXICAL = "lexical"
FLOOR_KEY = "composite_floor:{}:{}"  # machine state, written by `cairn calibrate-floor --model composite`


def composite_floor(settings: Settings, profile_name: str, embed_model: str | None) -> tuple[float, str]:
    """(the composite score under which nothing is injected, where it comes from): CAIRN_COMPOSITE_FLOOR when a
    number or off, else the floor calibrated from this machine's grades, else the shipped one."""
    raw = str(settings.COMPOSITE_FLOOR).strip().lower()
    if raw in ("off", "none", "0", "0.0"):
        return 0.0, "off"
    if raw != "auto":
        try:
            return float(raw), "CAIRN_COMPOSITE_FLOOR"
        except ValueError:
            raise ConfigError(f"CAIRN_COMPOSITE_FLOOR={raw!r} is not a number", "use auto, off or a number") from None
    from cairn_cli.core.store import state

    model = embed_model or LEXICAL
    calibrated = state.get(FLOOR_KEY.format(profile_name, model), settings)
    if calibrated is not None:
        return float(calibrated), "calibrated"
    return SHIPPED_FLOORS.get((profile_name, model), 0.0), "shipped"
