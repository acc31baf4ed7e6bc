"""Ranking profiles: how the composite combines its components for a kind of store, chosen per scope.

The shipped default, `auto`, reads the kind of store the scope is (core/ranking/kinds.py) and ranks it with that
kind's profile; CAIRN_RANK_PROFILE=default or =dialog forces one everywhere (an override). Every delivery records
the profile it was ranked with and what chose it.

- `default` (notes, facts, passages): the seed's composite, the weights in the settings (similarity 0.50,
  keywords 0.15, scope 0.05, confidence and recency 0).
- `sequence` (notes whose order carries meaning: kinds.py): the same weights, plus a note is read with its
  neighbours, as a turn is (below), more lightly: SEQUENCE_CONTEXT_KEYWORDS and SEQUENCE_NEIGHBOUR_WEIGHT, fitted
  on the LoCoMo dev observations.
- `dialog` (conversation turns): the same weights, plus a turn is read with the turns around it: the keywords of a
  memory joined with its previous neighbour's (the turn it answers) weigh CONTEXT_KEYWORDS, and each memory gets
  NEIGHBOUR_WEIGHT of the better of its two neighbours' scores (the memories written just before and after it in
  the same session, else scope). Fitted on the four LoCoMo dev conversations (scripts/bench_ranking.py: the grid
  is in bench/ranking.md), reported on the other three and on stores never fitted on (bench/relevance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.ranking.kinds import DIALOG, SEQUENCE
from cairn_cli.errors import ConfigError

AUTO = "auto"
PROFILES = ("default", "sequence", "dialog")
CONTEXT_KEYWORDS = 0.30
NEIGHBOUR_WEIGHT = 0.5
SEQUENCE_CONTEXT_KEYWORDS = 0.15
SEQUENCE_NEIGHBOUR_WEIGHT = 0.35
_OF_KIND = {DIALOG: "dialog", SEQUENCE: "sequence"}  # any other kind: default


@dataclass(frozen=True)
class Profile:
    name: str  # default | dialog: the floor's key and what the delivery log records
    weights: dict[str, float]
    neighbour_weight: float = 0.0
    context_keywords: float = 0.0
    coverage: bool = False  # the floor reads the relevance times the share of the query the store knows
    chosen_by: str = "CAIRN_RANK_PROFILE"  # or "auto": the scope's kind of store


def profile(settings: Settings, name: str | None = None, *, kind: str | None = None) -> Profile:
    """The ranking profile in force: CAIRN_RANK_PROFILE (or `name`), where `auto` takes the one of the scope's
    kind of store (`kind`, core/ranking/kinds.py; None, unknown: default)."""
    name = name or settings.RANK_PROFILE
    chosen_by = "CAIRN_RANK_PROFILE"
    if name == AUTO:
        name, chosen_by = _OF_KIND.get(kind or "", "default"), AUTO
    weights = settings.weights()
    if name == "default":
        return Profile("default", weights, chosen_by=chosen_by)
    if name == "sequence":
        return Profile(
            "sequence",
            weights,
            neighbour_weight=SEQUENCE_NEIGHBOUR_WEIGHT,
            context_keywords=SEQUENCE_CONTEXT_KEYWORDS,
            coverage=True,
            chosen_by=chosen_by,
        )
    if name == "dialog":
        return Profile(
            "dialog",
            weights,
            neighbour_weight=NEIGHBOUR_WEIGHT,
            context_keywords=CONTEXT_KEYWORDS,
            coverage=True,
            chosen_by=chosen_by,
        )
    raise ConfigError(
        f"unknown ranking profile {name!r}", "set CAIRN_RANK_PROFILE to auto, default, sequence or dialog"
    )


# Shipped composite floors, one per kind of store (profile) and embedding model ("lexical": the fallback, no
# similarity): each the highest floor losing <= 0.01 R@5 on its kind's LoCoMo dev conversations (scripts/
# bench_relevance.py, bench/relevance.md: the trade-off per kind and on the held-out conversations). Nothing
# relevant = the unanswerable questions, another conversation's questions and TREC DL 2019 queries.
# - default/MiniLM 0.315 (plain notes; fitted on the observations ranked by the seed's composite): dev 54.8% of
#   nothing-relevant prompts abstain, held-out 49.6% for 0.009 R@5.
# - sequence/MiniLM 0.11 and dialog/MiniLM 0.25 read the relevance times the share of the prompt the store knows
#   (Profile.coverage; with a plain floor they abstained on 29% and 10-13% at that cost): sequence (observations)
#   dev 38.2%, held-out 27.5% for 0.001 R@5; dialog (turns) dev 46.3%, held-out 36.7% for 0.004 R@5.
# - lexical 0.065: the fallback's (it ranks every store with the default profile under auto).
# A store without a shipped floor (the hashing test encoder) has 0.
SHIPPED_FLOORS = {
    ("default", "all-MiniLM-L6-v2"): 0.315,
    ("default", "lexical"): 0.065,
    ("sequence", "all-MiniLM-L6-v2"): 0.11,
    ("sequence", "lexical"): 0.065,
    ("dialog", "all-MiniLM-L6-v2"): 0.25,
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
    from cairn_cli.core.store.embedders import base_of

    # a learned embedder's cosines are calibrated to its base's scale (core/store/embedders.py): its base's floor
    model = base_of(embed_model) if embed_model else LEXICAL
    calibrated = state.get(FLOOR_KEY.format(profile_name, model), settings)
    if calibrated is not None:
        return float(calibrated), "calibrated"
    return SHIPPED_FLOORS.get((profile_name, model), 0.0), "shipped"
