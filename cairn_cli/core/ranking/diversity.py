"""No redundant injection: two memories that say the same thing are never shown in one block; the slot goes to the
next distinct memory (a near-duplicate skip over the final order). Stdlib only: the fallback's hot path runs it.

Two memories are the same for injection when
- their contents are the same after normalisation (core/text.normalise, the write path's normalised dedup: the
  write path merges such a repeat only within a scope and into global, so the same text in a scope and in global,
  or imported into two scopes, reaches a ranking twice), or
- they state the same numbers (the write path's guard: `port 8001` and `port 8002` are two facts however alike the
  rest reads) and either
  - their embeddings' cosine is >= DUPLICATE_COSINE (the daemon path: both embedded by the table's model), or
  - the lower-ranked one adds next to nothing to the one kept: at least DUPLICATE_CONTAINMENT of its terms
    (lexical.py's field: content and keywords, stemmed, stop words out; at least DUPLICATE_MIN_TERMS of them) are
    the kept one's too (what the fallback can tell without a model; the daemon applies it as well, so it never shows
    a pair the fallback would keep apart). One way only: a memory that adds terms to a shorter one kept above it
    says more than it, and is shown.

A correction is set aside only as a repeat of another correction (or of the same normalised text): beside the
memory it corrects it says the opposite, however many words they share (the prefilter exempts corrections too).

The thresholds are fitted on the labelled LoCoMo observation pairs of scripts/dedup_labels.tsv and checked on R@5
(scripts/bench_diversity.py, bench/diversity.md): at injection a repeat costs a slot and a wrong skip costs one
memory the next distinct one replaces (not a memory hidden for good, as a wrong merge at write time), so a pair
counts as redundant when it is `dup` or `detail` (the same fact or event; one may add a detail).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cairn_cli.core.ranking.lexical import Scored
from cairn_cli.core.text import normalise, stated_numbers, terms

# Fitted by scripts/bench_diversity.py on the four dev LoCoMo conversations (bench/diversity.md): the lowest
# threshold whose labelled skips are redundant with precision >= TARGET_PRECISION (over >= 20 of them) and that
# keeps each dev store's R@5 within one question of the ranking without it; the term-set rule first (the
# fallback's), then the cosine with it in force. Write-time semantic dedup stays at 0.95 (strict precision 0.9,
# bench/dedup.md): a wrong merge hides a memory for good, a wrong skip here one slot for one prompt.
DUPLICATE_COSINE = 0.96  # refitted once observations rank as a sequence (#26): 0.90 before
DUPLICATE_CONTAINMENT = 0.75
DUPLICATE_MIN_TERMS = 5  # a two-word turn ("Melanie: Thanks!") adds nothing lexically to any memory naming her
TARGET_PRECISION = 0.75
CORRECTION = "correction"

Cosines = Mapping[int, Mapping[int, float]]  # memory id -> memory id -> the cosine of their embeddings


class Signature:
    """What the test reads of one memory: its term set, normalised content, stated numbers, whether a correction."""

    __slots__ = ("correction", "norm", "numbers", "terms")

    def __init__(self, content: str, keywords: list[str] | tuple[str, ...] = (), kind: str = "fact"):
        field = set(terms(content))
        for kw in keywords:
            field.update(terms(kw))
        self.terms = frozenset(field)
        self.norm = normalise(content)
        self.numbers = stated_numbers(content)
        self.correction = kind == CORRECTION


def contained(other: frozenset[str], kept: frozenset[str]) -> float:
    """The share of `other`'s terms that `kept` already has (0 for no terms): how little `other` adds to it."""
    return len(other & kept) / len(other) if other else 0.0


@dataclass(frozen=True)
class Rule:
    """The thresholds of the test (the shipped ones by default; the benchmark sweeps others)."""

    cosine: float = DUPLICATE_COSINE
    containment: float = DUPLICATE_CONTAINMENT
    min_terms: int = DUPLICATE_MIN_TERMS

    def repeats(self, kept: Signature, other: Signature, cos: float | None = None) -> tuple[str, float] | None:
        """Why `other` (ranked below `kept`) repeats it, (the rule, its value), or None; `cos`: their embeddings'
        cosine, None without one."""
        if kept.norm == other.norm:
            return "normalised", 1.0
        if other.correction and not kept.correction:
            return None
        if kept.numbers != other.numbers:
            return None
        if cos is not None and cos >= self.cosine:
            return "cosine", round(cos, 4)
        if len(other.terms) >= self.min_terms:
            share = contained(other.terms, kept.terms)
            if share >= self.containment:
                return "terms", round(share, 4)
        return None


SHIPPED = Rule()


class Distinct:
    """The near-duplicate test over one ranking's candidates. `cosines`: their embeddings' cosines (the daemon's
    table; None on the fallback, which has no model: the lexical tests alone)."""

    def __init__(self, cosines: Cosines | None = None, rule: Rule = SHIPPED):
        self.cosines = cosines or {}
        self.rule = rule
        self._signatures: dict[int, Signature] = {}

    def _sig(self, s: Scored) -> Signature:
        c = s.candidate
        got = self._signatures.get(c.id)
        if got is None:
            got = self._signatures[c.id] = Signature(c.content, c.keywords, c.kind)
        return got

    def same(self, kept: Scored, other: Scored) -> tuple[str, float] | None:
        """Why `other` repeats `kept` (the rule, its value), or None when it says something else."""
        cos = self.cosines.get(kept.candidate.id, {}).get(other.candidate.id)
        return self.rule.repeats(self._sig(kept), self._sig(other), cos)

    def select(self, ranked: list[Scored], k: int) -> tuple[list[Scored], int]:
        """`ranked` in its order without the memories that repeat a better one, and how many were passed over
        while the first `k` slots filled (the block's `dropped["duplicate"]`). A memory passed over records which
        it repeats (`skipped_duplicate_of`); the one kept records what it kept out of the block
        (`duplicates_skipped`), which the delivery log keeps. Past the k-th, repeats are left out uncounted (the
        exploration pool below the top k holds no repeat of what is shown either)."""
        out: list[Scored] = []
        passed = 0
        for s in ranked:
            why = next(((kept, r) for kept in out if (r := self.same(kept, s)) is not None), None)
            if why is None:
                out.append(s)
                continue
            kept, (rule, value) = why
            s.components["skipped_duplicate_of"] = {"id": kept.candidate.id, "by": rule, "value": value}
            if len(out) < k:
                passed += 1
                kept.components.setdefault("duplicates_skipped", []).append(
                    {"id": s.candidate.id, "by": rule, "value": value}
                )
        return out, passed

    def repeats(self, ranked: list[Scored], k: int) -> bool:
        """Whether repeats of a better memory leave fewer than `k` distinct memories in `ranked` (nothing
        recorded): the block would come up short where the ranking goes on."""
        kept: list[Scored] = []
        for s in ranked:
            if all(self.same(x, s) is None for x in kept):
                kept.append(s)
                if len(kept) >= k:
                    return False
        return len(kept) < len(ranked)

    def pairs(self, block: list[Scored]) -> int:
        """How many pairs of `block` say the same thing (nothing recorded): the redundancy of an injected block."""
        return sum(self.same(a, b) is not None for i, a in enumerate(block) for b in block[i + 1 :])
