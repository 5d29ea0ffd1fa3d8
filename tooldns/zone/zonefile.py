"""Zone files: one YAML file per zone, as organisations write them, read with line-exact errors.

This module is the one schema: :func:`load_zone` and :func:`parse_zone` read it, :func:`dump_zone`
writes it, and the defaults of :mod:`tooldns.zone.model` fill what a file leaves out. Every zone file
the project writes is this module's text, written by :func:`write_atomically` (a temporary file
flushed and renamed into place; :func:`write_zone` does both): ``tooldns build`` writes each zone so,
and ``build --update``, ``embed`` and ``dnssec`` change one by loading it, changing the
:class:`~tooldns.zone.model.Zone` and writing it back with its header comment lines
(:func:`header_of`); no other comment survives (``docs/zonefiles.md``).
:mod:`.emit` only writes the YAML, byte for byte as PyYAML would, and knows no zone keys.

Every problem is reported as ``file:line: what is wrong; what is allowed`` and all problems of a
file are reported at once (:class:`ZoneFileError.errors`). A file with any error is refused
whole: a server starting on it refuses to start; a server reloading it keeps the last good
version (see :mod:`tooldns.serving.store`). The format is described in ``docs/zonefiles.md``::

    origin: history.weather.tools.
    soa: {contact: hostmaster@weather.example, serial: 2026113001}
    nameservers: [{name: ns1.history.weather.tools., address: 127.0.0.11}]
    summary: {description: Past weather observations, keywords: [archive, climate]}
    tools:
      - label: open-meteo-archive
        name: Open-Meteo Historical Weather API
        service: http
        target: archive-api.open-meteo.com.
        port: 443
        description: Hourly weather back to 1940 for any coordinate.
        endpoint: https://archive-api.open-meteo.com/v1/archive

    >>> zone = load_zone("zones/history.weather.tools.yaml")
    >>> parse_zone(dump_zone(zone)) == zone
    True

Reading is bounded (``docs/security.md``): the YAML is read event by event and anchors, aliases,
merge keys and tags other than the core schema's are refused where they appear, before anything
is built; sizes, counts, lengths and nesting are held to :class:`~tooldns.zone.limits.ZoneLimits`
(``load_zone(path, limits=...)``), so that a small file cannot cost much and whatever loads can be
answered.
"""

from __future__ import annotations

import base64
import codecs
import io
import ipaddress
import itertools
import os
import re
import stat
from pathlib import Path
from dataclasses import MISSING, fields
from typing import Any

import yaml

from ..protocol import names
from ..protocol.plan import MAX_BEAM, MAX_DEPTHS, MAX_K, MAX_PAGES, WalkPlan, fusion_problem, model_problem
from ..protocol.vector import MAX_DIM, MAX_MODEL, decode_vector
from ..scoring.bm25 import CorpusStats
from ..exceptions import NameError_, PlanError, VectorError, ZoneFileError
from ..embedding.registry import spec_problem
from ..scoring.registry import option_problem, scorer_names
from . import emit
from .limits import ZoneLimits
from .model import KINDS, SOA, Delegation, NameServer, Parameter, RateLimit, Settings, Summary, Tool, Zone


def _defaults(cls) -> dict[str, Any]:
    """The model's default of each field that has one: what a file that leaves the key out gets."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_ZONE, _SOA, _SETTINGS = _defaults(Zone), _defaults(SOA), Settings()
_TOOL, _PARAM = _defaults(Tool), _defaults(Parameter)


class _Map(dict):
    """A mapping that remembers the line of each key (1-based) and its own."""

    __slots__ = ("line", "key_lines")


class _Seq(list):
    """A list that remembers the line of each item (1-based) and its own."""

    __slots__ = ("line", "item_lines")


_CORE = "tag:yaml.org,2002:"
#: explicit tags a zone file may carry (``!!str 0123``); any other tag is refused
_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map")}
_NOTHING = object()
#: the longest vector in base64: version, model length, model, dim, scale, components
_MAX_VECTOR_BASE64 = 4 * -(-(2 + MAX_MODEL + 6 + MAX_DIM) // 3)
_REFUSED = object()  # stands for a merge key, reported once where it is read
#: ``corpus_terms`` and facets as they should be: term:count pairs (a term without spaces or colons,
#: a count of ASCII digits; \s is what str.split splits at) separated by spaces
_TERM_PAIRS = re.compile(r"\s*(?:[^\s:]+:[0-9]+(?:\s+|\Z))*")
_TERM_PAIR = re.compile(r"([^\s:]+):([0-9]+)")


class _Composer:
    """Turns the YAML parser's events into located values (:class:`_Map`, :class:`_Seq`, scalars).

    Reading events, not a composed node tree, is what keeps a small file from costing much:
    anchors and aliases are refused where they appear and never expanded (a 518-byte file of
    nested aliases would otherwise expand to gigabytes), other tags than the core schema's are
    refused before anything is constructed, and the nesting depth and the number of values are
    bounded as they are read, with no recursion. Nothing outlives one file's reading.
    """

    def __init__(self, c: "_Checker") -> None:
        self.c = c
        self.limits = c.limits
        self.stack: list[_Map | _Seq] = []
        self.keys: list[Any] = []  # per open mapping: its pending key and the key's line, or _NOTHING
        self.root: Any = _NOTHING
        self.nodes = 0
        self.documents = 0
        self.refused = False  # an anchor, alias, tag or unreadable value: the schema is not checked then
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()

    def fatal(self, line: int, message: str) -> ZoneFileError:
        self.c.err(line, message)
        return self.c.failure()

    def feed(self, event: yaml.Event) -> None:
        if isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent)):
            return
        line = event.start_mark.line + 1
        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise self.fatal(line, "a second YAML document ('---'); a zone file holds one zone")
            return
        if isinstance(event, yaml.CollectionEndEvent):
            done = self.stack.pop()
            self.keys.pop()
            self.attach(done, done.line)
            return
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise self.fatal(line, f"more than {self.limits.max_nodes} YAML values; at most that many are allowed "
                                   "(ZoneLimits.max_nodes)")
        if isinstance(event, yaml.AliasEvent):
            self.refuse(line, f"an alias (*{event.anchor}); aliases and anchors are not allowed in zone files: "
                              "write the value out")
            self.attach(None, line)
            return
        if event.anchor is not None:
            self.refuse(line, f"an anchor (&{event.anchor}); anchors and aliases are not allowed in zone files")
        if event.tag not in (None, "!") and event.tag not in _TAGS:
            self.refuse(line, f"the tag {event.tag!r} is not allowed; allowed: none, or one of "
                              f"{', '.join('!!' + t[len(_CORE):] for t in sorted(_TAGS))}")
        if isinstance(event, yaml.ScalarEvent):
            self.attach(self.scalar(event, line), line)
        else:
            self.open(_Map() if isinstance(event, yaml.MappingStartEvent) else _Seq(), line)

    def refuse(self, line: int, message: str) -> None:
        self.refused = True
        self.c.err(line, message)

    def open(self, collection: _Map | _Seq, line: int) -> None:
        if len(self.stack) >= self.limits.max_depth:
            raise self.fatal(line, f"mappings and lists nested more than {self.limits.max_depth} deep; at most "
                                   f"{self.limits.max_depth} are allowed (ZoneLimits.max_depth)")
        collection.line = line
        if isinstance(collection, _Map):
            collection.key_lines = {}
        else:
            collection.item_lines = []
        self.stack.append(collection)
        self.keys.append(_NOTHING)

    def scalar(self, event: yaml.ScalarEvent, line: int) -> Any:
        tag = event.tag
        if tag in (None, "!"):
            tag = self.resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _CORE + "merge":
            self.refuse(line, "a merge key ('<<'); merge keys are not allowed in zone files")
            return _REFUSED
        if tag in (_CORE + "str", _CORE + "value") or tag not in _TAGS:
            return event.value
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
        try:
            return self.constructor.yaml_constructors[tag](self.constructor, node)
        except Exception as exc:  # int('9' * 5000), !!bool maybe ...: a value that cannot be read
            self.refuse(line, f"cannot read {_show(event.value)} as {tag[len(_CORE):]}: {str(exc)[:80]}")
            return None

    def attach(self, value: Any, line: int) -> None:
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        if isinstance(top, _Seq):
            top.append(value)
            top.item_lines.append(line)
            return
        pending = self.keys[-1]
        if pending is _NOTHING:
            self.keys[-1] = (value, line)
            return
        self.keys[-1] = _NOTHING
        key, kline = pending
        if key is _REFUSED:
            return
        if not isinstance(key, str):
            self.c.err(kline, "keys must be plain text")
        elif key in top:
            self.c.err(kline, f"duplicate key '{key}' (first at line {top.key_lines[key]})")
        else:
            top[key] = value
            top.key_lines[key] = kline


def _read_yaml(text: str, c: "_Checker") -> Any:
    """The located values of zone-file *text*; a ZoneFileError for what cannot be read safely."""
    composer = _Composer(c)
    try:
        for event in yaml.parse(text, Loader=emit.LOADER):
            composer.feed(event)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise composer.fatal(mark.line + 1 if mark else 1, f"bad YAML: {problem}") from None
    if composer.refused:
        raise c.failure()
    if composer.root is _NOTHING:
        raise composer.fatal(1, "the file is empty; a zone needs at least origin, soa and nameservers")
    return composer.root


def _show(value: Any) -> str:
    """*value* as a message quotes it: its repr, cut short (a zone file's values may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    """Collects errors while turning located YAML into the zone model."""

    def __init__(self, where: str, limits: ZoneLimits | None = None) -> None:
        self.where = where
        self.limits = limits or ZoneLimits()
        self.errors: list[str] = []
        self.unlisted = 0  # errors past limits.max_errors: counted, not kept
        self.first_unlisted = 0

    def err(self, line: int, message: str) -> None:
        if len(self.errors) < self.limits.max_errors:
            self.errors.append(f"{self.where}:{line}: {message}")
            return
        self.first_unlisted = self.first_unlisted or line
        self.unlisted += 1

    def failure(self) -> ZoneFileError:
        """The error listing every problem found (the first ``max_errors`` of them, and a count)."""
        more = [f"{self.where}:{self.first_unlisted}: {self.unlisted} more problems from here on are not listed "
                f"(the first {self.limits.max_errors} are; ZoneLimits.max_errors)"] if self.unlisted else []
        return ZoneFileError(self.errors + more)

    def too_long(self, value: str, line: int, what: str, limit: int, knob: str) -> bool:
        """Whether *value* is over *limit* UTF-8 bytes (or not Unicode at all): reported at *line*."""
        if value.isascii() and len(value) <= limit:  # the common case, without encoding
            return False
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:  # "\ud800" in a double-quoted scalar: a lone surrogate
            self.err(line, f"{what} is not valid Unicode (character {exc.start} is a lone surrogate)")
            return True
        if size <= limit:
            return False
        self.err(line, f"{what} is {size} bytes long; at most {limit} are allowed (ZoneLimits.{knob})")
        return True

    def count(self, items: list, line: int, what: str, limit: int, knob: str) -> list:
        """*items*, or its first *limit* after reporting that there are too many."""
        if len(items) <= limit:
            return items
        self.err(line, f"{what} has {len(items)} items; at most {limit} are allowed (ZoneLimits.{knob})")
        return items[:limit]

    def mapping(self, value: Any, line: int, what: str, required: set[str], optional: set[str]) -> _Map | None:
        if not isinstance(value, _Map):
            self.err(line, f"{what} must be a mapping of keys to values")
            return None
        allowed = required | optional
        for key in value:
            if key not in allowed:
                self.err(value.key_lines[key], f"unknown key '{key}' in {what}; allowed: {', '.join(sorted(allowed))}")
        for key in sorted(required - set(value)):
            self.err(value.line, f"{what} is missing '{key}'")
        return value

    def lineof(self, m: _Map, key: str) -> int:
        return m.key_lines.get(key, m.line)

    def text(self, m: _Map, key: str, what: str, default: str | None = None, empty_ok: bool = False,
             limit: str = "max_text_bytes") -> str:
        """The text at *key*, stripped; *limit* names the :class:`ZoneLimits` field bounding its bytes."""
        if key not in m:
            return default or ""
        value = m[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            self.err(self.lineof(m, key), f"{what} '{key}' must be text")
            return default or ""
        if self.too_long(value, self.lineof(m, key), f"{what} '{key}'", getattr(self.limits, limit), limit):
            return default or ""
        if not value.strip() and not empty_ok:
            self.err(self.lineof(m, key), f"{what} '{key}' is empty")
        return value.strip()

    def integer(self, m: _Map, key: str, what: str, default: int, lo: int, hi: int) -> int:
        if key not in m:
            return default
        value = m[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.err(self.lineof(m, key), f"{what} '{key}' must be a whole number from {lo} to {hi}, got {_show(value)}")
            return default
        return value

    def number(self, m: _Map, key: str, what: str, default: float, lo: float, hi: float) -> float:
        if key not in m:
            return default
        value = m[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            self.err(self.lineof(m, key), f"{what} '{key}' must be a number from {lo} to {hi}, got {_show(value)}")
            return default
        return float(value)

    def name(self, value: Any, line: int, what: str) -> str | None:
        if not isinstance(value, str) or not value.strip():
            self.err(line, f"{what} must be a domain name")
            return None
        if len(value) > 4 * names.MAX_NAME:  # not worth checking label by label (nor caching)
            self.err(line, f"{what} is {len(value)} characters long; a domain name is at most {names.MAX_NAME} octets")
            return None
        try:
            return names.normalize(value)
        except NameError_ as exc:
            self.err(line, f"{what} {_show(value)}: {exc}")
            return None

    def label(self, value: Any, line: int, what: str) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            self.err(line, f"{what} must be a DNS label (letters, digits, '-')")
            return None
        try:
            low = names.check_label(value)
        except NameError_ as exc:
            self.err(line, f"{what}: {exc}")
            return None
        if low.startswith("_"):
            self.err(line, f"{what} {_show(value)} may not start with '_' (reserved for service and cursor labels)")
            return None
        return low

    def address(self, value: Any, line: int, what: str) -> str | None:
        try:
            return str(ipaddress.ip_address(str(value)))
        except ValueError:
            self.err(line, f"{what} {_show(value)} is not an IPv4 or IPv6 address")
            return None

    def seq(self, m: _Map, key: str, what: str, limit: str | None = None) -> list[tuple[Any, int]]:
        """The items of the list at *key* with their lines; *limit* names the field bounding their number."""
        if key not in m or m[key] is None:
            return []
        value = m[key]
        if not isinstance(value, _Seq):
            self.err(self.lineof(m, key), f"'{key}' in {what} must be a list")
            return []
        items = list(zip(value, value.item_lines))
        if limit is None:
            return items
        return self.count(items, self.lineof(m, key), f"'{key}' in {what}", getattr(self.limits, limit), limit)

    def vector(self, value: Any, line: int, what: str) -> bytes:
        """A vector in the vector option's encoding, written as base64; b"" after an error."""
        if not isinstance(value, str):
            self.err(line, f"{what} must be base64 text (what tooldns build and tooldns embed write)")
            return b""
        if len(value) > _MAX_VECTOR_BASE64:
            self.err(line, f"{what} is {len(value)} characters long; a vector is at most {_MAX_VECTOR_BASE64} "
                           f"characters of base64 ({MAX_DIM} components)")
            return b""
        try:
            data = base64.b64decode(value.encode("ascii"), validate=True)
            decode_vector(data)
        except (ValueError, UnicodeEncodeError, VectorError) as exc:
            self.err(line, f"{what} is not a valid vector: {exc}")
            return b""
        return data

    def summary(self, value: Any, line: int, what: str, child: bool = False) -> Summary:
        """A ``summary:`` block; a child's may say which serial of the child it was written for
        (``serial``) and that it is the operator's to keep (``pin: true``)."""
        m = self.mapping(value, line, what, {"description"},
                         {"keywords", "corpus", "corpus_terms"} | ({"serial", "pin", "facets"} if child else set()))
        if m is None:
            return Summary()
        serial = self.integer(m, "serial", what, None, 0, 2**32 - 1) if "serial" in m else None
        pinned = m.get("pin", False)
        if not isinstance(pinned, bool):
            self.err(self.lineof(m, "pin"), f"{what} 'pin' must be true or false, got {_show(pinned)}")
            pinned = False
        desc = self.text(m, "description", what, limit="max_summary_bytes")
        corpus = self.text(m, "corpus", what, empty_ok=True, limit="max_corpus_bytes")
        counted = self.corpus_terms(m, what)
        keywords = []
        for kw, kline in self.seq(m, "keywords", what, limit="max_keywords"):
            if not isinstance(kw, (str, int)) or isinstance(kw, bool) or not str(kw).strip():
                self.err(kline, f"keyword in {what} must be non-empty text")
            elif not self.too_long(str(kw), kline, f"keyword in {what}", self.limits.max_keyword_bytes,
                                   "max_keyword_bytes"):
                keywords.append(str(kw).strip())
        return Summary(desc, tuple(keywords), corpus, serial, pinned, corpus_terms=counted,
                       facets=self.facets(m, what) if child else ())

    def corpus_terms(self, m: _Map, what: str) -> tuple[tuple[str, int], ...]:
        """A summary's ``corpus_terms``: its corpus counted, as ``term:count`` pairs separated by
        spaces (one scalar, read at C speed: a large subtree has tens of thousands of terms)."""
        raw = self.text(m, "corpus_terms", what, empty_ok=True, limit="max_corpus_bytes")
        return self.term_pairs(raw, self.lineof(m, "corpus_terms"), f"{what} 'corpus_terms'")

    def facets(self, m: _Map, what: str) -> tuple[tuple[tuple[str, int], ...], ...]:
        """A delegation's ``facets``: a list of groups of the tools beneath it, each written as
        ``corpus_terms`` is (``tooldns build`` writes them; :attr:`Summary.facets`)."""
        out = []
        for n, (raw, line) in enumerate(self.seq(m, "facets", what, limit="max_facets"), 1):
            if not isinstance(raw, str) or not raw.strip():
                self.err(line, f"facet {n} of {what} must be term:count pairs separated by spaces")
                return ()
            if self.too_long(raw, line, f"facet {n} of {what}", self.limits.max_corpus_bytes, "max_corpus_bytes"):
                return ()
            pairs = self.term_pairs(raw, line, f"facet {n} of {what}")
            if not pairs:
                return ()
            out.append(pairs)
        return tuple(out)

    def term_pairs(self, raw: str, line: int, what: str) -> tuple[tuple[str, int], ...]:
        """``term:count`` pairs separated by spaces; () after an error. Checked whole by a regular
        expression first (a root's delegations hold a hundred thousand pairs: checking them one by one
        was half of loading it), pair by pair only to say what is wrong."""
        if _TERM_PAIRS.fullmatch(raw):
            found = _TERM_PAIR.findall(raw)
            counts = [int(count) for _, count in found]
            if (not counts or (min(counts) > 0 and max(counts) < 2**31)) and len({t for t, _ in found}) == len(found):
                return tuple(zip((t for t, _ in found), counts))
        out = []
        for n, pair in enumerate(raw.split()):
            term, colon, count = pair.rpartition(":")
            if not (colon and term and count.isascii() and count.isdigit() and 0 < int(count) < 2**31
                    and ":" not in term):
                self.err(line, f"{what}: pair {n + 1} ({_show(pair)}) "
                         "is not term:count (a term without spaces or colons, a count from 1 to 2147483647)")
                return ()
            out.append((term, int(count)))
        if len({t for t, _ in out}) < len(out):
            self.err(line, f"{what} counts a term twice")
            return ()
        return tuple(out)

    def nameservers(self, m: _Map, what: str, bailiwick: str | None) -> tuple[NameServer, ...]:
        """Name servers with addresses; in-bailiwick names need an address (glue)."""
        out = []
        items = self.seq(m, "nameservers", what, limit="max_nameservers")
        if not items:
            need = "glue: a name server name and its address" if bailiwick else "a name server name and its address"
            self.err(self.lineof(m, "nameservers"), f"{what} has no name servers; it needs at least one, with {need}")
        seen = set()
        for item, line in items:
            ns = self.mapping(item, line, f"name server of {what}", {"name", "address"}, set())
            if ns is None or "name" not in ns or "address" not in ns:
                continue
            name = self.name(ns["name"], self.lineof(ns, "name"), "name server name")
            addr = self.address(ns["address"], self.lineof(ns, "address"), "name server address")
            if name and bailiwick and not names.is_subdomain(name, bailiwick):
                self.err(self.lineof(ns, "name"),
                         f"glue for {name} is outside the bailiwick of {bailiwick}: a delegation's name "
                         f"servers must be named inside {bailiwick} so that their addresses can be served as glue")
                continue
            if name and addr:
                if (name, addr) in seen:
                    self.err(line, f"duplicate name server {name} {addr}")
                seen.add((name, addr))
                out.append(NameServer(name, addr))
        return tuple(out)


ZONE_KEYS_REQUIRED = {"origin", "soa", "nameservers"}
ZONE_KEYS_OPTIONAL = {"ttl", "summary", "settings", "walk", "children", "tools", "corpus_stats", "vector_centre"}
WALK_KEYS_OPTIONAL = {"leaf_k", "best_leaf_k", "beam", "model", "pages", "fusion"}
TOOL_KEYS_REQUIRED = {"label", "name", "service", "target", "port", "description"}
TOOL_KEYS_OPTIONAL = {"transport", "priority", "weight", "endpoint", "parameters", "id", "vector", "vector_of",
                      "examples"}


def parse_zone(text: str | bytes, where: str = "<zone>", limits: ZoneLimits | None = None) -> Zone:
    """Parse and validate zone-file text (or its UTF-8 bytes, checked by :func:`check_utf8`: a file's,
    read as it is, which is never decoded or encoded again whole); raise :class:`ZoneFileError`
    listing every problem.

    *limits* bound what the text may hold (:class:`~tooldns.zone.limits.ZoneLimits`; its defaults
    when None).
    """
    c = _Checker(where, limits)
    if isinstance(text, bytes):
        size = len(text)
    else:
        size = len(text) if len(text) > c.limits.max_file_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > c.limits.max_file_bytes:
        c.err(1, f"the file is {size} bytes; at most {c.limits.max_file_bytes} bytes are allowed "
                 "(ZoneLimits.max_file_bytes)")
        raise c.failure()
    data = _read_yaml(text, c)
    top = c.mapping(data, 1, "the zone", ZONE_KEYS_REQUIRED, ZONE_KEYS_OPTIONAL)
    if top is None:
        raise c.failure()

    origin = c.name(top.get("origin"), c.lineof(top, "origin"), "origin") if "origin" in top else None
    if origin == ".":
        c.err(c.lineof(top, "origin"), "origin may not be the DNS root")
        origin = None
    elif origin is not None and origin.startswith("_"):  # its names would read as cursors for its parent
        c.err(c.lineof(top, "origin"), f"origin {origin} may not start with '_': underscore labels are cursors")
        origin = None
    zone_origin = origin or "invalid."

    ttl = c.integer(top, "ttl", "zone", _ZONE["ttl"], 0, 2**31 - 1)
    soa = _soa(c, top, zone_origin)
    own_ns = c.nameservers(top, "the zone", None) if "nameservers" in top else ()
    summary = c.summary(top["summary"], c.lineof(top, "summary"), "summary") if "summary" in top else Summary()
    settings = _settings(c, top)
    walk = _walk(c, top)
    children = _children(c, top, zone_origin)
    tools = _tools(c, top, zone_origin)
    stats = _corpus_stats(c, top)
    centre = c.vector(top["vector_centre"], c.lineof(top, "vector_centre"), "vector_centre") \
        if "vector_centre" in top else b""
    models = sorted({decode_vector(v).model for v in [*(t.vector for t in tools if t.vector),
                                                      *(v for d in children for v in d.vectors),
                                                      *([centre] if centre else [])]})
    if len(models) > 1:
        c.err(1, f"vectors of {len(models)} models ({', '.join(models)}) in one zone; a zone scores one model's "
                 "vectors: run tooldns embed to make them all with one")
    if c.errors:
        raise c.failure()
    return Zone(origin=zone_origin, soa=soa, nameservers=own_ns, ttl=ttl, summary=summary,
                children=children, tools=tools, settings=settings, corpus_stats=stats, vector_centre=centre,
                source=where, walk=walk)


def load_zone(path: str | os.PathLike, limits: ZoneLimits | None = None) -> Zone:
    """Read and validate one zone file (see :func:`parse_zone` for *limits*).

    A file over ``limits.max_file_bytes`` is refused before it is read (and a file that grows is
    read no further than that). Only a regular file is read: a FIFO, a device, a socket or a link to
    one is refused (:func:`open_regular`), never waited on.
    """
    where = os.fspath(path)
    data, _ = read_zone_file(where, limits)
    check_utf8(data, where)
    return parse_zone(data, where, limits)


#: bytes checked a step by :func:`check_utf8`
UTF8_STEP = 2**20


def check_utf8(data: bytes, where: str) -> None:
    """ZoneFileError unless *data* is UTF-8. Checked a megabyte at a time, so that a thread reading a
    large file gives the interpreter's lock to others between steps (decoding 60 MB at once held it
    for tens of milliseconds); the text is not kept: YAML reads the bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for start in range(0, len(data), UTF8_STEP):
        try:
            decoder.decode(data[start:start + UTF8_STEP], final=start + UTF8_STEP >= len(data))
        except UnicodeDecodeError as exc:
            raise ZoneFileError(f"{where}:1: the file is not UTF-8 (byte {start + exc.start})") from None


def stat_stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What tells one version of a file from another: its modification time, size and inode."""
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_zone_file(path: str | os.PathLike, limits: ZoneLimits | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of the zone file at *path* and its status as opened, within ``limits.max_file_bytes``
    (:func:`load_zone`'s reading, which :mod:`tooldns.serving.loader` shares); ZoneFileError when it
    cannot be read or is too large."""
    where = os.fspath(path)
    most = (limits or ZoneLimits()).max_file_bytes
    try:
        with open_regular(where) as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(most + 1) if st.st_size <= most else b""
    except OSError as exc:
        raise ZoneFileError(f"{where}:0: cannot read: {exc.strerror}") from None
    if st.st_size > most or len(data) > most:
        raise ZoneFileError(f"{where}:1: the file is {f'{st.st_size} bytes' if st.st_size > most else 'longer than that'}; "
                            f"at most {most} bytes are allowed (ZoneLimits.max_file_bytes)")
    return data, st


def open_regular(path: str) -> io.BufferedReader:
    """*path* opened for reading in binary, when it is a regular file (after symbolic links);
    ZoneFileError naming what it is otherwise. Opened without blocking and checked on the open
    descriptor, so that a FIFO put where a zone file was (whose open waits for a writer, and whose
    read waits for data) or a device (``/dev/urandom``: endless) is refused at once, and a file
    swapped between a check and the open is seen as what was opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ZoneFileError(f"{path}:0: not a regular file ({_file_kind(mode)}); "
                                "a zone file must be one (refused without reading it)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return kind
    return "not a file"


def zone_files(zonedir: str | os.PathLike) -> list[Path]:
    """The ``*.yaml`` zone files of a directory, sorted; ZoneFileError when there are none."""
    d = Path(zonedir)
    if not d.is_dir():
        raise ZoneFileError(f"{d}: no such directory" if not d.exists()
                            else f"{d}: not a directory of zone files (a directory holding *.yaml zone files is)")
    files = sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise ZoneFileError(f"{d}: no *.yaml zone files")
    return files


def _default_soa(origin: str) -> SOA:
    return SOA(f"ns1.{origin}", f"hostmaster.{origin}")


def _soa(c: _Checker, top: _Map, origin: str) -> SOA:
    if "soa" not in top:
        return _default_soa(origin)
    m = c.mapping(top["soa"], c.lineof(top, "soa"), "soa", {"serial"},
                  {"contact", "mname", "refresh", "retry", "expire", "minimum"})
    if m is None:
        return _default_soa(origin)
    mname = c.name(m["mname"], c.lineof(m, "mname"), "soa mname") if "mname" in m else None
    return SOA(
        mname=mname or _default_soa(origin).mname,
        rname=_rname(c, m, origin),
        serial=c.integer(m, "serial", "soa", _SOA["serial"], 0, 2**32 - 1),
        refresh=c.integer(m, "refresh", "soa", _SOA["refresh"], 0, 2**31 - 1),
        retry=c.integer(m, "retry", "soa", _SOA["retry"], 0, 2**31 - 1),
        expire=c.integer(m, "expire", "soa", _SOA["expire"], 0, 2**31 - 1),
        minimum=c.integer(m, "minimum", "soa", _SOA["minimum"], 0, 2**31 - 1),
    )


def _rname(c: _Checker, m: _Map, origin: str) -> str:
    """The SOA RNAME of the contact mailbox: '@' turned into '.', dots in the local part escaped
    (RFC 1035); checked to pack as a name, or every negative answer of the zone would fail."""
    contact = c.text(m, "contact", "soa", default=f"hostmaster@{origin.rstrip('.')}")
    local, _, domain = contact.partition("@")
    rname_text = f"{local.replace('.', chr(92) + '.')}.{domain}" if domain else contact
    rname = rname_text if rname_text.endswith(".") else rname_text + "."
    # the wire labels are what lies between the dots, escaped or not (as dnslib packs it)
    labels = rname[:-1].split(".")
    wire = sum(len(label) + 1 for label in labels) + 1
    longest = max(len(label) for label in labels)
    if not rname.isascii() or not all(ch.isprintable() and not ch.isspace() for ch in rname):
        problem = "holds characters other than printable ASCII"
    elif wire > names.MAX_NAME:
        problem = f"makes a name of {wire} octets; at most {names.MAX_NAME} are allowed"
    elif longest > names.MAX_LABEL:
        problem = f"has a part of {longest} octets between dots; at most {names.MAX_LABEL} are allowed"
    elif not all(labels):
        problem = "has an empty part (two dots in a row, or a dot at either end of a part)"
    else:
        return rname
    c.err(c.lineof(m, "contact"), f"soa contact {_show(contact)} {problem} (it becomes the SOA's mailbox name)")
    return _default_soa(origin).rname


def _settings(c: _Checker, top: _Map) -> Settings:
    if "settings" not in top:
        return Settings()
    m = c.mapping(top["settings"], c.lineof(top, "settings"), "settings", set(),
                  {"scorer", "scorer_options", "child_scorer_options", "prune_ratio", "max_k", "intent_ttl",
                   "embed_intents", "vector_map", "rate_limit"})
    if m is None:
        return Settings()
    scorer = c.text(m, "scorer", "settings", default=_SETTINGS.scorer)
    if scorer not in scorer_names():
        c.err(c.lineof(m, "scorer"), f"unknown scorer '{scorer}'; allowed: {', '.join(scorer_names())}")
    options = {}
    for key in ("scorer_options", "child_scorer_options"):
        value = m.get(key) or {}
        if not isinstance(value, dict):
            c.err(c.lineof(m, key), f"{key} must be a mapping")
            value = {}
        problem = option_problem(scorer, dict(value))
        if problem:  # found here with its line, not when the index builds the scorer
            c.err(c.lineof(m, key), f"{key}: {problem}")
            value = {}
        options[key] = dict(value)
    embed = c.text(m, "embed_intents", "settings", default=_SETTINGS.embed_intents, empty_ok=True)
    if embed and spec_problem(embed):
        c.err(c.lineof(m, "embed_intents"), f"embed_intents: {spec_problem(embed)}")
        embed = ""
    return Settings(
        scorer=scorer,
        scorer_options=options["scorer_options"],
        child_scorer_options=options["child_scorer_options"],
        prune_ratio=c.number(m, "prune_ratio", "settings", _SETTINGS.prune_ratio, 0.0, 1.0),
        max_k=c.integer(m, "max_k", "settings", _SETTINGS.max_k, 1, 255),
        intent_ttl=c.integer(m, "intent_ttl", "settings", _SETTINGS.intent_ttl, 0, 86400),
        embed_intents=embed,
        vector_map=_vector_map(c, m),
        rate_limit=_rate_limit(c, m),
    )


def _vector_map(c: _Checker, m: _Map) -> str:
    digest = c.text(m, "vector_map", "settings", default=_SETTINGS.vector_map, empty_ok=True)
    if digest and not re.fullmatch(r"[0-9a-f]{12}", digest):
        c.err(c.lineof(m, "vector_map"), f"vector_map {_show(digest)} is not a map's digest (12 hexadecimal "
                                         f"digits, as tooldns build writes it)")
        return ""
    return digest


def _examples(c: _Checker, m: _Map, what: str) -> tuple[str, ...]:
    out = []
    for item, line in c.seq(m, "examples", what, limit="max_examples"):
        if not isinstance(item, str) or not item.strip():
            c.err(line, f"an example intent of {what} must be text, got {_show(item)}")
        elif not c.too_long(item, line, f"an example intent of {what}", c.limits.max_example_bytes,
                            "max_example_bytes"):
            out.append(item.strip())
    return tuple(out)


def _walk(c: _Checker, top: _Map) -> WalkPlan | None:
    """The ``walk:`` the zone publishes at ``_walk.<origin>`` (:mod:`tooldns.protocol.plan`): K per depth
    (a number, or a list of one per depth, the last repeating) and optionally ``leaf_k``,
    ``best_leaf_k``, ``beam``, ``model``, ``pages`` and ``fusion``; None when the zone has none (or after
    an error)."""
    if "walk" not in top:
        return None
    m = c.mapping(top["walk"], c.lineof(top, "walk"), "walk", {"k"}, WALK_KEYS_OPTIONAL)
    if m is None or "k" not in m:
        return None
    ks = _walk_k(c, m)
    leaf_k = c.integer(m, "leaf_k", "walk", None, 1, MAX_K)
    best_leaf_k = c.integer(m, "best_leaf_k", "walk", None, 1, MAX_K)
    beam = c.integer(m, "beam", "walk", None, 1, MAX_BEAM)
    pages = c.integer(m, "pages", "walk", None, 1, MAX_PAGES)
    model = None
    if "model" in m:
        model = c.text(m, "model", "walk") or None
        problem = model_problem(model) if model is not None else None
        if problem:  # the vector option's rule: the model is named as the vectors name it
            c.err(c.lineof(m, "model"), f"walk {problem}")
            model = None
    fusion = m.get("fusion")
    problem = fusion_problem(fusion)
    if problem:  # BM25's share in the client's fusion, as the record can write it
        c.err(c.lineof(m, "fusion"), f"walk {problem}")
        fusion = None
    if ks is None:
        return None
    try:
        return WalkPlan(ks, leaf_k, best_leaf_k, beam, model, pages, fusion)
    except PlanError as exc:  # each value was checked at its line above: not expected
        c.err(c.lineof(top, "walk"), f"walk: {exc}")
        return None


def _walk_k(c: _Checker, m: _Map) -> tuple[int, ...] | None:
    """A walk's ``k``: one K (``k: 6``) or one per depth (``k: [5, 3, 2]``); None after an error."""
    value, line = m["k"], c.lineof(m, "k")
    allowed = f"a whole number from 1 to {MAX_K}, or a list of 1 to {MAX_DEPTHS} of them (K per depth, the last repeating)"
    if isinstance(value, int) and not isinstance(value, bool):
        items = [(value, line)]
    elif isinstance(value, _Seq):
        items = list(zip(value, value.item_lines))
        if not 1 <= len(items) <= MAX_DEPTHS:
            c.err(line, f"walk 'k' names {len(items)} depths; it must be {allowed}")
            return None
    else:
        c.err(line, f"walk 'k' must be {allowed}, got {_show(value)}")
        return None
    ks = []
    for item, item_line in items:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_K:
            c.err(item_line, f"walk 'k' {_show(item)} is out of range; each K must be a whole number from 1 to {MAX_K}")
            return None
        ks.append(item)
    return tuple(ks)


def _rate_limit(c: _Checker, m: _Map) -> RateLimit:
    rate_limit = _SETTINGS.rate_limit
    r = c.mapping(m["rate_limit"], c.lineof(m, "rate_limit"), "rate_limit", set(),
                  {f.name for f in fields(rate_limit)}) if "rate_limit" in m else None
    if r is None:
        return rate_limit
    exempt = []
    for item, line in c.seq(r, "exempt", "rate_limit"):
        try:
            exempt.append(str(ipaddress.ip_network(str(item), strict=False)))
        except ValueError:
            c.err(line, f"rate_limit exempt {item!r} is not an address or a network such as 192.0.2.0/24")
    return RateLimit(
        **{key: c.integer(r, key, "rate_limit", getattr(rate_limit, key), 0, 10**6)
           for key in ("responses_per_second", "nxdomains_per_second", "errors_per_second")},
        window=c.integer(r, "window", "rate_limit", rate_limit.window, 1, 3600),
        slip=c.integer(r, "slip", "rate_limit", rate_limit.slip, 0, 10),
        ipv4_prefix_length=c.integer(r, "ipv4_prefix_length", "rate_limit", rate_limit.ipv4_prefix_length, 0, 32),
        ipv6_prefix_length=c.integer(r, "ipv6_prefix_length", "rate_limit", rate_limit.ipv6_prefix_length, 0, 128),
        exempt=tuple(exempt))


def _children(c: _Checker, top: _Map, origin: str) -> tuple[Delegation, ...]:
    out: list[Delegation] = []
    seen: dict[str, int] = {}
    for item, line in c.seq(top, "children", "the zone", limit="max_children"):
        m = c.mapping(item, line, "child", {"label", "summary"}, {"kind", "nameservers", "leaf", "vectors", "ds"})
        if m is None or "label" not in m:
            continue
        label = c.label(m["label"], c.lineof(m, "label"), "child label")
        if label is None:
            continue
        if label in seen:
            c.err(c.lineof(m, "label"), f"duplicate child label '{label}' (first at line {seen[label]})")
            continue
        seen[label] = c.lineof(m, "label")
        kind = c.text(m, "kind", "child", default="functional").lower()
        kind = "organisation" if kind == "organization" else kind
        if kind not in KINDS:
            c.err(c.lineof(m, "kind"), f"child kind '{kind}' is unknown; allowed: {', '.join(KINDS)}")
        summary = (c.summary(m["summary"], c.lineof(m, "summary"), f"summary of child '{label}'", child=True)
                   if "summary" in m else Summary())
        child_name = f"{label}.{origin}"
        ns = c.nameservers(m, f"delegation to '{label}'", origin)
        leaf = m.get("leaf", False)
        if not isinstance(leaf, bool):
            c.err(c.lineof(m, "leaf"), f"child 'leaf' must be true or false, got {_show(leaf)}")
            leaf = False
        vectors = tuple(v for v in (c.vector(item, vline, f"vector of child '{label}'")
                                    for item, vline in c.seq(m, "vectors", f"child '{label}'", limit="max_vectors")) if v)
        ds = tuple(d for d in (_ds(c, item, dline, label)
                               for item, dline in c.seq(m, "ds", f"child '{label}'", limit="max_nameservers")) if d)
        out.append(Delegation(label, child_name, kind, summary, ns, leaf, vectors, ds))
    return tuple(out)


def _tools(c: _Checker, top: _Map, origin: str) -> tuple[Tool, ...]:
    out: list[Tool] = []
    seen: dict[tuple[str, str], int] = {}
    for item, line in c.seq(top, "tools", "the zone", limit="max_tools"):
        m = c.mapping(item, line, "tool", TOOL_KEYS_REQUIRED, TOOL_KEYS_OPTIONAL)
        if m is None or "label" not in m:
            continue
        label = c.label(m["label"], c.lineof(m, "label"), "tool label")
        what = f"tool '{label or str(m.get('label'))[:63]}'"
        service = c.text(m, "service", what).lower()
        if service and (service not in names.SERVICES or service == names.ANY_SERVICE):
            allowed = sorted(names.SERVICES - {names.ANY_SERVICE})
            c.err(c.lineof(m, "service"), f"{what}: unknown service '{service}'; allowed: {', '.join(allowed)}")
        transport = c.text(m, "transport", what, default=_TOOL["transport"]).lower()
        if transport not in names.TRANSPORTS:
            c.err(c.lineof(m, "transport"), f"{what}: unknown transport '{transport}'; allowed: {', '.join(sorted(names.TRANSPORTS))}")
        if label and (service, label) in seen:
            c.err(c.lineof(m, "label"), f"duplicate tool label '{label}' for service {service} (first at line {seen[(service, label)]})")
            continue
        if label:
            seen[(service, label)] = c.lineof(m, "label")
        target = c.name(m.get("target"), c.lineof(m, "target"), f"{what} target") if "target" in m else None
        params = _parameters(c, m, what)
        tool = Tool(
            label=label or "invalid", name=c.text(m, "name", what, limit="max_name_bytes"), service=service,
            target=target or ".", port=c.integer(m, "port", what, 0, 0, 65535),
            description=c.text(m, "description", what, limit="max_description_bytes"),
            transport=transport, priority=c.integer(m, "priority", what, _TOOL["priority"], 0, 65535),
            weight=c.integer(m, "weight", what, _TOOL["weight"], 0, 65535),
            endpoint=c.text(m, "endpoint", what, empty_ok=True, limit="max_endpoint_bytes"),
            parameters=params, id=c.text(m, "id", what, empty_ok=True),
            vector=c.vector(m["vector"], c.lineof(m, "vector"), f"{what} vector") if "vector" in m else b"",
            vector_of=c.text(m, "vector_of", what, empty_ok=True),
            examples=_examples(c, m, what),
        )
        if label:
            try:
                names.normalize(tool.owner(origin))
            except NameError_ as exc:
                c.err(c.lineof(m, "label"), f"{what}: its name {tool.owner(origin)} is too long: {exc}")
        out.append(tool)
    return tuple(out)


def _parameters(c: _Checker, m: _Map, what: str) -> tuple[Parameter, ...]:
    params = []
    for p, pline in c.seq(m, "parameters", what, limit="max_parameters"):
        pm = c.mapping(p, pline, f"parameter of {what}", {"name"}, {"type", "description", "required"})
        if pm is None or "name" not in pm:
            continue
        required = pm.get("required", False)
        if not isinstance(required, bool):
            c.err(c.lineof(pm, "required"), f"parameter 'required' must be true or false, got {_show(required)}")
            required = False
        params.append(Parameter(c.text(pm, "name", "parameter"), c.text(pm, "type", "parameter", default=_PARAM["type"]),
                                c.text(pm, "description", "parameter", empty_ok=True, limit="max_parameter_bytes"),
                                required))
    return tuple(params)


def _corpus_stats(c: _Checker, top: _Map) -> CorpusStats | None:
    if "corpus_stats" not in top:
        return None
    m = c.mapping(top["corpus_stats"], c.lineof(top, "corpus_stats"), "corpus_stats", {"n_docs", "avgdl", "df"}, set())
    if m is None:
        return None
    df = m.get("df")
    if not isinstance(df, dict) or not all(isinstance(v, int) and v > 0 for v in df.values()):
        c.err(c.lineof(m, "df"), "corpus_stats 'df' must map terms to positive whole numbers")
        df = {}
    return CorpusStats(c.integer(m, "n_docs", "corpus_stats", 1, 1, 2**31 - 1),
                       c.number(m, "avgdl", "corpus_stats", 1.0, 0.0, 1e9), {str(k): v for k, v in df.items()})


def _ds(c: _Checker, value: Any, line: int, label: str) -> str | None:
    """A DS record's RDATA text (``key-tag algorithm digest-type digest``) in dnspython's form, or None
    after reporting what is wrong with it."""
    import dns.exception
    import dns.rdata

    if not isinstance(value, str) or len(value) > 1024:
        c.err(line, f"DS of child '{label}' must be text such as '12345 15 2 3f5a...', got {_show(value)}")
        return None
    try:
        return dns.rdata.from_text("IN", "DS", value).to_text()
    except (dns.exception.DNSException, ValueError) as exc:
        c.err(line, f"DS of child '{label}' is not a DS record ({exc}); write 'key-tag algorithm digest-type "
                    "digest' as 'tooldns dnssec ds' prints it")
        return None


# -- writing --

def zone_header(text: str) -> str:
    """The comment lines at the top of zone-file *text*, without their ``#`` (and the space after it):
    what :func:`dump_zone` takes back as *header*, so a file rewritten by a tool keeps them."""
    out = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        out.append(line[1:].removeprefix(" "))
    return "\n".join(out)


def header_of(path: str | os.PathLike) -> str:
    """The comment lines at the top of the zone file at *path* (:func:`zone_header`), read no further."""
    with open(path, encoding="utf-8") as fh:
        return zone_header("".join(itertools.takewhile(lambda line: line.startswith("#"), fh)))


def dump_zone(zone: Zone, header: str = "") -> str:
    """The zone-file text of *zone*: what :func:`parse_zone` reads back as an equal zone.

    Keys holding the model's defaults are left out (except ``ttl`` and the SOA's contact and
    serial, which operators look for), so a dumped file reads like a hand-written one. *header*
    becomes ``#`` comment lines at the top. The YAML is PyYAML's, byte for byte, written by
    :func:`tooldns.zone.emit.dump` where it can do without PyYAML's per-node work.
    """
    comments = "".join(f"# {line}\n" for line in header.split("\n")) if header else ""  # zone_header's lines, all
    return comments + emit.dump(zone_document(zone))


def zone_document(zone: Zone) -> dict[str, Any]:
    """*zone* as the plain document (dicts, lists, scalars) that :func:`dump_zone` writes as YAML."""
    doc: dict[str, Any] = {"origin": zone.origin, "ttl": zone.ttl, "soa": _dump_soa(zone.soa, zone.origin),
                           "nameservers": _dump_nameservers(zone.nameservers)}
    if zone.summary != Summary():
        doc["summary"] = _dump_summary(zone.summary)
    settings = _dump_settings(zone.settings)
    if settings:
        doc["settings"] = settings
    if zone.walk is not None:
        doc["walk"] = _dump_walk(zone.walk)
    if zone.children:
        doc["children"] = [_dump_child(c) for c in zone.children]
    if zone.tools:
        doc["tools"] = [_dump_tool(t) for t in zone.tools]
    if zone.corpus_stats is not None:
        st = zone.corpus_stats
        doc["corpus_stats"] = {"n_docs": st.n_docs, "avgdl": st.avgdl, "df": dict(sorted(st.df.items()))}
    if zone.vector_centre:
        doc["vector_centre"] = base64.b64encode(zone.vector_centre).decode("ascii")
    return doc


def write_zone(zone: Zone, path: str | os.PathLike, header: str = "") -> None:
    """Write *zone* to *path* (see :func:`dump_zone`), atomically (:func:`write_atomically`)."""
    write_atomically(path, dump_zone(zone, header))


def with_ds(text: str, label: str, ds: tuple[str, ...]) -> str:
    """Zone file *text* (one that loads) with the DS records of its child *label* set to *ds*, and
    nothing else of it changed: its keys' order, its defaults, its comments and its quoting stay as
    written (``tooldns dnssec`` hands a child's DS to its parent so). The ``ds:`` key is replaced
    where the delegation has one, or added as its last key."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)  # safe: the file loaded, so it has no aliases or tags
    child = next((item for key, value in root.value if key.value == "children" for item in value.value
                  if any(k.value == "label" and v.value == label for k, v in item.value)), None)
    if child is None:
        raise ZoneFileError(f"no child {label!r} in the zone file")
    if child.flow_style:
        raise ZoneFileError(f"child {label!r} is written as a flow mapping; add its ds by hand")
    indent = " " * child.value[0][0].start_mark.column
    block = f"{indent}ds:\n" + "".join(f"{indent}- '{d}'\n" for d in ds)

    def after(node) -> int:
        """Where the line of the last scalar of *node* ends (past its newline): a collection's own end
        mark lies at the next token, past blank lines and comments that belong to what follows."""
        while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.value:
            node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
        mark = node.end_mark
        if mark.column == 0 and mark.index > 0 and text[mark.index - 1] == "\n":
            return mark.index  # a block scalar ends where the next line starts
        end = text.find("\n", mark.index)
        return len(text) if end < 0 else end + 1

    old = next(((k, v) for k, v in child.value if k.value == "ds"), None)
    if old is not None:
        start = text.rfind("\n", 0, old[0].start_mark.index) + 1
        return text[:start] + block + text[after(old[1]):]
    at = after(child)
    return text[:at] + ("" if at == 0 or text[at - 1] == "\n" else "\n") + block + text[at:]


def write_atomically(path: str | os.PathLike, data: str | bytes, mode: int | None = None,
                     durable: bool = True) -> None:
    """Write *data* (text is written as UTF-8) to *path* through a temporary file in the same
    directory, flushed to the disk and renamed into place: a reader (a server polling the file) sees
    the old version or the new one, never half of one, and so does whoever looks after a crash; a
    write that fails (disk full, a file size limit) leaves the old file whole and no temporary file.
    The file keeps its permissions, or gets *mode* (a key: 0600, from its creation on). Zone files
    are written so, and key files, and whatever a built tree keeps beside them. Not *durable*: not
    flushed to the disk before the rename, for a cache whose reader survives a copy a crash lost or
    spoiled (a lazy server's snapshots)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # no *.yaml: a server never reads it
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if mode is not None else 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        try:
            os.chmod(tmp, mode if mode is not None else os.stat(path).st_mode & 0o7777)
        except OSError:
            pass  # a new file: the umask's mode
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _contact(rname: str) -> str:
    """The mailbox an RNAME stands for: the first unescaped dot is the '@' (RFC 1035)."""
    i = 0
    while i < len(rname):
        if rname[i] == "\\":
            i += 2
            continue
        if rname[i] == ".":
            local, domain = rname[:i], rname[i + 1:].rstrip(".")
            return f"{local.replace(chr(92) + '.', '.')}@{domain}" if domain else local.replace(chr(92) + ".", ".")
        i += 1
    return rname


def _dump_soa(soa: SOA, origin: str) -> dict[str, Any]:
    out: dict[str, Any] = {"contact": _contact(soa.rname), "serial": soa.serial}
    if soa.mname != _default_soa(origin).mname:
        out["mname"] = soa.mname
    for key in ("refresh", "retry", "expire", "minimum"):
        if getattr(soa, key) != _SOA[key]:
            out[key] = getattr(soa, key)
    return out


def _dump_nameservers(nameservers) -> list[dict[str, str]]:
    return [{"name": ns.name, "address": ns.address} for ns in nameservers]


def format_terms(counts) -> str:
    """*counts* (term -> count, or pairs) as a summary's ``corpus_terms``: most frequent first."""
    pairs = counts.items() if isinstance(counts, dict) else counts
    return " ".join(f"{t}:{n}" for t, n in sorted(pairs, key=lambda tn: (-tn[1], tn[0])))


def _dump_summary(summary: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {"description": summary.description}
    if summary.keywords:
        out["keywords"] = list(summary.keywords)
    if summary.corpus:
        out["corpus"] = summary.corpus
    if summary.corpus_terms:
        out["corpus_terms"] = format_terms(summary.corpus_terms)
    if summary.facets:
        out["facets"] = [format_terms(facet) for facet in summary.facets]
    if summary.serial is not None:
        out["serial"] = summary.serial
    if summary.pinned:
        out["pin"] = True
    return out


def _dump_settings(settings: Settings) -> dict[str, Any]:
    out = {f.name: getattr(settings, f.name) for f in fields(Settings)
           if getattr(settings, f.name) != getattr(_SETTINGS, f.name)}
    if "rate_limit" in out:  # a mapping of what differs from the defaults; lists, not tuples
        rate_limit, default = out["rate_limit"], _SETTINGS.rate_limit
        out["rate_limit"] = {f.name: list(value) if isinstance(value, tuple) else value for f in fields(rate_limit)
                             if (value := getattr(rate_limit, f.name)) != getattr(default, f.name)}
    return out


def _dump_walk(walk: WalkPlan) -> dict[str, Any]:
    """A walk as ``walk:`` reads it: one K as a number, several as a list; only the settings given."""
    out: dict[str, Any] = {"k": walk.k[0] if len(walk.k) == 1 else list(walk.k)}
    for key in ("leaf_k", "best_leaf_k", "beam", "model", "pages", "fusion"):
        if getattr(walk, key) is not None:
            out[key] = getattr(walk, key)
    return out


def _dump_child(child: Delegation) -> dict[str, Any]:
    out: dict[str, Any] = {"label": child.label, "kind": child.kind}
    if child.leaf:
        out["leaf"] = True
    out["summary"] = _dump_summary(child.summary)
    out["nameservers"] = _dump_nameservers(child.nameservers)
    if child.vectors:
        out["vectors"] = [base64.b64encode(v).decode("ascii") for v in child.vectors]
    if child.ds:
        out["ds"] = list(child.ds)
    return out


def _dump_tool(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"label": tool.label, "name": tool.name, "service": tool.service, "target": tool.target,
                           "port": tool.port, "description": tool.description}
    for key in ("transport", "priority", "weight"):
        if getattr(tool, key) != _TOOL[key]:
            out[key] = getattr(tool, key)
    if tool.id:
        out["id"] = tool.id
    if tool.endpoint:
        out["endpoint"] = tool.endpoint
    if tool.parameters:
        out["parameters"] = [{"name": p.name, "type": p.type, "required": p.required, "description": p.description}
                             for p in tool.parameters]
    if tool.vector:
        out["vector"] = base64.b64encode(tool.vector).decode("ascii")
    if tool.vector_of:  # written as read, even without its vector (a hand edit may leave it alone)
        out["vector_of"] = tool.vector_of
    if tool.examples:
        out["examples"] = list(tool.examples)
    return out
