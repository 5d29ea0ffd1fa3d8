"""Replies to intent searches packed from bytes encoded once per zone: no dnslib object per query.

Most queries a ToolDNS server answers are intent searches with an intent it has never seen: a
referral to the best K children, or the best K tools of a leaf. Everything in those replies but
the choice, the order, the ranks and the scores is fixed per zone, so :class:`PackedZone` encodes
it once per zone index (names as labels, record heads, fixed RDATA, the TXT strings that follow
``rank=`` and ``score=``) and :meth:`PackedZone.pack` joins header, question, records and OPT
record for one :class:`~tooldns.serving.lookup.Ranked` result. The decision is
:func:`tooldns.serving.lookup.ranked`'s, the one :func:`~tooldns.serving.lookup.lookup` builds
dnslib records from; every other query (errors, names that are no search, queries without an
intent, NODATA, NXDOMAIN, CHAOS) takes that full path.

Each reply kind has two writers and no more: the Python one here, record by record, name by name
(:meth:`PackedZone._packed_referral`, :meth:`PackedZone._packed_answer`), which writes every reply
the fast path sends; and, given the compiled twins (*writers*, :mod:`.cpack`, which
:mod:`.path` chooses), the same reply written whole in C from pieces packed once per candidate
and per tool (:attr:`_Candidate.wire`, :meth:`PackedZone._tool_wires`) when the question is in
lower case and every piece can be pointed to; where C declines, the Python writer writes. The two
are held to the same bytes (``tests/test_blocks.py``).

dnslib stays the reference, byte for byte (``tests/test_fast_reply.py``, ``tests/test_golden.py``):
records come in the same order with the same TTLs; names are compressed as dnslib compresses them
(each suffix points to its first occurrence, compared octet by octet, so a question in mixed case
is pointed to only by names in the same case; SRV targets are never compressed); a reply too large
for the client is truncated as :func:`tooldns.serving.wire.pack_reply` truncates. One deliberate
difference: a suffix first written beyond offset 16383 is not pointed to (a pointer cannot reach
it; dnslib writes a wrong one), which only a TCP answer of more than 16 KB could meet.

    >>> packed = PackedZone(ix, writers)
    >>> query = read_plain_query(data)
    >>> route = packed.route(data, query)
    >>> wire = packed.pack(data, query, route, ranked(ix, route.cursor, query.qtype, intent), 1232)
"""

from __future__ import annotations

import struct
from array import array

from dnslib import CNAME, QTYPE, RR, DNSBuffer, DNSLabel

from ...compiled import turn
from ...exceptions import NameError_
from ...protocol import names
from ...protocol.budget import Budget, Store
from ..index import ZoneIndex
from ..lookup import Kind, Ranked, candidate_records, rank_strings, score_strings, search_at
from ..reply import TC, header_flags, opt_wire
from ..wire import PlainQuery

#: a name ready to pack: for each label from the left, (the octets of the name from that label on,
#: which is what compression compares, and the label's length octet and octets)
Name = tuple[tuple[bytes, bytes], ...]
#: a record ready to pack: its owner; its type, class and TTL, followed by RDATA length and RDATA
#: when the RDATA holds no name to compress; and the name that is its RDATA otherwise (NS, CNAME)
Record = tuple[Name, bytes, "Name | None"]

_U16 = struct.Struct("!H")
_HEAD = struct.Struct("!HHI")  # type, class, TTL
_FLAGS_COUNTS = struct.Struct("!HHHHH")
#: tools packed between two turns given to other threads (compiled code never gives the lock back
#: by itself: 32 tools of long descriptions took 0.4 ms, 2 ms now and then)
TOOLS_A_TURN = 16
#: the last offset a compression pointer can reach (14 bits)
_MAX_POINTER = 0x3FFF
_TXT_HEAD = _HEAD.pack(QTYPE.TXT, 1, 0)  # ranking TXT records: class IN, TTL 0 (they depend on the intent)
#: a ranking TXT record up to its RDATA, its owner a pointer: the pointer, :data:`_TXT_HEAD`, RDATA length
_TXT_AT = struct.Struct("!H8sH")
_SRV_HEAD = _HEAD.pack(QTYPE.SRV, 1, 0)


#: the pieces of packed names, each kept once per process (a zone's names share their suffixes with each
#: other and with every zone below the same parent); forgotten all at once past 2^18 pieces
PIECES = Budget(1 << 18)
_PIECES = PIECES.join(Store())


def _piece(piece):
    kept = _PIECES.get(piece)
    if kept is None:
        PIECES.spend()
        kept = _PIECES[piece] = piece
    return kept


def packed_name(name) -> Name:
    """*name* (text or a DNSLabel) as the packer writes it, with the labels dnslib gives it (split here
    when the text is ASCII without escapes, as dnslib splits it: what IDNA leaves as it is)."""
    if isinstance(name, str) and name.isascii() and "\\" not in name:
        labels = tuple(name.encode("ascii").rstrip(b".").split(b".")) if name not in ("", ".") else ()
    else:
        labels = DNSLabel(name).label
    return _name_of(labels, name)


#: names already packed, by their labels: the suffixes a zone's names share (its origin, ``_tcp``
#: under it), packed once; forgotten all at once past 4,096
_SUFFIXES: dict[tuple, Name] = {}


def _name_of(labels: tuple, name) -> Name:
    if not labels:
        return ()
    label = labels[0]
    if not 0 < len(label) <= names.MAX_LABEL:
        raise ValueError(f"name {name!r} has a label of {len(label)} octets")
    rest = _SUFFIXES.get(labels[1:])
    if rest is None:
        rest = _name_of(labels[1:], name)
        if len(_SUFFIXES) >= 4096:
            _SUFFIXES.clear()
        _SUFFIXES[labels[1:]] = rest
    chunk = _LENGTH[len(label)] + label
    full = chunk + (rest[0][0] if rest else b"\0")
    if len(full) > names.MAX_NAME:
        raise ValueError(f"name {name!r} is longer than {names.MAX_NAME} octets")
    return (_piece((_piece(full), _piece(chunk))),) + rest


def _uncompressed(name: Name) -> bytes:
    return name[0][0] if name else b"\0"


_LENGTH = [bytes([n]) for n in range(256)]


def _strings(strings: list[bytes]) -> bytes:
    """TXT RDATA: each string (at most 255 octets) after its length octet."""
    out = b""
    for s in strings:
        out += _LENGTH[len(s)] + s
    return out


def _score_string(score: float | None, parts: tuple[float, float | None] | None = None) -> bytes:
    """:func:`_strings` of :func:`score_strings`; a score without parts (the common case) formatted in one step."""
    if parts is not None:
        return _strings(score_strings(score, parts))
    if score is None:
        return b""
    text = b"score=%.4f" % score
    return _LENGTH[len(text)] + text


#: the first strings of a ranking TXT record (format, rank) for ranks 1 to 255, as TXT RDATA
_RANK_HEADS = [b""] + [_strings(rank_strings(rank, None)) for rank in range(1, 256)]
#: an SRV record's priority (a tool's rank, 1 to 255) as packed
_PRIORITIES = [_U16.pack(rank) for rank in range(256)]


def _zone_strings(strings: list[bytes]) -> bytes:
    """:func:`_strings` of strings from a zone, checked once (dnslib refuses a longer one)."""
    if any(len(s) > 255 for s in strings):
        raise ValueError("a TXT string is longer than 255 octets")
    return _strings(strings)


def _record(rr: RR) -> Record:
    """A record of the index, ready to pack: NS and CNAME targets are compressed; A, AAAA, TXT and
    SRV RDATA hold no name dnslib compresses, and are packed here once."""
    head = _HEAD.pack(rr.rtype, rr.rclass, rr.ttl)
    if rr.rtype in (QTYPE.NS, QTYPE.CNAME):
        return packed_name(rr.rname), head, packed_name(rr.rdata.label)
    if rr.rtype not in (QTYPE.A, QTYPE.AAAA, QTYPE.TXT, QTYPE.SRV):
        raise ValueError(f"no fast packing for {QTYPE.get(rr.rtype)} records")
    buffer = DNSBuffer()
    rr.rdata.pack(buffer)
    return packed_name(rr.rname), head + _U16.pack(len(buffer.data)) + bytes(buffer.data), None


def _put_name(out: bytearray, seen: dict[bytes, int], name: Name, notes: list | None = None) -> None:
    """Write *name* at the end of *out*, pointing to where a suffix of it was first written (and
    noting the pointer's place and target in *notes*, if given)."""
    for suffix, label in name:
        at = seen.get(suffix)
        if at is not None:
            if notes is not None:
                notes.append((len(out), at))
            out += _U16.pack(0xC000 | at)
            return
        if len(out) <= _MAX_POINTER:
            seen[suffix] = len(out)
        out += label
    out.append(0)


def _put(out: bytearray, seen: dict[bytes, int], record: Record, notes: list | None = None) -> None:
    owner, head, target = record
    _put_name(out, seen, owner, notes)
    out += head
    if target is not None:
        at = len(out)
        out += b"\0\0"
        _put_name(out, seen, target, notes)
        _U16.pack_into(out, at, len(out) - at - 2)


def _offsets(fields: list[int]) -> bytes:
    """The offsets (in a block) of the 16-bit *fields* to move, as :mod:`.cpack` reads them."""
    return array("H", fields).tobytes()


def _moves(block: bytes, pointers: list[tuple[int, int]]) -> tuple[bytes, bytes, bytes]:
    """*block* with its compression *pointers* (each at an offset of the block, pointing to an offset
    in the block, or to the zone's name: -1) written as 0xC000 plus their target in the block (0 for
    the zone's name), and the :func:`_offsets` of those to move by the block's place and by the zone
    name's: what :func:`tooldns.serving.fast.cpack.referral` writes a block from wherever it falls."""
    patched, relative, to_zone = bytearray(block), [], []
    for where, target in pointers:
        _U16.pack_into(patched, where, 0xC000 | max(target, 0))
        (to_zone if target < 0 else relative).append(where)
    return bytes(patched), _offsets(relative), _offsets(to_zone)


#: the most suffixes the owners of a zone's tools may share (beyond what an answer writes before its first
#: TXT record: a service's labels, ``_http._tcp.leaf.tools.``) for :meth:`PackedZone._tool_wires`
SHARED = 256

#: where a candidate's block is packed to make its :attr:`_Candidate.wire` for any place after the
#: first in a referral, and where the zone's own name stands then: any offsets its own names cannot reach
_LATER_AT, _ZONE_AT = 0x200, 0x20


class _Candidate:
    """One candidate of a referral (a child zone, or the zone itself: "self"), packed once: its NS
    records, the owner and the strings after rank and score of its ranking TXT record, its glue.

    When all its names lie in the zone and none shares a suffix with another candidate's names but
    the zone's own name and its ancestors (*alone*), the compiled writer
    (:func:`tooldns.serving.fast.cpack.referral`) can write it anywhere in a referral from pieces
    packed once: as the first candidate, its authority block packed after each search name
    (:meth:`first`); at any later place, its block with the pointers to move to where it falls
    (:attr:`wire`: to its own names by the block's offset, to the zone's name by wherever the first
    block wrote it), and its additional records pointing to offsets known from the block.
    """

    __slots__ = ("ns", "owner", "strings", "glue", "alone", "firsts", "wire")

    def __init__(self, ix: ZoneIndex, entry) -> None:
        ns, owner, strings, glue = candidate_records(ix, entry)
        self.ns = [_record(rr) for rr in ns]
        self.owner = packed_name(owner)
        self.strings = _zone_strings(strings)
        self.glue = [_record(rr) for rr in glue]
        if any(target is not None for _, _, target in self.glue):
            raise ValueError("glue records hold addresses, not names")
        self.alone = False
        self.firsts: dict[bytes, tuple | None] = {}
        #: what :func:`tooldns.serving.fast.cpack.referral` writes this candidate from at any place
        #: after the first: the authority block and its moves (:func:`_moves`), the TXT owner (an
        #: offset in the block, or -1: the zone's name), the TXT strings' length, what follows the
        #: score string (the strings, the glue) and its moves, the NS and additional records' counts;
        #: None when it is not *alone*, or the package runs from source
        self.wire: tuple | None = None

    def names(self) -> list[Name]:
        return [self.owner] + [n for owner, _, target in self.ns for n in (owner, target)] + [g[0] for g in self.glue]

    def suffixes(self) -> set[bytes]:
        return {suffix for name in self.names() for suffix, _ in name}

    def first(self, route: "Route", zone: bytes) -> tuple | None:
        """(block, offset of the zone's name, of the TXT owner, the TXT strings after the score string
        with the glue) as the first block after the question of *route* in lower case; None when
        something cannot be pointed to."""
        if route.key not in self.firsts:
            head = bytes(12) + route.key + bytes(4)
            out, seen = bytearray(head), {route.key[at:]: 12 + at for at in route.labels}
            for record in self.ns:
                _put(out, seen, record)
            found = [seen.get(zone), seen.get(self.owner[0][0])] + [seen.get(g[0][0][0]) for g in self.glue]
            if None in found:
                self.firsts[route.key] = None
            else:
                tail = bytearray(self.strings)
                _put_glue(tail, self, found[2:])
                self.firsts[route.key] = (bytes(out[len(head):]), found[0], found[1], bytes(tail))
        return self.firsts[route.key]

    def make_wire(self, zone: bytes) -> None:
        """Set :attr:`wire`, unless the block points elsewhere than into itself or to the zone's name."""
        out, seen, notes = bytearray(_LATER_AT), {zone: _ZONE_AT}, []
        for record in self.ns:
            _put(out, seen, record, notes)

        def target(at: int | None) -> int | None:
            return -1 if at == _ZONE_AT else at - _LATER_AT if at is not None and at >= _LATER_AT else None

        patches = [(where - _LATER_AT, target(at)) for where, at in notes]
        owners = [target(seen.get(self.owner[0][0]))] + [target(seen.get(g[0][0][0])) for g in self.glue]
        if None in owners or any(t is None for _, t in patches):
            return
        tail, pointers = bytearray(self.strings), []
        for owner, (_, rest, _) in zip(owners[1:], self.glue):
            pointers.append((len(tail), owner))
            tail += b"\0\0" + rest
        self.wire = (*_moves(bytes(out[_LATER_AT:]), patches), owners[0], len(self.strings),
                     *_moves(bytes(tail), pointers), len(self.ns), 1 + len(self.glue))


def _put_glue(out: bytearray, candidate: _Candidate, owners: list[int]) -> None:
    """Write *candidate*'s glue records, their owners pointers to *owners* (where each was written)."""
    for at, (_, tail, _) in zip(owners, candidate.glue):
        out += _U16.pack(0xC000 | at)
        out += tail


def _put_srvs(out: bytearray, owner: bytes, tools: list) -> None:
    """An answer's SRV records after its head: each tool's (type, class, TTL and RDATA length; then
    weight, port and target: the first two items of *tools*' tuples), priority its rank, each after the
    first after *owner* (the pointer to the first one's owner)."""
    for priority, tool in enumerate(tools, 1):
        if priority > 1:
            out += owner
        out += tool[0]
        out += _PRIORITIES[priority]
        out += tool[1]


def _put_ranking(out: bytearray, rank: int, score: bytes, rest: bytes) -> None:
    """A tool's ranking TXT record after its owner: format and rank strings, *score* (its score strings,
    as TXT RDATA) and *rest* (its other strings)."""
    head = _RANK_HEADS[rank]
    out += _TXT_HEAD
    out += _U16.pack(len(head) + len(score) + len(rest))
    out += head
    out += score
    out += rest


def _counts(candidates: list[_Candidate]) -> tuple[int, int, int]:
    """The answer, authority and additional counts of a referral to *candidates* (besides the OPT record)."""
    return 0, sum(len(c.ns) for c in candidates), sum(1 + len(c.glue) for c in candidates)


def _tool_pieces(ix: ZoneIndex, tool) -> tuple[bytes, bytes, Name, bytes, bytes]:
    """What an answer packs of *tool* (:attr:`PackedZone.tools`)."""
    srv = struct.pack("!HH", tool.weight, tool.port) + _uncompressed(packed_name(tool.target))
    return (_SRV_HEAD + _U16.pack(len(srv) + 2), srv, packed_name(tool.owner(ix.origin)),
            _zone_strings(ix.ranked_tool_txt[id(tool)]), _zone_strings(ix.brief_tool_txt[id(tool)]))


def routes_of(ix: ZoneIndex) -> dict[bytes, Route]:
    """The names that ask *ix*'s zone to search, lower-case on the wire, with their routes
    (:attr:`PackedZone.routes`): made by the loading process too and kept in the index it hands back
    (:attr:`ZoneIndex.packed_routes`), 0.3 ms of a zone's first answer."""
    routes = {}
    for service in sorted(names.SERVICES):
        for transport in sorted(names.TRANSPORTS):
            for expanded in (False, True):
                try:
                    text = names.Cursor(service, transport, ix.origin, expanded).to_text()
                    cursor = search_at(ix, text)  # the routing lookup() follows
                except NameError_:
                    continue
                if cursor is not None:
                    name = packed_name(text)
                    routes[_uncompressed(name)] = Route(ix, cursor, name)
    return routes


def tool_pieces(ix: ZoneIndex) -> list[tuple[bytes, bytes, Name, bytes, bytes]]:
    """What an answer packs of each tool of *ix*, in its zone's order (:attr:`PackedZone.tools`): made
    by the loading process and kept in the index it hands back (:attr:`ZoneIndex.packed_tools`), 8 us
    a tool the fast path then does not spend when the zone is first asked. Raises ValueError for a
    tool the fast path cannot encode."""
    pieces = []
    for i, tool in enumerate(ix.zone.tools):
        if i % TOOLS_A_TURN == TOOLS_A_TURN - 1:
            turn()  # the interpreter's lock to the event loop if it waits (a loading thread packs)
        pieces.append(_tool_pieces(ix, tool))
    return pieces


class Route:
    """A name that asks this zone to search: its cursor, where its labels start, and the records
    an answer to it holds besides the ranked ones."""

    __slots__ = ("cursor", "key", "labels", "cname", "owner", "answer_head", "tool_entries", "tool_wires")

    def __init__(self, ix: ZoneIndex, cursor: names.Cursor, name: Name) -> None:
        self.cursor = cursor
        #: the name on the wire, in lower case
        self.key = _uncompressed(name)
        #: where each label of the question name starts (compression points into the question)
        self.labels = tuple(len(name[0][0]) - len(suffix) for suffix, _ in name)
        expanded = cursor.expand().to_text()
        #: a leaf's cursor name is answered through a CNAME to its expanded name (lookup's rule)
        self.cname: Record | None = None
        if not cursor.expanded and ix.child_candidates is None:
            self.cname = _record(RR(cursor.to_text(), QTYPE.CNAME, ttl=ix.ttl, rdata=CNAME(expanded)))
        #: the owner of the SRV records of an answer
        self.owner = packed_name(expanded)
        #: an answer to this name in lower case up to its first SRV record's type (PackedZone._answer_head)
        self.answer_head: tuple[bytes, dict[bytes, int], bytes | None] | None = None
        #: the tools an answer to this name ranks (:attr:`tooldns.serving.lookup.Ranked.entries`), and
        #: per tool, by index, what an answer to this name in lower case writes of it
        #: (:meth:`PackedZone._tool_wires`)
        self.tool_entries: list | None = None
        self.tool_wires: list | None = None


class PackedZone:
    """Everything of one zone index that intent searches answer with, encoded once; *writers*: the
    compiled writers (:mod:`.cpack`), or None for the Python ones alone."""

    def __init__(self, ix: ZoneIndex, writers=None) -> None:
        #: the compiled writers of a referral and of an answer (:mod:`.cpack`), or None
        self.c_referral = writers.referral if writers is not None else None
        self.c_answer = writers.answer if writers is not None else None
        self.routes = ix.packed_routes if ix.packed_routes is not None else routes_of(ix)
        self.children = {id(e): _Candidate(ix, e) for e in (ix.child_candidates.entries if ix.child_candidates else ())}
        #: the entries a referral's indexes point into (:attr:`tooldns.serving.lookup.Ranked.entries`), and
        #: each one's candidate, by index
        self.entries = ix.child_candidates.entries if ix.child_candidates else None
        self.by_index = [self.children[id(e)] for e in self.entries or ()]
        #: the zone's own name and its ancestors, which every candidate's names end with
        self.zone = _uncompressed(packed_name(ix.origin))
        shared = {suffix for suffix, _ in packed_name(ix.origin)}
        seen: dict[bytes, int] = {}
        for candidate in self.children.values():
            for suffix in candidate.suffixes() - shared:
                seen[suffix] = seen.get(suffix, 0) + 1
        for candidate in self.children.values():
            # names in the zone reach its name before any of its ancestors, which the question holds
            inside = all(any(suffix == self.zone for suffix, _ in name) for name in candidate.names())
            candidate.alone = inside and all(seen[suffix] == 1 for suffix in candidate.suffixes() - shared)
            if candidate.alone and writers is not None:
                candidate.make_wire(self.zone)
        #: per tool: its SRV record's type, class, TTL and RDATA length, and the weight, port and target
        #: that follow the priority; owner and strings of its TXT record, and the strings without the
        #: description (the brief option)
        pieces = ix.packed_tools if ix.packed_tools is not None else tool_pieces(ix)
        self.tools: dict[int, tuple[bytes, bytes, Name, bytes, bytes]] = dict(zip(map(id, ix.zone.tools), pieces))
        self._opt: dict[tuple[int, int, str] | None, bytes] = {}

    def route(self, data: bytes, query: PlainQuery) -> Route | None:
        """The route of the question of *data* (names compare case-insensitively), or None: no search here."""
        return self.routes.get(data[12:query.question_end - 4].lower())

    def pack(self, data: bytes, query: PlainQuery, route: Route, ranked: Ranked, max_size: int) -> bytes | None:
        """The reply to *data* carrying *ranked*, or its truncated form when longer than *max_size*
        octets; None when a chosen entry cannot be packed here (the full path then answers)."""
        end = query.question_end
        out = bytearray(data[:end])  # the query's header (rewritten below) and question
        qname = data[12:end - 4]
        if ranked.kind is Kind.REFERRAL:
            counts = self._referral(out, qname, route, ranked)
        else:
            counts = self._answer(out, qname, route, ranked)
        if counts is None:
            return None
        flags = header_flags(data[2] << 8 | data[3], ranked.kind)  # flags as the full path sets them
        out += self._opt_record(ranked.meta)
        _FLAGS_COUNTS.pack_into(out, 2, flags, 1, counts[0], counts[1], counts[2] + 1)
        if len(out) <= max_size:
            return bytes(out)
        # header with TC set, the question and the OPT record without its options (as wire.pack_reply)
        return data[:2] + _FLAGS_COUNTS.pack(flags | TC, 1, 0, 0, 1) + data[12:end] + self._opt_record(None)

    def _referral(self, out: bytearray, qname: bytes, route: Route, ranked: Ranked) -> tuple[int, int, int] | None:
        """Authority: the chosen candidates' NS records. Additional: per candidate its ranking TXT
        record and glue, whose owners (a child's name, its name servers' names) were written in the
        authority section: one pointer each, whatever the scores. Written in C when the compiled
        writer can (a question in lower case, every candidate *alone*), else record by record."""
        chosen = ranked.chosen
        if ranked.entries is self.entries:
            by_index = self.by_index
            pieces = [by_index[i] for i, _ in chosen]
        else:
            pieces = [self.children.get(id(ranked.entries[i])) for i, _ in chosen]
            if None in pieces:
                return None
        if self.c_referral is not None and qname == route.key:
            first, wires = pieces[0].first(route, self.zone), [piece.wire for piece in pieces]
            if first is not None and None not in wires:
                counts = self.c_referral(out, first, wires, chosen if type(chosen) is list else list(chosen), _RANK_HEADS)
                if counts is not None:
                    return counts
        return self._packed_referral(out, qname, route, chosen, pieces)

    def _packed_referral(self, out: bytearray, qname: bytes, route: Route, chosen: list,
                         pieces: list) -> tuple[int, int, int] | None:
        """The referral to *pieces* (scored as in *chosen*) packed record by record, name by name:
        the reference :func:`tooldns.serving.fast.cpack.referral` is held to."""
        seen = {qname[at:]: 12 + at for at in route.labels}  # names point into the question too
        for piece in pieces:
            for record in piece.ns:
                _put(out, seen, record)
        owners = [(seen.get(p.owner[0][0]), [seen.get(g[0][0][0]) for g in p.glue]) for p in pieces]
        if any(t is None or None in g for t, g in owners):
            return None  # an owner written where no pointer reaches
        for rank, ((_, score), piece, (txt_at, glue_at)) in enumerate(zip(chosen, pieces, owners), 1):
            score = b"score=%.4f" % score  # _score_string's, inline: a referral's scores are never None
            head = _RANK_HEADS[rank]
            # the TXT record's owner (a pointer), type, class, TTL and RDATA length in one step
            out += _TXT_AT.pack(0xC000 | txt_at, _TXT_HEAD, len(head) + 1 + len(score) + len(piece.strings))
            out += head
            out += _LENGTH[len(score)]
            out += score
            out += piece.strings
            _put_glue(out, piece, glue_at)
        return _counts(pieces)

    def _answer(self, out: bytearray, qname: bytes, route: Route, ranked: Ranked) -> tuple[int, int, int] | None:
        """Answer: the CNAME from a cursor name, if any, the chosen tools' SRV records, then each one's
        ranking TXT record. Written in C when the compiled writer can (a question in lower case,
        scores without parts, every tool's owner written alike in any answer), else name by name."""
        if not ranked.chosen:  # no tools: no SRV owner to write (the full path answers)
            return None
        if qname != route.key:  # mixed case: names compare octet by octet, as dnslib compresses them
            head = self._answer_head(len(out), qname, route)
        else:
            head = route.answer_head
            if head is None:
                head = route.answer_head = self._answer_head(len(out), qname, route)
        block, known, owner = head
        if owner is None:  # the SRV records' owner lies where no pointer reaches
            return None
        if self.c_answer is not None and qname == route.key and not ranked.parts:
            if route.tool_entries is not ranked.entries:
                route.tool_wires, route.tool_entries = self._tool_wires(ranked.entries, known), ranked.entries
            wires = route.tool_wires
            chosen = [wires[i] for i, _ in ranked.chosen] if wires is not None else [None]
            if None not in chosen:
                start = len(out)
                out += block
                if self.c_answer(out, owner, chosen, ranked.chosen, _RANK_HEADS, ranked.brief) is not None:
                    return (route.cname is not None) + len(chosen), 0, len(chosen)
                del out[start:]
        return self._packed_answer(out, block, known, owner, route, ranked)

    def _packed_answer(self, out: bytearray, block: bytes, known: dict[bytes, int], owner: bytes, route: Route,
                       ranked: Ranked) -> tuple[int, int, int] | None:
        """The answer carrying *ranked* after its head (*block*, the names it wrote where *known* says,
        *owner* the pointer to the first SRV record's owner) packed name by name: the reference
        :func:`tooldns.serving.fast.cpack.answer` is held to."""
        pieces = [self.tools.get(id(ranked.entries[i])) for i, _ in ranked.chosen]
        if None in pieces:
            return None
        out += block
        seen = known.copy()  # names point into the question, the CNAME and the first SRV owner too
        _put_srvs(out, owner, pieces)
        brief, parts = ranked.brief, ranked.parts
        for rank, ((i, score), (_, _, name, strings, short)) in enumerate(zip(ranked.chosen, pieces), 1):
            _put_name(out, seen, name)
            _put_ranking(out, rank, _score_string(score, parts.get(i)), short if brief else strings)
        return (route.cname is not None) + len(pieces), 0, len(pieces)

    def _tool_wires(self, entries: list, known: dict[bytes, int]) -> list | None:
        """Per tool of *entries*, what an answer (its question in lower case, whose names before the
        first TXT record stand where *known* says) writes of it: its SRV record's pieces (as
        :attr:`tools`), its TXT owner in three parts, and its TXT strings, whole and brief. The owner's
        parts: its labels no other tool's owner ends with (written as they are); then, label by label,
        those another tool's owner ends with too, each with its number (an earlier tool of the answer
        may have written it: a pointer there ends the name); then a pointer to the suffix written
        before the first TXT record, or the root label. None when more than :data:`SHARED` suffixes are
        shared (the answer is then packed name by name). What :func:`tooldns.serving.fast.cpack.answer`
        writes from."""
        pieces = [self.tools.get(id(tool)) for tool in entries]
        counts: dict[bytes, int] = {}
        for piece in filter(None, pieces):
            for suffix, _ in piece[2]:
                if suffix not in known:
                    counts[suffix] = counts.get(suffix, 0) + 1
        numbers = {suffix: n for n, suffix in enumerate(s for s, count in counts.items() if count > 1)}
        if len(numbers) > SHARED:
            return None
        wires = []
        for piece in pieces:
            if piece is None:
                wires.append(None)
                continue
            srv_head, srv, name, strings, short = piece
            prefix, chain, tail = b"", [], b"\0"
            for suffix, label in name:
                at = known.get(suffix)
                if at is not None:
                    tail = _U16.pack(0xC000 | at)
                    break
                if suffix in numbers:
                    chain.append((numbers[suffix], label))
                elif chain:  # a label of its own after a shared one, which cannot be: packed name by name
                    piece = None
                    break
                else:
                    prefix += label
            wires.append(piece and (srv_head, srv, prefix, tuple(chain), tail, strings, short))
        return wires

    @staticmethod
    def _answer_head(start: int, qname: bytes, route: Route) -> tuple[bytes, dict[bytes, int], bytes | None]:
        """What an answer to *qname* holds before its first SRV record's type, in a reply whose question
        ends at offset *start*: the CNAME from a cursor name, if any, and the SRV records' owner (written,
        or pointed to); where each name written so far stands; the pointer that is every later SRV
        record's owner (None: beyond a pointer's reach)."""
        out = bytearray(start)  # the offsets are all that matter of what comes before
        seen = {qname[at:]: 12 + at for at in route.labels}  # names point into the question too
        if route.cname is not None:
            _put(out, seen, route.cname)
        _put_name(out, seen, route.owner)
        at = seen.get(route.owner[0][0])
        return bytes(out[start:]), seen, None if at is None else _U16.pack(0xC000 | at)

    def _opt_record(self, meta: tuple[int, int, str] | None) -> bytes:
        """The reply's OPT record with the meta option (:func:`tooldns.serving.reply.opt_wire`), kept
        per meta: flags and scorer names make a handful of values."""
        opt = self._opt.get(meta)
        if opt is None:
            opt = opt_wire(meta)
            if len(self._opt) < 64:
                self._opt[meta] = opt
        return opt
