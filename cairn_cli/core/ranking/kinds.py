"""What kind of store a scope is, read off its memories: `dialog` (conversation turns) or `notes` (everything else).

A store of conversation turns is ranked differently from a store of notes (core/ranking/profiles.py): a turn is
understood with the turn it answers. The kind is read from the memories themselves, so that nobody has to set it:
people talking say "I" ("I went…", "my sister…"), while notes, facts and passages are written in the third person or
the imperative (web text says "you", seldom "I"). A scope is `dialog` when at least DIALOG_SHARE of its memories
hold a first-person singular pronoun and it has at least MIN_MEMORIES memories (a handful decides nothing: `notes`,
the seed's ranking). Shares measured per store: LoCoMo turns 0.52–0.67 (the same without the "Speaker:" prefix),
LoCoMo observations 0.00–0.01, Cranfield abstracts 0.04, TREC DL 2019 passages (each query's top 100) 0.00–0.21;
DIALOG_SHARE sits between the two groups.

Stdlib only. At most SAMPLE memories are read, spread evenly over the scope (a 100k store is sampled, not read).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

DIALOG = "dialog"
NOTES = "notes"
KINDS = (DIALOG, NOTES)
DIALOG_SHARE = 0.35
MIN_MEMORIES = 8
SAMPLE = 2000

_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|i'll|i'd|me|my|mine|myself)\b", re.IGNORECASE)


def first_person_share(texts: Sequence[str]) -> float:
    """The share of `texts` (sampled evenly, at most SAMPLE) holding a first-person singular pronoun."""
    if not texts:
        return 0.0
    step = max(1, len(texts) // SAMPLE)
    sample = texts[::step]
    return sum(1 for t in sample if _FIRST_PERSON.search(t)) / len(sample)


def store_kind(texts: Sequence[str]) -> str:
    """`dialog` or `notes` for a scope whose memories' contents are `texts` (in any order)."""
    if len(texts) < MIN_MEMORIES:
        return NOTES
    return DIALOG if first_person_share(texts) >= DIALOG_SHARE else NOTES
