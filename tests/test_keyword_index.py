"""A big store's postings held in memory (#30, core/store/keyword_index.py): BM25 of every memory as the fallback
computes it from the index rows, through changes, merges, a save and an open; and the engine that keeps them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cairn_cli.core.ranking.fallback import _doc_bm25
from cairn_cli.core.store.keyword_index import KeywordIndex
from cairn_cli.core.store.search_index import index_row
from cairn_cli.db.fulltext import Doc

_VOCABULARY = "deploy cache index query server client socket timeout retry config module error garden sister lake"
WORDS = _VOCABULARY.split()


def _doc(memory_id: int, rnd: random.Random, scope: str | None = None, meta: bool = False) -> Doc:
    content = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12)))
    keywords = rnd.sample(WORDS, rnd.randint(0, 3))
    row = index_row(memory_id, content, keywords, "fact", scope or rnd.choice(["a", "b", "global"]), "s1")
    if meta:
        row = (*row[:2], 1, *row[3:])
    return Doc._make(row)


def _expected(docs: dict[int, Doc], idf, scopes, *, weight: int, avgdl: float, with_meta: bool = True):
    out = {}
    for i, doc in docs.items():
        if (scopes is None or doc.scope in scopes) and (with_meta or not doc.meta):
            score = _doc_bm25(doc, idf, weight, avgdl)
            if score:
                out[i] = score
    return out


def _got(index: KeywordIndex, idf, scopes, *, weight: int = 2, avgdl: float = 7.0, with_meta: bool = True):
    ids, scores = index.bm25(idf, scopes, with_meta=with_meta, weight=weight, avgdl=avgdl, k1=1.2, b=0.75)
    assert list(ids) == sorted(ids)
    return {int(i): float(s) for i, s in zip(ids, scores) if s}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert np.allclose([a[i] for i in sorted(a)], [b[i] for i in sorted(a)], rtol=1e-12)


IDF = {"deploy": 1.3, "cache": 0.7, "lake": 2.1, "nowhere": 5.0}


@pytest.mark.parametrize("weight", [1, 2, 3])
def test_bm25_of_every_memory_is_the_fallbacks_through_changes_merges_and_a_reopen(tmp_path, weight):
    rnd = random.Random(weight)
    docs = {i: _doc(i, rnd, meta=i % 9 == 0) for i in range(1, 301)}
    index = KeywordIndex(tmp_path / "kw")
    index.apply(list(docs), list(docs.values()), bulk=True)
    index.settle()
    for scopes in (None, ["a", "global"], ["b"]):
        for with_meta in (True, False):
            want = _expected(docs, IDF, scopes, weight=weight, avgdl=7.0, with_meta=with_meta)
            _same(_got(index, IDF, scopes, weight=weight, with_meta=with_meta), want)
    # changes read at once from the overlay: rewritten, moved, gone (superseded: no row), new
    for i in (3, 5, 8):
        docs[i] = _doc(i, rnd, scope="b")
    gone = [10, 11]
    for i in gone:
        docs.pop(i)
    docs[400] = _doc(400, rnd, scope="a")
    index.apply([3, 5, 8, 10, 11, 400], [docs[i] for i in (3, 5, 8, 400)])
    _same(_got(index, IDF, None, weight=weight), _expected(docs, IDF, None, weight=weight, avgdl=7.0))
    assert index.doc_freqs(["deploy"])["deploy"] == (
        sum(1 for d in docs.values() if "deploy" in d.terms and not d.meta),
        sum(1 for d in docs.values() if "deploy" in d.terms and d.meta),
    )
    index.merge()  # the overlay into the table: the same scores
    _same(_got(index, IDF, ["b"], weight=weight), _expected(docs, IDF, ["b"], weight=weight, avgdl=7.0))
    index.save()
    opened = KeywordIndex.open(tmp_path / "kw")
    assert opened.max_id == 400 and len(opened) == len(docs)
    _same(_got(opened, IDF, None, weight=weight), _expected(docs, IDF, None, weight=weight, avgdl=7.0))
    docs[7] = _doc(7, rnd, scope="a")  # the opened one applies changes like the first
    opened.apply([7], [docs[7]])
    _same(_got(opened, IDF, None, weight=weight), _expected(docs, IDF, None, weight=weight, avgdl=7.0))


def test_a_memory_changed_twice_before_its_bulk_arrays_settle_keeps_only_its_last_row(tmp_path):
    rnd = random.Random(3)
    docs = {i: _doc(i, rnd) for i in range(1, 50)}
    index = KeywordIndex(None)
    index.apply(list(docs), list(docs.values()), bulk=True)
    docs[4] = _doc(4, rnd, scope="a")
    index.apply([4], [docs[4]], bulk=True)
    index.apply([9], [])  # gone before the arrays settle
    docs.pop(9)
    index.settle()
    _same(_got(index, IDF, None), _expected(docs, IDF, None, weight=2, avgdl=7.0))
    assert sorted(index.scopes()) == sorted({d.scope for d in docs.values()})


def test_a_save_waits_for_a_merge_and_an_incomplete_save_is_built_again(tmp_path):
    rnd = random.Random(4)
    index = KeywordIndex(tmp_path / "kw")
    index.apply([1, 2], [_doc(1, rnd), _doc(2, rnd)])
    index.save()  # the overlay is not saved
    assert not (tmp_path / "kw" / "keywords.json").exists()
    index.merge()
    index.save()
    assert KeywordIndex.open(tmp_path / "kw").max_id == 2
    (tmp_path / "kw" / "keywords-terms.json").write_text("[]")  # a save cut short
    assert KeywordIndex.open(tmp_path / "kw").since is None  # nothing trusted: built from the store again


def test_a_word_no_memory_holds_any_more_leaves_the_vocabulary_at_the_next_merge():
    rnd = random.Random(5)
    index = KeywordIndex(None)
    index.apply([1, 2], [_doc(1, rnd), Doc._make(index_row(2, "zanzibar quokka secret", [], "fact", "a", "s1"))])
    index.merge()
    assert "zanzibar" in index.vocab
    index.apply([2], [])  # superseded
    index.merge()
    assert "zanzibar" not in index.vocab and "zanzibar" not in index._terms
    _same(_got(index, IDF, None), _expected({1: _doc(1, random.Random(5))}, IDF, None, weight=2, avgdl=7.0))


def test_the_scope_statistics_held_are_the_index_rows_own_and_follow_every_change():
    from cairn_cli.core.ranking.fallback import _scope_rows

    rnd = random.Random(6)
    docs = {i: _doc(i, rnd, meta=i % 7 == 0) for i in range(1, 120)}
    index = KeywordIndex(None)
    index.apply(list(docs), list(docs.values()), bulk=True)
    index.settle()

    def same():
        assert sorted(index.scope_stats()) == sorted(_scope_rows(docs.values()))

    same()
    docs[5] = _doc(5, rnd, scope="elsewhere")
    docs.pop(6)
    index.apply([5, 6], [docs[5]])
    same()
