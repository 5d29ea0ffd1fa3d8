"""BM25's sums and best-K selection as C loops: what a zone of many documents spends a never-seen intent on.

:meth:`tooldns.scoring.bm25.BM25.rank` and :meth:`~tooldns.scoring.bm25.FacetRanker.rank` add a
query's posting lists by document and keep the K best. In Python that is either a dict (cheap for a
few postings) or numpy (some ten calls of a few thousand instructions each, whatever the size: at
ToolRet's root, 500 facets and some 600 postings, about 120,000 instructions a query). Here the same
sums are added in a C array, in the same order (so the same floats), the best of each document's
facets taken, and the K best picked with ties in document order, as the other two ways do: about
15 instructions a posting and 10 a facet (docs/performance.md, "Many postings summed in C").
:func:`all_sums` gives every document's sum instead (:meth:`~tooldns.scoring.bm25.BM25.score_array`,
what the ``hybrid`` scorer fuses with cosines).

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`tooldns.scoring.bm25` keeps its own ways.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.scoring.sums runs compiled only (TOOLDNS_COMPILE=1 pip install -e .)")

from cython.cimports.libc.stdlib import calloc, free, malloc  # noqa: E402

#: documents summed in an array on the stack (8 KiB); more in one from the heap
SMALL = cython.declare(cython.Py_ssize_t, 1024)  # the size of `small` in best_sums


def _packed(posting) -> tuple:
    """*posting*'s documents as C ints and its weights as C doubles (two bytes objects), made for a
    list that holds none yet, and kept on it (:attr:`tooldns.scoring.bm25._Posting.packed`) when it
    can keep them."""
    from array import array

    try:
        documents, weights = array("i"), array("d")
        for document, weight in posting:
            documents.append(document)
            weights.append(weight)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"a posting list is (document, weight) pairs: {exc}") from None
    packed = (documents.tobytes(), weights.tobytes())
    try:
        posting.packed = packed
    except AttributeError:  # a plain list
        pass
    return packed


def owner_numbers(owners) -> bytes:
    """*owners* (ints: the document each facet is of) as :func:`best_sums` reads them: C ints."""
    from array import array

    return array("i", owners).tobytes()


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, k=cython.Py_ssize_t, n_out=cython.Py_ssize_t, i=cython.Py_ssize_t,
               sums=cython.p_double, own=cython.p_int, small=cython.double[1024])
def best_sums(lists, n, k, owners=None):
    """The *k* best (document, score) pairs, best first, ties and documents scoring 0 in document
    order, of *n* documents whose scores are the weights of posting *lists* (each a sequence of
    (document, weight) pairs, weights above 0) added by document in the lists' order. Each list is
    read once as C arrays (:func:`_packed`), and kept so on a :class:`~tooldns.scoring.bm25._Posting`.

    With *owners* (:func:`owner_numbers` of the document each of the ``n`` facets is of, the facets
    of document 0 first, then those of document 1 ...), the documents are the owners, one more
    than the last of them, each scoring its best facet's sum.
    """
    if k <= 0 or n <= 0:
        return []
    _check_owners(owners, n)
    packed = _packed_lists(lists)
    # after the Python code above: nothing runs between taking the pointer and reading through it
    own = cython.NULL if owners is None else cython.cast(cython.p_int, cython.cast(cython.p_char, owners))
    if n <= SMALL:  # on the stack: calloc costs more than the sums at a root of some 500 facets
        sums = cython.address(small[0])
        for i in range(n):
            sums[i] = 0.0
    else:
        sums = cython.cast(cython.p_double, calloc(n, cython.sizeof(cython.double)))
        if sums == cython.NULL:
            raise MemoryError()
    try:
        _add(packed, sums, n)
        n_out = n if own == cython.NULL else _best_facets(sums, own, n)
        return _top(sums, n_out, k)
    finally:
        if n > SMALL:
            free(sums)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, m=cython.Py_ssize_t, i=cython.Py_ssize_t, sums=cython.p_double,
               own=cython.p_int, view=cython.double[::1])
def all_sums(lists, out, owners=None):
    """Every document's score written into *out* (a writable buffer of C doubles, one a document, such
    as ``numpy.zeros(n)``), which is returned: the sums :func:`best_sums` ranks, added in the same order
    (the same floats as the dict of few postings and numpy's dense rows), documents no list touches
    0. With *owners* (:func:`owner_numbers`), the lists are of facets and each document's score is its
    best facet's sum, as :func:`best_sums` takes them.

    What the ``hybrid`` scorer fuses with cosines (:meth:`tooldns.scoring.bm25.BM25.score_array`): a
    leaf of 450 tools summed in Python, a dict of the documents touched, was a third of what a lazy
    server of a million hybrid tools spent answering (2026-12-06)."""
    view = out
    m = view.shape[0]
    if owners is not None and type(owners) is not bytes:
        raise ValueError("owners must name the document of each facet (owner_numbers)")
    n = m if owners is None else len(owners) // cython.sizeof(cython.int)
    _check_owners(owners, n)
    packed = _packed_lists(lists)
    for i in range(m):
        view[i] = 0.0
    if n == 0:
        if m:
            raise ValueError("owners must name the document of each facet, and every document has one")
        return out
    if owners is None:  # straight into out
        _add(packed, cython.address(view[0]), n)
        return out
    sums = cython.cast(cython.p_double, calloc(n, cython.sizeof(cython.double)))
    if sums == cython.NULL:
        raise MemoryError()
    try:
        _add(packed, sums, n)
        own = cython.cast(cython.p_int, cython.cast(cython.p_char, owners))
        if _best_facets(sums, own, n) != m:
            raise ValueError(f"out holds {m} scores, the owners name {own[n - 1] + 1} documents")
        for i in range(m):
            view[i] = sums[i]
    finally:
        free(sums)
    return out


def _check_owners(owners, n) -> None:
    """Raise ValueError unless *owners* is None or :func:`owner_numbers` of *n* facets."""
    if owners is not None and (type(owners) is not bytes
                               or len(owners) != n * cython.cast(cython.Py_ssize_t, cython.sizeof(cython.int))):
        raise ValueError("owners must name the document of each of the n facets (owner_numbers)")


def _packed_lists(lists) -> list:
    """Each of posting *lists* as C arrays (:func:`_packed`), those kept on a list read from it."""
    packed = []
    for posting in lists:
        held = getattr(posting, "packed", None)
        packed.append(held if held is not None else _packed(posting))
    return packed


@cython.cfunc
@cython.returns(cython.int)
@cython.exceptval(-1)
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(sums=cython.p_double, n=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t,
               size=cython.Py_ssize_t, d=cython.p_int, ws=cython.p_double, docs=bytes, weights=bytes)
def _add(packed, sums, n):
    """Add the (documents, weights) C arrays of *packed* to *sums*, list after list."""
    for docs, weights in packed:
        size = len(docs) // cython.sizeof(cython.int)
        if len(weights) != size * cython.cast(cython.Py_ssize_t, cython.sizeof(cython.double)):
            raise ValueError("a packed posting list holds as many weights as documents")
        d = cython.cast(cython.p_int, cython.cast(cython.p_char, docs))
        ws = cython.cast(cython.p_double, cython.cast(cython.p_char, weights))
        for j in range(size):
            i = d[j]
            if cython.cast(cython.size_t, i) >= cython.cast(cython.size_t, n):  # below 0 too: one comparison
                raise IndexError(f"posting of document {i}, of {n}")
            sums[i] += ws[j]
    return 0


@cython.cfunc
@cython.returns(cython.Py_ssize_t)
@cython.exceptval(-1)
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(sums=cython.p_double, own=cython.p_int, n=cython.Py_ssize_t, i=cython.Py_ssize_t, owner=cython.int)
def _best_facets(sums, own, n):
    """Each owner's best facet into ``sums[owner]``, in place (an owner's number is at most its first
    facet's), checking that the facets of document 0 come first, then those of 1 ...; the owners' count."""
    for i in range(n):
        owner = own[i]
        if i and owner == own[i - 1]:
            if sums[i] > sums[owner]:
                sums[owner] = sums[i]
        elif owner == (own[i - 1] + 1 if i else 0):
            sums[owner] = sums[i]
        else:
            raise ValueError("owners must number the documents 0, 1, 2 ... each for one facet or more")
    return own[n - 1] + 1


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(sums=cython.p_double, n=cython.Py_ssize_t, k=cython.Py_ssize_t, j=cython.Py_ssize_t,
               m=cython.Py_ssize_t, count=cython.Py_ssize_t, v=cython.double, best=cython.p_double,
               at=cython.p_Py_ssize_t)
def _top(sums, n, k) -> list:
    """The *k* best of the *n* *sums* as (document, score), best first, ties in document order."""
    if k > n:
        k = n
    best = cython.cast(cython.p_double, malloc(k * cython.sizeof(cython.double)))
    at = cython.cast(cython.p_Py_ssize_t, malloc(k * cython.sizeof(cython.Py_ssize_t)))
    if best == cython.NULL or at == cython.NULL:
        free(best)
        free(at)
        raise MemoryError()
    count = 0
    for j in range(n):  # insertion into the k best so far: a later equal score stays behind
        v = sums[j]
        if count == k and not v > best[count - 1]:
            continue
        m = count if count < k else k - 1
        while m > 0 and v > best[m - 1]:
            best[m] = best[m - 1]
            at[m] = at[m - 1]
            m -= 1
        best[m] = v
        at[m] = j
        if count < k:
            count += 1
    out = [(at[m], best[m]) for m in range(count)]
    free(best)
    free(at)
    return out
