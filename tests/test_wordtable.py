"""An index's words looked up in C (tooldns.scoring.wordtable): the same posting lists, in the same order,
as the dict and set a server running from source keeps (tooldns.scoring.bm25._WordLists), through new
words, repeated ones, a table that doubles, and one emptied while a new word is worked out.

The module exists only compiled (TOOLDNS_COMPILE=1 pip install ..., as CI installs); from source
BM25 keeps its dict, and these tests say so by skipping.
"""

import gc
import threading

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.scoring.bm25 import BM25, _WordLists

wordtable = pytest.importorskip("tooldns.scoring.wordtable",
                                reason="tooldns.scoring.wordtable runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)",
                                exc_type=ImportError)

DOCS = ["getHistoricalWeather for Hong Kong", "weather forecast tomorrow", "stock quotes and exchange rates",
        "send an SMS message", "HTTPServer logs 404 errors", "the forecasts of 2019 rainfall", "a b c"]
WORDS = ["weather", "Weather", "getHistoricalWeather", "forecast", "forecasts", "the", "stock", "SMS", "sms",
         "404", "2019", "HTTPServer", "zzz", "x", "rainfall", "hong", "Kong", "exchange", "rates", "a"]
SEPARATORS = [" ", "  ", ", ", "-", "_", "'", "\n", "...", "/"]


def _dict_lists(index: BM25) -> _WordLists:
    lists = _WordLists(index._postings)
    lists.table = None  # the source's way: a dict of words and a set of the dead ones
    return lists


texts = st.lists(st.tuples(st.one_of(st.sampled_from(WORDS), st.text("abcXYZ019", min_size=1, max_size=12)),
                           st.sampled_from(SEPARATORS)), max_size=40).map(lambda parts: "".join(w + s for w, s in parts))


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=30))
def test_the_table_gives_the_lists_the_dict_gives(queries):
    index = BM25(DOCS)
    fast, slow = _WordLists(index._postings), _dict_lists(index)
    assert fast.table is not None
    for text in queries + queries:  # the second time from what each kept
        assert fast.of_text(text) == slow.of_text(text), text


def test_the_table_doubles_and_keeps_every_word():
    index = BM25(DOCS)
    fast, slow = _WordLists(index._postings), _dict_lists(index)
    text = " ".join(f"w{i} weather x{i}Forecast" for i in range(3000))  # some 6,000 words: many doublings
    assert fast.of_text(text) == slow.of_text(text)
    assert len(fast.table) == len(slow) + len(slow.dead) > 6000
    assert fast.of_text(text) == slow.of_text(text)
    fast.clear()
    assert len(fast.table) == 0 and fast.of_text("weather forecast") == slow.of_text("weather forecast")


def test_a_table_emptied_while_a_new_word_is_worked_out_still_answers_right():
    """The shared word budget may empty every index's words while one of them works out a new word (and
    another thread may run then): the lookup goes on with the table as it is after."""
    index = BM25(DOCS)
    fast, slow = _WordLists(index._postings), _dict_lists(index)
    calls = [0]

    def found(word: bytes) -> tuple:
        calls[0] += 1
        if calls[0] % 3 == 0:
            fast.table.clear()
        return fast.found(word)

    for n in range(200):
        text = f"weather {n} forecast Stock{n} quotes 2019 the"
        assert fast.table.lists(text.encode("ascii"), found) == slow.of_text(text)
    assert calls[0] > 200


def test_a_lookup_run_by_a_collection_while_the_table_is_emptied_leaves_it_whole():
    """Emptying the table allocates, which may collect garbage and run a finalizer that looks a word
    up (as another thread may then): the table stays whole, and answers afterwards."""
    table = wordtable.WordTable()
    table.lists(b" ".join(b"w%d" % i for i in range(31)), lambda word: (word,))

    class Finalized:
        armed = True

        def __del__(self):
            if Finalized.armed:
                Finalized.armed = False
                table.lists(b"zzz", lambda word: (word,))

    def cycle() -> None:
        garbage = Finalized()
        garbage.self = garbage

    threshold = gc.get_threshold()
    gc.disable()
    try:
        held = [[] for _ in range(500)]  # no free lists: the table's new list is allocated, and may collect
        cycle()
        gc.set_threshold(1)
        gc.enable()
        table.clear()
    finally:
        gc.set_threshold(*threshold)
        gc.enable()
    del held
    gc.collect()
    assert table.lists(b"zzz w1", lambda word: (word,)) == [b"zzz", b"w1"]
    assert table.lists(b"zzz w1", lambda word: ("not kept",)) == [b"zzz", b"w1"]


def test_a_table_can_be_copied_and_starts_empty():
    import copy
    import pickle

    table = wordtable.WordTable()
    table.lists(b"weather forecast", lambda word: (word,))
    assert len(table) == 2
    assert len(copy.deepcopy(table)) == 0 and len(pickle.loads(pickle.dumps(table))) == 0


def test_many_threads_share_one_table():
    index = BM25(DOCS)
    fast, slow = _WordLists(index._postings), _dict_lists(index)
    texts = [f"weather {n} forecast{n} HTTPServer{n % 7} rates the {n * 7}" for n in range(400)]
    expected = [slow.of_text(t) for t in texts]
    wrong = []

    def ask(seed: int) -> None:
        for n in range(len(texts)):
            i = (seed * 31 + n) % len(texts)
            if fast.of_text(texts[i]) != expected[i]:
                wrong.append(texts[i])

    threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


@pytest.mark.parametrize("text, found", [("weather", lambda w: ["not a tuple"]), (b"weather".decode(), None)])
def test_the_table_refuses_what_it_cannot_read(text, found):
    table = wordtable.WordTable()
    with pytest.raises(TypeError):
        table.lists(text.encode("ascii"), found)
    with pytest.raises(TypeError):
        table.lists(text, lambda w: ())  # text, not bytes
