"""What kind of store a scope is, read off its memories: `dialog` (conversation turns), `sequence` (notes whose
order carries meaning: each is about what the one before it is about) or `notes` (everything else).

A store of conversation turns is ranked differently from a store of notes (core/ranking/profiles.py): a turn is
understood with the turn it answers. The kind is read from the memories themselves, so that nobody has to set it:
people talking say "I" ("I went…", "my sister…"), while notes, facts and passages are written in the third person or
the imperative (web text says "you", seldom "I"). A scope is `dialog` when at least DIALOG_SHARE of its memories
hold a first-person singular pronoun and it has at least MIN_MEMORIES memories (a handful decides nothing: `notes`,
the seed's ranking). Shares measured per store: LoCoMo turns 0.52–0.67 (the same without the "Speaker:" prefix),
LoCoMo observations 0.00–0.01, Cranfield abstracts 0.04, TREC DL 2019 passages (each query's top 100) 0.00–0.21;
DIALOG_SHARE sits between the two groups.

A store of notes is a `sequence` when its neighbours (the memories written just before and after each other in a
session, else in the scope's order) are more alike than two memories drawn at random: the mean cosine of adjacent
memories less that of random pairs is at least ORDERED_COHERENCE. Facts noted session by session, or passages
filed by topic, are; a pile of search results is not. Measured per store: LoCoMo observations 0.135–0.182 and turns
0.103–0.197 (ORDERED_COHERENCE sits just under the least of the LoCoMo dev stores), TREC DL 2019 top-100s median
0.03. This one needs the embeddings (the daemon's table; the fallback ranks every store of notes as `notes`).

At most SAMPLE memories (or pairs) are read, spread evenly over the scope (a 100k store is sampled, not read).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

DIALOG = "dialog"
SEQUENCE = "sequence"
NOTES = "notes"
KINDS = (DIALOG, SEQUENCE, NOTES)
ORDERED_COHERENCE = 0.10
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


def neighbour_coherence(matrix, slots: Sequence[int], before: Sequence[int]) -> float:
    """Mean cosine of each memory and the one written before it (rows `slots[i]`, `before[i]` of `matrix`, unit
    vectors; at most SAMPLE pairs, spread evenly) less the mean over as many random pairs of those memories (seeded
    by their number: the same store, the same answer). 0 without pairs."""
    import random  # here, not at the top: the fallback's hot path imports this module and never needs it

    if len(slots) < 2:
        return 0.0
    step = max(1, len(slots) // SAMPLE)
    left, right = list(slots[::step]), list(before[::step])
    pool = sorted(set(slots) | set(before))
    draw = random.Random(len(pool))
    a = [pool[draw.randrange(len(pool))] for _ in left]
    b = [pool[draw.randrange(len(pool))] for _ in left]
    adjacent = float((matrix[left] * matrix[right]).sum(axis=1).mean())
    drawn = float((matrix[a] * matrix[b]).sum(axis=1).mean())
    return adjacent - drawn
