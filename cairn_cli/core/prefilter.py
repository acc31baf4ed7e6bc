"""Bucket-4 prefilter: memories about the memory system itself rather than the work.

A classifier of the memory's text, below the store and the ranking alike: the full-text index records its verdict
when a memory is written (core/store/search_index.py), the rank engine applies it when it loads memories.

A memory is self-referential meta when it talks about cairn's own machinery (memories, injection, grading,
the [cm] block) and not about the project. Such memories crowd out useful ones and reinforce themselves, so
they never rank (RELEVANCE_PREFILTER_ENABLED, default on). Corrections are exempt: a correction about how
the agent should behave is exactly what must reach it.
"""

from __future__ import annotations

import re

EXEMPT_KINDS = frozenset({"correction"})

# Phrases that only make sense about the memory machinery itself.
_META_PHRASES = re.compile(
    r"\[cm\]|\bcm block\b|\brg grades?\b|\bmemory (system|store|rules?|block|hook|injection|delivery|deliveries)\b"
    r"|\b(injected|delivered|retrieved|stored|saved|recorded|wrote|written|logged) (a |the |this |these |those )?memor(y|ies)\b"
    r"|\bmemor(y|ies) (was|were|is|are) (injected|delivered|retrieved|shown|graded|stored|saved|useful|irrelevant|relevant)\b"
    r"|\bgrad(e|ed|ing) (the |of )?(injected |delivered )?memor(y|ies)\b"
    r"|\b(this|that|the previous|a previous|earlier) memory\b"
    r"|\bremember to (write|save|record|store)\b|\bsave (this|it) (as|to) (a )?memory\b"
    r"|\bengagement (label|score|rate)\b",
    re.IGNORECASE,
)
# Words that anchor a memory in the work: code, paths, commands, errors.
_WORK_ANCHOR = re.compile(
    r"`[^`]+`|\b\w+\.(py|js|ts|rs|go|json|toml|ya?ml|md|sql|sh)\b|/\w+/|\b\w+_\w+\b|\b[A-Z]{2,}\w*\b"
)


def is_self_referential_meta(content: str, kind: str = "fact") -> bool:
    """True when the memory is about the memory system rather than the work (corrections never are)."""
    if kind in EXEMPT_KINDS:
        return False
    hits = len(_META_PHRASES.findall(content))
    if hits == 0:
        return False
    if kind == "meta" or hits >= 2:
        return True
    # one meta phrase: meta unless the memory is anchored in concrete work
    return not _WORK_ANCHOR.search(content.replace("[cm]", ""))
