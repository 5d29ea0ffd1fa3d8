"""Published summaries: what a zone tells its parent about itself, in DNS, as pure functions.

A parent ranks its children by what it knows of them. Each zone publishes that at
``_summary.<origin>`` as one TXT record, versioned by the zone's SOA serial: its hand-written
description and keywords, and the index terms of everything beneath it (its tools' text and its
own children's summaries) with their counts, so that a word a new tool brings becomes findable
from the root. Parents fetch it over TCP when the child's serial changes (on a NOTIFY, or when
their poll of the child's SOA sees a new serial); :mod:`tooldns.serving.summaries` does that.

The record's strings, joined, are one UTF-8 JSON object (a long value split into 255-octet
strings, as long DKIM keys are)::

    {"format": "tooldns-summary/1", "zone": "routing.maps.tools.", "serial": 2026113002,
     "description": "Routing: driving ...", "keywords": ["route", "directions"],
     "tools": 4, "terms": {"route": 9, "airship": 2, ...},
     "facets": [{"route": 5, "driving": 2, ...}, {"airship": 2, ...}]}

``facets``, when present, are the same tools' terms in groups of a few tools (as ``tooldns build``
writes them in a parent's delegation, docs/building.md): a zone with at most :data:`MAX_FACETS`
groups of tools beneath it publishes them, so that a parent which ranks its children by their best
facet keeps doing so after it learns the zone's summary. Parents before facets refuse a summary
that has them (an unknown key).

A parent accepts only what :func:`decode_summary` accepts: the zone it asked for, at most
:data:`MAX_SUMMARY_BYTES` octets, :data:`MAX_TERMS` terms that are index terms (lower-case
letters and digits, at most 64 characters), each counted at most :data:`MAX_REPEATS` times per
tool beneath (as zone files cap repeated words), at most :data:`TERMS_PER_TOOL` distinct terms per
tool (plus as many again) counted at most :data:`MAX_REPEATS` times as much in all, at most
:data:`MAX_FACETS` facets of such terms, each standing for at most :data:`FACET_TOOLS` tools (a
summary with facets holds at most that many tools a facet),
printable description and keywords within the zone-file limits. Anything else is refused with a
:class:`SummaryError` saying why; :func:`fit_summary` makes what a parent accepts.

    >>> s = fit_summary("maps.tools.", 7, "Maps", ("map",), Counter({"map": 3, "route": 2}), tools=2)
    >>> decode_summary(encode_summary(s), "maps.tools.") == s
    True
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter
from dataclasses import dataclass

from ..exceptions import SummaryError, VectorError
from .hygiene import MAX_REPEATS, printable
from .vector import decode_vector

#: the label under a zone's apex that owns its published summary (RFC 8552 style)
SUMMARY_LABEL = "_summary"
FORMAT = "tooldns-summary/1"
#: the largest summary a parent accepts, in octets of JSON (the reply, over TCP, stays under 64 KiB)
MAX_SUMMARY_BYTES = 60_000
#: the most terms a parent accepts; a zone publishes its most frequent ones that fit
MAX_TERMS = 8192
MAX_TERM_CHARS = 64
MAX_DESCRIPTION_BYTES = 4096
MAX_KEYWORDS = 256
MAX_KEYWORD_BYTES = 256
MAX_TOOLS = 10_000_000
#: centroids standing for the vectors beneath a zone (the hybrid scorer's), however many tools it
#: holds: what ``tooldns build`` gives each delegation and what a zone publishes. 16 was chosen by
#: cross-validation on ToolRet's dev queries (docs/building.md): 4, 8, 16, 32 gave 0.822, 0.827,
#: 0.829, 0.824 on the even half and 0.818, 0.821, 0.823, 0.828 on the odd one
CENTROIDS = 16
#: the most centroids a parent accepts in a summary, in the vector option's encoding
MAX_VECTORS = CENTROIDS
#: the most facets a parent accepts in a summary, and the most a delegation has (``tooldns build``
#: and :func:`tooldns.scoring.bm25.facets_of`): a child with more groups of tools beneath it has
#: none, and its parent ranks its whole summary
MAX_FACETS = 16
#: the most tools one facet stands for (``tooldns build`` and :func:`tooldns.scoring.bm25.facets_of`
#: group tools by this many): a summary with facets stands for at most this many tools a facet, so
#: that its terms (and its facets' terms) may be counted at most MAX_REPEATS times that many, plus 3
FACET_TOOLS = 4
#: the most distinct terms a summary may carry per tool it says it holds (plus as many again for the
#: zone's own description and keywords); the most of any ToolRet tool is 148. The count mass (every
#: term's count summed) is bounded at MAX_REPEATS times as much: a summary cannot say more than its
#: tools could hold
TERMS_PER_TOOL = 512
_TERM = re.compile(r"^[^\W_A-Z]+$", re.UNICODE)
_KEYS = {"format", "zone", "serial", "description", "keywords", "tools", "terms", "vectors", "facets"}


@dataclass(frozen=True)
class PublishedSummary:
    """One zone's summary as its parent sees it."""

    zone: str
    serial: int
    description: str = ""
    keywords: tuple[str, ...] = ()
    #: tools in the zone and beneath it
    tools: int = 0
    #: index terms (:func:`tooldns.scoring.tokenize.tokenize`) and their counts, most frequent first
    terms: tuple[tuple[str, int], ...] = ()
    #: a few centroids of the vectors of the tools beneath (one model, the vector option's encoding),
    #: for parents that score with the hybrid scorer; none when the zone has no vectors
    vectors: tuple[bytes, ...] = ()
    #: the terms of the tools beneath in groups (each counted, most frequent first), for parents that
    #: rank children by their best group; none for a zone with more than :data:`MAX_FACETS` groups
    facets: tuple[tuple[tuple[str, int], ...], ...] = ()


def summary_name(origin: str) -> str:
    """The owner name of *origin*'s published summary."""
    return f"{SUMMARY_LABEL}.{origin}"


def _payload(summary: PublishedSummary) -> bytes:
    return json.dumps({"format": FORMAT, "zone": summary.zone, "serial": summary.serial,
                       "description": summary.description, "keywords": list(summary.keywords),
                       "tools": summary.tools, "terms": dict(summary.terms),
                       **({"vectors": [base64.b64encode(v).decode("ascii") for v in summary.vectors]}
                          if summary.vectors else {}),
                       **({"facets": [dict(f) for f in summary.facets]} if summary.facets else {})},
                      ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode_summary(summary: PublishedSummary) -> list[bytes]:
    """The TXT strings of *summary*: its JSON in 255-octet pieces."""
    data = _payload(summary)
    return [data[i:i + 255] for i in range(0, len(data), 255)] or [b""]


def fit_summary(zone: str, serial: int, description: str, keywords: tuple[str, ...], counts: Counter,
                tools: int, vectors: tuple[bytes, ...] = (), facets: tuple[Counter, ...] = ()) -> PublishedSummary:
    """A summary of *zone* that a parent accepts: the most frequent of *counts* (ties by term) that
    fit :data:`MAX_TERMS` and :data:`MAX_SUMMARY_BYTES`, each capped as :func:`decode_summary` caps;
    *facets* (counted terms of groups of tools) when there are at most :data:`MAX_FACETS` and they
    fit in half the octets, none otherwise."""
    tools = min(max(0, tools), MAX_TOOLS)
    if facets and len(facets) <= MAX_FACETS:
        tools = min(tools, FACET_TOOLS * len(facets))
    cap = MAX_REPEATS * max(1, tools) + MAX_REPEATS
    grouped = tuple(filter(None, (tuple(_ranked(f, cap)[:MAX_TERMS]) for f in facets)))
    if len(grouped) > MAX_FACETS or len(_payload(PublishedSummary(zone, 0, facets=grouped))) > MAX_SUMMARY_BYTES // 2:
        grouped = ()
    ranked = _within_mass(_ranked(counts, cap)[:min(MAX_TERMS, _most_terms(tools))], tools)
    description = clip(printable(description), MAX_DESCRIPTION_BYTES)
    keywords = tuple(clip(printable(k), MAX_KEYWORD_BYTES) for k in keywords[:MAX_KEYWORDS])
    vectors = tuple(vectors[:MAX_VECTORS])
    head = len(_payload(PublishedSummary(zone, serial, description, keywords, tools, (), vectors, grouped)))
    size, kept = head, 0
    for term, n in ranked:
        size += len(term.encode("utf-8")) + len(str(n)) + 4  # "term":n,
        if size > MAX_SUMMARY_BYTES:
            break
        kept += 1
    return PublishedSummary(zone, serial, description, keywords, tools, tuple(ranked[:kept]), vectors, grouped)


def _most_terms(tools: int) -> int:
    """The most distinct terms a summary of *tools* tools may carry."""
    return TERMS_PER_TOOL * (max(1, tools) + 1)


def _most_mass(tools: int) -> int:
    """The most a summary of *tools* tools may count all its terms together."""
    return MAX_REPEATS * _most_terms(tools)


def _within_mass(ranked: list[tuple[str, int]], tools: int) -> list[tuple[str, int]]:
    """The most frequent of *ranked* whose counts sum to at most :func:`_most_mass`."""
    left = _most_mass(tools)
    for i, (_, n) in enumerate(ranked):
        left -= n
        if left < 0:
            return ranked[:i]
    return ranked


def _ranked(counts, cap: int) -> list[tuple[str, int]]:
    """The index terms of *counts*, each capped at *cap*, most frequent first (ties by term)."""
    return sorted(((t, min(n, cap)) for t, n in counts.items() if n > 0 and _TERM.match(t)
                   and len(t) <= MAX_TERM_CHARS), key=lambda tn: (-tn[1], tn[0]))


def clip(text: str, limit: int) -> str:
    """*text* cut to at most *limit* UTF-8 bytes, never inside a character (a lone surrogate counts as
    its three bytes, as a catalog's JSON escape may carry one)."""
    raw = text.encode("utf-8", "surrogatepass")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def decode_summary(strings: list[bytes], zone: str) -> PublishedSummary:
    """The summary in TXT *strings*, which must be *zone*'s; :class:`SummaryError` if anything is off."""
    data = b"".join(strings)
    if len(data) > MAX_SUMMARY_BYTES:
        raise SummaryError(f"summary of {zone} is {len(data)} octets; at most {MAX_SUMMARY_BYTES} are accepted")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SummaryError(f"summary of {zone} is not UTF-8 JSON: {exc}") from None
    except RecursionError:  # "[[[[...": the decoder's recursion, not a child out of reach
        raise SummaryError(f"summary of {zone} nests too deeply to be read") from None
    if not isinstance(doc, dict):
        raise SummaryError(f"summary of {zone} must be a JSON object")
    unknown = set(doc) - _KEYS
    if doc.get("format") != FORMAT:
        raise SummaryError(f"summary of {zone}: format {doc.get('format')!r} is not {FORMAT!r}")
    if unknown:
        raise SummaryError(f"summary of {zone}: unknown keys {sorted(unknown)}")
    if doc.get("zone") != zone:
        raise SummaryError(f"summary of {zone} says it is {doc.get('zone')!r}'s")
    serial, tools = doc.get("serial"), doc.get("tools", 0)
    if not _count(serial, 2**32 - 1, 0):
        raise SummaryError(f"summary of {zone}: serial must be a number from 0 to 2^32-1")
    if not _count(tools, MAX_TOOLS, 0):
        raise SummaryError(f"summary of {zone}: tools must be a number from 0 to {MAX_TOOLS}")
    description = doc.get("description", "")
    if not isinstance(description, str) or len(description.encode("utf-8")) > MAX_DESCRIPTION_BYTES:
        raise SummaryError(f"summary of {zone}: description must be text of at most {MAX_DESCRIPTION_BYTES} octets")
    keywords = doc.get("keywords", [])
    if (not isinstance(keywords, list) or len(keywords) > MAX_KEYWORDS
            or not all(isinstance(k, str) and len(k.encode("utf-8")) <= MAX_KEYWORD_BYTES for k in keywords)):
        raise SummaryError(f"summary of {zone}: keywords must be a list of at most {MAX_KEYWORDS} texts "
                           f"of at most {MAX_KEYWORD_BYTES} octets")
    terms = doc.get("terms", {})
    if not isinstance(terms, dict) or len(terms) > MAX_TERMS:
        raise SummaryError(f"summary of {zone}: terms must be an object of at most {MAX_TERMS} terms")
    ranked = _terms(terms, tools, zone)
    if len(ranked) > _most_terms(tools) or sum(n for _, n in ranked) > _most_mass(tools):
        raise SummaryError(f"summary of {zone}: {len(ranked)} terms counted {sum(n for _, n in ranked)} times; "
                           f"with {tools} tools at most {_most_terms(tools)} terms counted {_most_mass(tools)} "
                           f"times are accepted")
    facets = _facets(doc.get("facets", []), tools, zone)
    if facets and tools > FACET_TOOLS * len(facets):
        raise SummaryError(f"summary of {zone}: {tools} tools in {len(facets)} facets; a facet stands for at most "
                           f"{FACET_TOOLS} tools")
    return PublishedSummary(zone, serial, printable(description), tuple(printable(k) for k in keywords),
                            tools, ranked, _vectors(doc.get("vectors", []), zone), facets)


def _terms(terms: dict, tools: int, zone: str, what: str = "term") -> tuple[tuple[str, int], ...]:
    """Counted index *terms* (of a summary, or of one of its facets) checked, most frequent first."""
    cap = MAX_REPEATS * max(1, tools) + MAX_REPEATS
    for term, n in terms.items():
        if len(term) > MAX_TERM_CHARS or not _TERM.match(term):
            raise SummaryError(f"summary of {zone}: {term[:40]!r} is not an index term "
                               f"(lower-case letters and digits, at most {MAX_TERM_CHARS})")
        if not _count(n, cap, 1):
            raise SummaryError(f"summary of {zone}: {what} {term!r} counted {n!r} times; with {tools} tools "
                               f"at most {cap} are accepted")
    return tuple(sorted(terms.items(), key=lambda tn: (-tn[1], tn[0])))


def _facets(items, tools: int, zone: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """The facets of a summary: at most :data:`MAX_FACETS` objects of counted index terms, none empty."""
    if (not isinstance(items, list) or len(items) > MAX_FACETS
            or not all(isinstance(f, dict) and 0 < len(f) <= MAX_TERMS for f in items)):
        raise SummaryError(f"summary of {zone}: facets must be a list of at most {MAX_FACETS} objects of "
                           f"1 to {MAX_TERMS} terms")
    return tuple(_terms(f, tools, zone, "facet term") for f in items)


def _vectors(items, zone: str) -> tuple[bytes, ...]:
    """The centroids of a summary: base64 vector options, at most :data:`MAX_VECTORS`, of one model."""
    if not isinstance(items, list) or len(items) > MAX_VECTORS or not all(isinstance(v, str) for v in items):
        raise SummaryError(f"summary of {zone}: vectors must be a list of at most {MAX_VECTORS} base64 texts")
    out, models = [], set()
    for text in items:
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
            models.add(decode_vector(data).model)
        except (ValueError, binascii.Error, UnicodeEncodeError, VectorError) as exc:
            raise SummaryError(f"summary of {zone}: a vector is not a valid vector option: {exc}") from None
        out.append(data)
    if len(models) > 1:
        raise SummaryError(f"summary of {zone}: vectors of several models ({', '.join(sorted(models))})")
    return tuple(out)


def _count(value, most: int, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= most
