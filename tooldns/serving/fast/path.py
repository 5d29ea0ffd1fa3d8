"""The fast path's one door: :meth:`FastPath.answer` turns a datagram into its reply, or declines.

An intent search this zone ranks (a referral to its best children, or its best tools) is answered
from the query's bytes to the reply's bytes: the query read (:func:`read_plain_query`), its options
decoded (:mod:`tooldns.serving.options`), the same decision the full path takes
(:func:`tooldns.serving.lookup.ranked`), and the reply packed from pieces encoded once per zone
(:class:`~.pack.PackedZone`). Everything else, and anything unusual, is declined (None): the full
path (:meth:`tooldns.serving.resolver.ZoneResolver.resolve`) then answers it, errors included.

This module alone chooses the compiled twins, once, when it is imported: the query and intent
read in C (:mod:`.cquery`) and referrals and answers written in C (:mod:`.cpack`) when the package
is compiled; the Python references they are tested against byte for byte otherwise
(:func:`tooldns.serving.wire.read_plain_query`, :func:`tooldns.protocol.intent.decode_intent`,
:class:`~.pack.PackedZone`'s own writers).

    >>> fast = FastPath(StaticSource(index), INTENT_OPTION_CODE, stats)
    >>> wire = fast.answer(query_bytes, udp=True)   # None: the full path answers
"""

from __future__ import annotations

import logging
import weakref

from ...exceptions import IntentError
from ...protocol.vector import VECTOR_OPTION_CODE, decode_vector
from ..index import ZoneIndex
from ..lookup import Kind, Ranked, ranked
from ..offloop import WouldWait
from ..options import FLAG_OPTION_CODES, decoded, with_flags
from ..wire import MAX_MESSAGE, most_that_fit
from .pack import PackedZone

try:  # compiled: the twins in C, chosen here once for the whole fast path
    from . import cpack as writers
    from .cquery import decode_intent, read_plain_query
except ImportError:  # from source: the Python references the twins are tested against
    writers = None
    from ...protocol.intent import decode_intent
    from ..wire import read_plain_query

#: whether the fast path runs its compiled twins (:mod:`.cquery`, :mod:`.cpack`)
COMPILED = writers is not None

log = logging.getLogger(__name__)


class FastPath:
    """The fast path of one zone: :meth:`answer` gives the reply to an intent search, or None.

    *source* holds the zone's current index (``source.index``: a reload swaps it); *stats* is the
    resolver's counters, which the fast path's replies count in (``queries``, ``trimmed``)."""

    def __init__(self, source, intent_code: int, stats: dict[str, int]) -> None:
        self.source = source
        self.intent_code = intent_code
        self.stats = stats
        self._packed: tuple[weakref.ref, PackedZone | None] | None = None  # per index
        #: whether a query has come this way: a zone asked is given its pieces ahead of its next query
        #: after each reload (:meth:`tooldns.serving.resolver.ZoneResolver.renewed`), one never asked is not
        self.asked = False

    def answer(self, data: bytes, udp: bool) -> bytes | None:
        """The reply to query bytes *data* when it is an intent search this zone ranks, packed
        without dnslib; None for every other query, and whenever anything is unusual."""
        query = read_plain_query(data)
        if query is None:
            return None
        index = self.source.index
        if index.signer is not None and data[query.question_end + 7] & 0x80:
            return None  # DO set on a signed zone: the full path adds the DNSSEC records
        self.asked = True
        try:
            packed = self.packed(index)
            route = packed.route(data, query) if packed is not None else None
            if route is None:
                return None
            options = query.options
            # an error of any option: the full path answers it, with the text it gives the error
            intents = options.get(self.intent_code)
            intent = decode_intent(intents[0]) if intents is not None and len(intents) == 1 else \
                decoded(query.option_data(self.intent_code), self.intent_code, decode_intent, "intent")
            vector = (decoded(options[VECTOR_OPTION_CODE], VECTOR_OPTION_CODE, decode_vector, "vector")
                      if VECTOR_OPTION_CODE in options else None)
            if intent is not None and any(code in options for code in FLAG_OPTION_CODES):
                intent = with_flags(intent, query.option_data)
            result = ranked(index, route.cursor, query.qtype, intent, vector)
            wire = packed.pack(data, query, route, result, query.udp_size if udp else MAX_MESSAGE) if result else None
            if wire is not None and wire[2] & 0x02 and not udp:
                return None  # too long for one message: the full path keeps what fits (wire.pack_reply)
            if wire is not None and wire[2] & 0x02 and udp and intent.fit and result.kind is Kind.ANSWER:
                fitted = _fit_packed(packed, data, query, route, result)
                if fitted is not None:
                    wire = fitted
                    self.stats["trimmed"] += 1
        except IntentError:
            return None  # a FORMERR, with the text the full path gives it
        except WouldWait:  # the server answers it off its event loop
            raise
        except Exception:
            log.exception("fast path failed on a query to %s; the full path answers it", index.origin)
            return None
        if wire is not None:
            self.stats["queries"] += 1
        return wire

    def packed(self, index: ZoneIndex) -> PackedZone | None:
        """The fast path's pieces of *index*, encoded on its first query (a reload makes a new index);
        None when the zone holds something they cannot encode (then every query takes the full path)."""
        held = self._packed
        if held is not None and held[0]() is index:
            return held[1]
        try:
            packed = PackedZone(index, writers)
        except ValueError as exc:
            log.warning("%s: every query takes the full path (%s)", index.origin, exc)
            packed = None
        self._packed = (weakref.ref(index), packed)
        return packed


def _fit_packed(packed: PackedZone, data: bytes, query, route, result: Ranked) -> bytes | None:
    """The reply with the most of *result*'s best tools that fits the client's UDP payload (the fit
    option), or None when not even the best one does."""
    def fitting(n: int) -> bytes | None:
        wire = packed.pack(data, query, route, result.trimmed(n), query.udp_size)
        return wire if wire is not None and not wire[2] & 0x02 else None

    return most_that_fit(len(result.chosen), fitting)
