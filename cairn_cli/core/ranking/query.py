"""What a ranking reads off the context window: the prompt is the query, the session's earlier turns are context
that can only add to it (#26: ranked as one text, a session's unrelated earlier turns drowned the prompt).

- similarity: max(the prompt's cosine, the whole window's cosine - CONTEXT_SIMILARITY_MARGIN) per memory
  (scoring.py's `fuse_similarities`): a memory never scores under its cosine to the prompt, and one close to the
  earlier turns outranks one as close to the prompt only by more than the margin. A margin, not a factor: the
  window's cosine stays on the scale the composite floor reads, so that a prompt that says nothing by itself
  ("and how do I fix that?") is still answered from the turn it follows.
- keywords: BM25 over the prompt's terms at weight 1 and the earlier turns' terms (role words left out) at
  CONTEXT_TERM_WEIGHT (a term of the prompt keeps 1): a weighted query, scoring.py's and the fallback's.

A window without earlier turns is the prompt alone and ranks exactly as the prompt always did: one vector, every
term at 1. The window's text and key stay what was ranked and logged (context.py). Stdlib only (hot path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cairn_cli.config import Settings
from cairn_cli.core.ranking.context import ContextWindow
from cairn_cli.core.text import terms


@dataclass(frozen=True)
class WindowWeights:
    """How the earlier turns count beside the prompt; what every delivery records."""

    margin: float  # CONTEXT_SIMILARITY_MARGIN, 0..1: the window's cosine counts less this (1: not at all)
    terms: float  # CONTEXT_TERM_WEIGHT, 0..1: an earlier turn's term beside a prompt's (1)

    @property
    def uses_window_vector(self) -> bool:
        return self.margin < 1.0

    def as_dict(self, turns: int) -> dict:
        return {"turns": turns, "similarity_margin": self.margin, "term_weight": self.terms}


def window_weights(settings: Settings) -> WindowWeights:
    return WindowWeights(
        margin=min(max(float(settings.CONTEXT_SIMILARITY_MARGIN), 0.0), 1.0),
        terms=min(max(float(settings.CONTEXT_TERM_WEIGHT), 0.0), 1.0),
    )


def has_context(context: ContextWindow) -> bool:
    """Whether the window holds anything beside the prompt."""
    return context.text != context.prompt and any(text for _, text in context.earlier)


def embed_texts(context: ContextWindow, weights: WindowWeights) -> list[str]:
    """What to embed, in one call: the prompt, then the whole window when its cosine counts (the prompt alone:
    the window is the prompt)."""
    if not has_context(context):
        return [context.text]
    return [context.prompt, context.text] if weights.uses_window_vector else [context.prompt]


def term_weights(context: ContextWindow, weights: WindowWeights) -> Mapping[str, float] | None:
    """The query's terms and their weights: the prompt's at 1, the earlier turns' (role words left out) at the
    term weight; None when there is nothing beside the prompt (every term of the text at 1, as always)."""
    if not has_context(context):
        return None
    out: dict[str, float] = {}
    if weights.terms > 0:
        for _, text in context.earlier:
            out.update(dict.fromkeys(terms(text), weights.terms))
    out.update(dict.fromkeys(terms(context.prompt), 1.0))
    return out
