"""Tokens, stop words and stems: the one lexical vocabulary shared by scoring, prefilter and engagement.

Stdlib + PyStemmer (a small C extension) only: this runs on the hook's hot path.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "cannot",
        "could",
        "couldn",
        "did",
        "didn",
        "do",
        "does",
        "doesn",
        "doing",
        "don",
        "down",
        "during",
        "each",
        "else",
        "etc",
        "ever",
        "every",
        "few",
        "for",
        "from",
        "further",
        "get",
        "gets",
        "got",
        "had",
        "hadn",
        "has",
        "hasn",
        "have",
        "haven",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "isn",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "lets",
        "like",
        "ll",
        "may",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "mustn",
        "my",
        "myself",
        "need",
        "needs",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "per",
        "please",
        "re",
        "really",
        "s",
        "same",
        "shall",
        "shan",
        "she",
        "should",
        "shouldn",
        "so",
        "some",
        "such",
        "t",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "thus",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "use",
        "used",
        "using",
        "ve",
        "very",
        "via",
        "was",
        "wasn",
        "way",
        "we",
        "well",
        "were",
        "weren",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "within",
        "without",
        "won",
        "would",
        "wouldn",
        "yes",
        "yet",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)

# identifiers such as HF_HUB_OFFLINE, build_context_window, v1.2, foo-bar/baz stay whole and also split
_WORD = re.compile(r"[a-z0-9]+(?:[_.\-/][a-z0-9]+)*")
_PART = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=1)
def _stemmer():
    """PyStemmer's English stemmer: a runtime dependency, never silently replaced (ranking and engagement would
    quietly differ from what the tests measured)."""
    try:
        import Stemmer
    except ImportError:
        from cairn_cli.errors import MissingDependency

        raise MissingDependency(
            "PyStemmer is not installed", "pip install 'PyStemmer>=2.2' (or reinstall cairn)"
        ) from None
    return Stemmer.Stemmer("english").stemWord


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    return _stemmer()(word)


def words(text: str) -> list[str]:
    """Lower-cased words; compound identifiers are kept whole and followed by their parts."""
    out: list[str] = []
    for match in _WORD.findall(text.lower()):
        out.append(match)
        if not match.isalnum():
            out.extend(_PART.findall(match))
    return out


def terms(text: str) -> list[str]:
    """Stemmed content terms, stop words and one-character tokens dropped, order and repeats kept."""
    return [stem(w) for w in words(text) if _content_word(w)]


def _content_word(word: str) -> bool:
    if word.isdigit():
        return len(word) >= 3  # years, ports and error codes carry meaning; "1" does not
    return len(word) > 1 and word not in STOP_WORDS


def term_set(text: str) -> set[str]:
    return set(terms(text))


def normalise(text: str) -> str:
    """Dedup normal form: NFKC, case-folded, whitespace folded, edge punctuation stripped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).strip(" \t.,;:!?\"'`")


_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def stated_numbers(text: str) -> frozenset[str]:
    """The numbers a text states (ports, versions, counts, dates): two memories that state different ones are never
    merged as near-duplicates (`port 8001` and `port 8002` embed almost alike)."""
    return frozenset(_NUMBER.findall(text))


def context_key(text: str) -> str:
    """The key of a context window: the first 16 hex digits of its SHA-256 (the same window, the same key)."""
    return sha256(text)[:16]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def clean_keywords(raw) -> list[str]:
    """Keywords as given (list or comma-separated), trimmed, case-folded, unique, order kept."""
    items = raw.split(",") if isinstance(raw, str) else list(raw or [])
    seen: dict[str, None] = {}
    for item in items:
        kw = " ".join(str(item).split()).casefold()
        if kw:
            seen.setdefault(kw, None)
    return list(seen)


def escape(text: str, quote: bool = True) -> str:
    """html.escape's result (&, <, >, and with `quote` " and '), without importing html: its entity table costs the
    hook's hot path about a millisecond."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;").replace("'", "&#x27;") if quote else text
