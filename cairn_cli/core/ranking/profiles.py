"""Ranking profiles: named ways to combine the composite's components, for stores of a different kind.

`default` is the seed's composite (the weights in the settings: similarity 0.50, keywords 0.15, scope 0.05,
confidence and recency 0) and stays the default. `dialog` is opt-in (CAIRN_RANK_PROFILE=dialog) for stores whose
memories are conversation turns (short, conversational; names and dates carry the signal): keywords weigh 0.30,
and each memory gets half the score of the better of its neighbours (the memories written just before and after
it in the same session), because a turn is understood with the turns around it. Fitted on 4 LoCoMo dev
conversations and reported on the other 3 (scripts/bench_relevance.py, bench/relevance.md). Every delivery
records its profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.errors import ConfigError


@dataclass(frozen=True)
class Profile:
    name: str
    weights: dict[str, float]
    neighbour_weight: float = 0.0


def profile(settings: Settings, name: str | None = None) -> Profile:
    """The ranking profile in force (CAIRN_RANK_PROFILE), with the weights it gives the components."""
    name = name or settings.RANK_PROFILE
    weights = settings.weights()
    if name == "default":
        return Profile("default", weights)
    if name == "dialog":
        return Profile("dialog", {**weights, "keywords": 0.30}, neighbour_weight=0.5)
    raise ConfigError(f"unknown ranking profile {name!r}", "set CAIRN_RANK_PROFILE to default or dialog")


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
