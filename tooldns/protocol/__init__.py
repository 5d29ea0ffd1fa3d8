"""The ToolDNS wire protocol as pure functions: what servers and clients both speak, no I/O.

Importable with nothing but the standard library, so the resolver library depends on this and
dnspython only. One module per concept:

* :mod:`.intent`: the intent EDNS0 option (version, length, K, UTF-8 text);
* :mod:`.vector`: the query-only intent vector option (model name, scale, int8 components);
* :mod:`.meta`: the response-only meta option (FALLBACK, PRUNED and VECTOR_IGNORED flags, cache
  lifetime, scorer);
* :mod:`.ede`: Extended DNS Error texts (RFC 8914);
* :mod:`.edns`: an OPT record's RDATA split into its options, strictly;
* :mod:`.names`: cursor names ``_svc._proto._zone.`` and RFC 1035 limits;
* :mod:`.txt`: the ``key=value`` TXT strings that carry ranks, scores and tool metadata;
* :mod:`.ttlcache`: the bounded cache that honours the protocol's lifetimes (both sides use it).
* :mod:`.hygiene`: zone text made safe to score, to show a model and to print (both sides use it).
* :mod:`.summary`: the summary a zone publishes for its parent at ``_summary.<origin>`` (TXT, JSON).
* :mod:`.plan`: the walk a zone recommends to resolvers at ``_walk.<origin>`` (TXT, ``key=value``).

    >>> from tooldns.protocol import encode_intent, parse_cursor
    >>> parse_cursor("_mcp._tcp._weather.tools.").zone
    'weather.tools.'
"""

from ..exceptions import IntentError, NameError_, PlanError, VectorError
from .ede import EDE_OPTION_CODE, decode_ede, encode_ede
from .intent import INTENT_OPTION_CODE, MAX_INTENT_BYTES, Intent, decode_intent, encode_intent
from .meta import FLAG_FALLBACK, FLAG_PRUNED, FLAG_VECTOR_IGNORED, META_OPTION_CODE, Meta, decode_meta, encode_meta
from .names import ANY_SERVICE, Cursor, cursor, normalize, parse_cursor
from .ttlcache import TTLCache
from .txt import decode_pairs, encode_pairs
from .vector import VECTOR_OPTION_CODE, Vector, decode_vector, encode_vector, quantize

__all__ = [
    "ANY_SERVICE", "Cursor", "EDE_OPTION_CODE", "FLAG_FALLBACK", "FLAG_PRUNED", "FLAG_VECTOR_IGNORED",
    "INTENT_OPTION_CODE", "Intent", "IntentError", "MAX_INTENT_BYTES", "META_OPTION_CODE", "Meta", "NameError_",
    "PlanError", "TTLCache", "VECTOR_OPTION_CODE", "Vector", "VectorError", "cursor", "decode_ede", "decode_intent", "decode_meta",
    "decode_pairs", "decode_vector", "encode_ede", "encode_intent", "encode_meta", "encode_pairs", "encode_vector",
    "normalize", "parse_cursor", "quantize",
]
