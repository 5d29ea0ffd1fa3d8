"""A leaf's intent searches answered from a file mapped into memory: nothing of the zone made per tool.

A lazy server (:mod:`.lazy`) meets most leaves of a large tree for the first time, or again after it
dropped them for others. Read back from its snapshot (:mod:`.loader`), a leaf of about 700 tools of
a million-tool tree made its index's objects again: 4.5 ms, and 0.9 ms more for its first answer,
where a warm leaf answers in under 0.1 ms (``scripts/bench/bench_leaf.py``). A *leaf map* holds what the fast path answers an intent
search with, laid out to be read where it lies (as a CDB file is to tinydns): the names that ask
for a search, each tool list's terms in a hash table with their postings (documents and weights as
C ints and doubles, what the compiled sums read), and each tool's answer pieces. Opening one maps
it and reads a small header; a query looks its terms up in the table, sums their postings as the
zone's own index would (the same weights in the same order: the same scores and ties) and unpickles
the pieces of the few tools it answers with.

``tooldns build`` writes a map of each leaf it writes (:mod:`tooldns.building.maps`); the loading
process writes one beside a leaf's snapshot when it indexes the zone file (and the loading thread
when it reads a snapshot back for a file with no map). A map is named by a digest of the
code, the limits, the file's path and its stamp (modification time, size, inode: what the server
takes for a new version of a file when it reloads one). A lazy server whose leaf is not loaded
answers from its map when there is one; anything the map does not answer (a tool's own name, SOA,
a signed tree, an answer that needs the full path) loads the zone as before. Leaves ranked by BM25,
or by BM25 and vectors (``hybrid``), have maps; not a zone with children, an LLM-ranked or a signed
one. A hybrid leaf's map also holds its vectors (the unit rows its scorer compares intents with, as
float32, aligned, read where they lie): an intent that comes with its vector is answered from it,
and so is one without, embedded as the zone would embed it (the process's one embedder of the zone's
``embed_intents``), in the server's thread pool (:mod:`.offloop`).

A map is code to :mod:`pickle` as a snapshot is (its header and pieces): it is read under the same
rules (:func:`tooldns.serving.loader.open_trusted`).

    >>> leaf = LeafMap.open(map_path(".snapshots", "built/weather.tools.yaml", stamp, limits), open_trusted)
    >>> wire = MappedFastPath(leaf, INTENT_OPTION_CODE, stats).answer(query_bytes, udp=True)   # None: load the zone
"""

from __future__ import annotations

import hashlib
import mmap
import os
import pickle
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from dnslib.server import BaseResolver

import numpy as np

from ..embedding.registry import shared_intent_embeddings
from ..protocol.budget import Budget, Store
from ..scoring.bm25 import BM25, BM25Scorer, packed_posting, posting_bytes
from ..scoring.hybrid import HybridScorer
from .fast.pack import PackedZone
from .fast.path import FastPath, writers
from .index import Candidates, ZoneIndex, embedded_intent
from .lookup import Kind, Ranked
from .offloop import WouldWait, may_wait
from .resolver import StaticSource

#: the first octets of a leaf map, and its layout's version
MAGIC = b"TDNSMAP2"
#: a map's intent embeddings, before a query first needs them
_UNMADE = object()
#: a hybrid leaf's rows (float32) start at a multiple of this many bytes of the file
ALIGN = 64
_LENGTH = struct.Struct("<I")
_TERM = struct.Struct("<H")
_POSTING = struct.Struct("<II")
#: bytes of posting lists all maps of a process keep once looked up (copies out of the mapping), and
#: tools' answer pieces they keep once unpickled; past either, every map forgets its own at once
TERMS = Budget(64 << 20)
PIECES = Budget(1 << 16)


def map_name(code: str, limits, path: str, stamp) -> str:
    """The file name of the map of zone file *path* in version *stamp* (:func:`stat_stamp`), read by
    code of digest *code* within *limits*."""
    h = hashlib.sha256(code.encode())
    h.update(repr(limits).encode())
    h.update(os.path.abspath(path).encode())
    h.update(repr(tuple(stamp)).encode())
    return h.hexdigest()[:40] + ".map"


def mappable(index: ZoneIndex) -> bool:
    """Whether *index* can be answered from a map: a leaf ranked by BM25, or by BM25 and vectors
    (``hybrid``), without facets, unsigned, its fast path's pieces made."""
    if index.zone.children or index.packed_tools is None or index.packed_routes is None or index.signer is not None:
        return False
    return all(_lexical(c.scorer) is not None for c in index.tool_candidates.values())


def _lexical(scorer) -> BM25 | None:
    """The BM25 index a map holds of *scorer* (its own, or a hybrid scorer's lexical part); None
    when a map cannot stand for it."""
    if type(scorer) is BM25Scorer and scorer.facets is None:
        return scorer.index
    if type(scorer) is HybridScorer and scorer.facets is None:
        return scorer.lexical
    return None


def map_bytes(index: ZoneIndex) -> bytes | None:
    """The map of *index* (:func:`mappable`), or None when it has none."""
    if not mappable(index):
        return None
    position = {id(t): i for i, t in enumerate(index.zone.tools)}
    body = bytearray(b"\0")  # offset 0 stands for an empty slot
    sections, written = [], {}
    for key, candidates in index.tool_candidates.items():
        if id(candidates) not in written:
            laid = _section(body, candidates, position)
            if laid is None:
                return None
            written[id(candidates)] = len(sections)
            sections.append(([], *laid))
        sections[written[id(candidates)]][0].append(key)
    pieces = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in index.packed_tools]
    table = len(body)
    at = table + 4 * (len(pieces) + 1)
    for piece in pieces:
        body += _LENGTH.pack(at)
        at += len(piece)
    body += _LENGTH.pack(at)
    for piece in pieces:
        body += piece
    head = pickle.dumps({"origin": index.origin, "search_settings": index.search_settings,
                         "routes": index.packed_routes, "sections": sections, "pieces": table,
                         "tools": len(pieces), "embeds": index.zone.settings.embed_intents},
                        protocol=pickle.HIGHEST_PROTOCOL)
    head += bytes(-(len(MAGIC) + _LENGTH.size + len(head)) % ALIGN)  # the body aligned (unpickling ignores these)
    return MAGIC + _LENGTH.pack(len(head)) + head + bytes(body)


def _section(body: bytearray, candidates: Candidates, position: dict[int, int]) -> tuple | None:
    """One tool list's documents laid out at the end of *body*: where each stands in the zone's tools,
    then its postings, then its terms' hash table, then a hybrid scorer's rows (:func:`_rows`).
    (documents, positions' offset, table offset, mask, rows or None)."""
    postings = _lexical(candidates.scorer)._postings
    positions = len(body)
    body += b"".join(_LENGTH.pack(position[id(t)]) for t in candidates.entries)
    entries = []
    for term, posting in postings.items():
        packed = posting_bytes(posting)
        if packed is None:
            return None
        raw = term.encode("utf-8")
        entries.append((raw, len(body), len(packed[1]) // 8))
        body += packed[0] + packed[1]
    mask = (1 << max(3, (2 * len(entries)).bit_length())) - 1
    slots = [0] * (mask + 1)
    for raw, documents, count in entries:
        at = len(body)
        body += _TERM.pack(len(raw)) + raw + _POSTING.pack(count, documents)
        slot = zlib.crc32(raw) & mask
        while slots[slot]:
            slot = (slot + 1) & mask
        slots[slot] = at
    table = len(body)
    body += struct.pack(f"<{mask + 1}I", *slots)
    scorer = candidates.scorer
    return len(candidates.entries), positions, table, mask, _rows(body, scorer) if type(scorer) is HybridScorer else None


def _rows(body: bytearray, scorer: HybridScorer) -> tuple:
    """A hybrid scorer's unit rows (float32) and their documents (intp) at the end of *body*, aligned
    (:data:`ALIGN`): (rows' offset, their count, documents' offset, alpha, model, dim, centre's values)."""
    body += bytes(-len(body) % ALIGN)
    rows = len(body)
    body += np.ascontiguousarray(scorer.matrix, dtype=np.float32).tobytes()
    body += bytes(-len(body) % ALIGN)
    owners = len(body)
    body += np.ascontiguousarray(scorer.owners, dtype=np.intp).tobytes()
    centre = None if scorer.centre is None else np.asarray(scorer.centre, dtype=np.float32).tobytes()
    return rows, len(scorer.owners), owners, scorer.alpha, scorer.model, scorer.dim, centre


class _Terms:
    """One tool list's terms in a map: ``get(term)`` gives its posting list, read where it lies (and
    kept, within :data:`TERMS`), or *default* when the list does not hold it."""

    __slots__ = ("_map", "_base", "_table", "_mask", "_kept")

    def __init__(self, data: mmap.mmap, base: int, table: int, mask: int) -> None:
        self._map, self._base, self._table, self._mask = data, base, base + table, mask
        self._kept = TERMS.join(Store())

    def get(self, term: str, default=None):
        kept = self._kept.get(term)
        if kept is not None:
            return kept
        data, base, raw = self._map, self._base, term.encode("utf-8")
        slot = zlib.crc32(raw) & self._mask
        while True:
            (at,) = _LENGTH.unpack_from(data, self._table + 4 * slot)
            if not at:
                return default
            at += base
            (length,) = _TERM.unpack_from(data, at)
            if data[at + 2:at + 2 + length] == raw:
                count, documents = _POSTING.unpack_from(data, at + 2 + length)
                start = base + documents
                posting = packed_posting(data[start:start + 4 * count], data[start + 4 * count:start + 12 * count])
                TERMS.spend(12 * count)
                self._kept[term] = posting
                return posting
            slot = (slot + 1) & self._mask


class _Pieces:
    """The tools' answer pieces in a map (what :attr:`~.fast.pack.PackedZone.tools` holds), by their
    position in the zone, each unpickled when first asked and kept (within :data:`PIECES`)."""

    __slots__ = ("_data", "_table", "_base", "_n", "_made")

    def __init__(self, data: mmap.mmap, base: int, table: int, n: int) -> None:
        self._data, self._base, self._table, self._n = data, base, base + table, n
        self._made = PIECES.join(Store())

    def __getitem__(self, position: int) -> tuple:
        made = self._made.get(position)
        if made is None:
            if not 0 <= position < self._n:
                raise IndexError(position)
            start, end = struct.unpack_from("<II", self._data, self._table + 4 * position)
            PIECES.spend()
            made = self._made[position] = pickle.loads(self._data[self._base + start:self._base + end])
        return made


class _Tools:
    """One tool list's tools in a map, by their index in it: each one's answer pieces. (It holds the
    pieces, not the map, so that a map let go is freed at once, by its count of references.)"""

    __slots__ = ("_data", "_at", "_n", "_pieces")

    def __init__(self, data: mmap.mmap, at: int, n: int, pieces: _Pieces) -> None:
        self._data, self._at, self._n, self._pieces = data, at, n, pieces

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int):
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._pieces[_LENGTH.unpack_from(self._data, self._at + 4 * i)[0]]


class _NoTools:
    tools: list = []


class LeafMap:
    """A leaf's map, open: what :func:`tooldns.serving.lookup.ranked` and the fast path read of a zone
    index (a leaf's: no children; BM25, or BM25 and vectors), read from the mapped file."""

    signer = None
    child_candidates = None
    #: pieces kept in the fast path's packer are the ones answered; none are made ahead
    packed_tools: list = []
    zone = _NoTools()

    def __init__(self, data: mmap.mmap) -> None:
        if data[:len(MAGIC)] != MAGIC:
            raise ValueError("not a leaf map")
        (size,) = _LENGTH.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + 4
        head = pickle.loads(data[start:start + size])
        #: the mapping, where its body starts, and its length in bytes
        self.data, self.base, self.size = data, start + size, len(data)
        self.origin = head["origin"]
        self.search_settings = head["search_settings"]
        self.packed_routes = head["routes"]
        self.pieces = _Pieces(data, self.base, head["pieces"], head["tools"])
        #: the model of the leaf's vectors (None: BM25 alone), and the embedder spec with which the zone
        #: embeds intents that come without a usable vector ("": none; :meth:`intent_vector`)
        self.model, self.dim, self.embeds = None, 0, head["embeds"]
        self.intent_embeddings = True if self.embeds else None  # what lookup asks before intent_vector
        self._own = _UNMADE if self.embeds else None  # the process's embeddings of that spec, once needed
        self.tool_candidates = {}
        for keys, n, positions, table, mask, rows in head["sections"]:
            candidates = Candidates.__new__(Candidates)  # its entries are not walked for SELF: a leaf has none
            candidates.entries, candidates.has_self = _Tools(data, self.base + positions, n, self.pieces), False
            lexical = BM25.over(_Terms(data, self.base, table, mask), n)
            candidates.scorer = BM25Scorer.of_index(lexical) if rows is None else self._hybrid(lexical, *rows)
            for key in keys:
                self.tool_candidates[key] = candidates

    def _hybrid(self, lexical: BM25, rows: int, count: int, owners: int, alpha: float, model: str | None, dim: int,
                centre: bytes | None) -> HybridScorer:
        """A hybrid scorer over *lexical* and the rows laid out at *rows* and *owners* (:func:`_rows`),
        read where they lie."""
        if model is not None:
            self.model, self.dim = model, dim
        matrix = np.frombuffer(self.data, dtype=np.float32, count=count * dim, offset=self.base + rows)
        matrix = matrix.reshape(count, dim)
        documents = np.frombuffer(self.data, dtype=np.intp, count=count, offset=self.base + owners)
        return HybridScorer.over(lexical, matrix, documents, alpha=alpha, model=model, dim=dim,
                                 centre=None if centre is None else np.frombuffer(centre, dtype=np.float32))

    def intent_vector(self, text: str, sent):
        """The vector to rank *text* with, as the zone's own index gives it (:meth:`ZoneIndex.intent_vector`):
        the one the query sent when usable, else the intent embedded with the process's shared
        embedder of the zone's spec, made when first needed; either off the event loop
        (:class:`~.offloop.WouldWait`) unless done already."""
        if sent is not None and (sent.model, sent.dim) == (self.model, self.dim):
            return sent, False, False
        if self._own is _UNMADE:
            if not may_wait():  # making the model may take seconds
                raise WouldWait(f"{self.origin}: an embedder to make")
            self._own = shared_intent_embeddings(self.embeds)
        return embedded_intent(self.origin, self._own, text, sent is not None)

    @classmethod
    def open(cls, path: str | os.PathLike, opener: Callable) -> "LeafMap | None":
        """The map at *path*, when *opener* (which checks who may have written it) opens it; None
        when there is none. ValueError when it is not a map."""
        fh = opener(Path(path))
        if fh is None:
            return None
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size < len(MAGIC) + 4:
                raise ValueError("not a leaf map")
            data = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        try:
            return cls(data)
        except Exception:
            try:
                data.close()
            except BufferError:  # rows read where they lie, held by the exception's frames: freed with them
                pass
            raise



class MappedPacker(PackedZone):
    """The fast path's packer of a leaf map: an answer packs only the tools it carries, their pieces
    read from the map (a zone's packer made every tool's at once). Its :attr:`tools` are the pieces of
    the answer being packed (two packed at once in two threads: one may find the other's, and leave
    its query to the full path)."""

    def pack(self, data: bytes, query, route, ranked: Ranked, max_size: int) -> bytes | None:
        if ranked.kind is Kind.ANSWER:
            entries = [ranked.entries[i] for i, _ in ranked.chosen]
            self.tools = {id(piece): piece for piece in entries}
            ranked = Ranked(ranked.kind, entries, [(n, score) for n, (_, score) in enumerate(ranked.chosen)],
                            {n: ranked.parts[i] for n, (i, _) in enumerate(ranked.chosen) if i in ranked.parts},
                            ranked.meta, ranked.brief)
        return super().pack(data, query, route, ranked, max_size)


class MappedFastPath(FastPath):
    """:class:`~.fast.path.FastPath` over a leaf map: the same door, the same decisions and bytes."""

    def __init__(self, leaf: LeafMap, intent_code: int, stats: dict[str, int]) -> None:
        super().__init__(StaticSource(leaf), intent_code, stats)
        self._packer: MappedPacker | None = None

    def packed(self, index) -> MappedPacker:
        if self._packer is None:
            self._packer = MappedPacker(index, writers)
        return self._packer


class MappedResolver(BaseResolver):
    """A lazy leaf answered from its map (:class:`LeafMap`) until a query needs the zone itself:
    intent searches from the map by the fast path; anything else from the zone, which *full* loads
    (it returns the zone's resolver, or raises :class:`~.server.NotReady` while the zone loads). Its
    counters are *stats*, which every mapped leaf of a server shares."""

    def __init__(self, leaf: LeafMap, intent_code: int, stats: dict[str, int], full: Callable[[], BaseResolver]) -> None:
        self.source = StaticSource(leaf)  # what the query log reads of a zone: its origin
        self.size = leaf.size
        self.fast = MappedFastPath(leaf, intent_code, stats)
        self._full = full

    def fast_answer(self, data: bytes, udp: bool) -> bytes | None:
        return self.fast.answer(data, udp)

    def resolve(self, request, handler):
        """The zone itself answers (loaded first: :class:`~.server.NotReady` meanwhile)."""
        return self._full().resolve(request, handler)
