"""Bucket-4 prefilter on real-looking memories: about the memory system (drop) vs about the work (keep)."""

import pytest

from cairn_cli.core.prefilter import is_self_referential_meta

META = [
    (
        "Remember to write a memory whenever the user corrects you, and grade every injected memory in the [cm] block.",
        "meta",
    ),
    ("The previous memory about grading was injected but irrelevant to this session.", "fact"),
    ("Memories were injected at the start of the session but none were relevant to the refactor.", "fact"),
    ("I graded the delivered memories 0 because they were about another project.", "fact"),
    ("The memory system injected five memories and I used two of them.", "fact"),
    ("Save this as a memory: the memory rules say to write at two altitudes.", "meta"),
]
WORK = [
    ("Start PostgreSQL with `make db-up` before running pytest, or integration tests fail on port 5433.", "procedure"),
    ("The webshop stores prices in integer cents; floats broke the VAT report.", "pitfall"),
    ("The Redis memory limit is 2 GB; the eviction policy is allkeys-lru.", "fact"),
    ("Profiling showed the memory usage of `build_index` doubles with the new tokenizer.", "fact"),
    ("User prefers small commits with messages that explain why.", "preference"),
    ("The daemon keeps the embedding matrix in memory and refreshes it when rows change.", "fact"),
]


@pytest.mark.parametrize("content,kind", META)
def test_self_referential_meta_is_dropped(content, kind):
    assert is_self_referential_meta(content, kind)


@pytest.mark.parametrize("content,kind", WORK)
def test_work_memories_are_kept(content, kind):
    assert not is_self_referential_meta(content, kind)


def test_corrections_are_exempt():
    text = "Correction: grade the injected memories honestly in the [cm] block, 0 when unused."
    assert is_self_referential_meta(text, "meta")
    assert not is_self_referential_meta(text, "correction")
