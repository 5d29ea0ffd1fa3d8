"""Zone files: one YAML file per zone, as organisations write them, read with line-exact errors.

This module is the one schema: :func:`load_zone` and :func:`parse_zone` read it, :func:`dump_zone`
writes it (``tooldns build`` writes every zone through it), and the defaults of
:mod:`tooldns.zone.model` fill what a file leaves out.

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
"""

from __future__ import annotations

import base64
import ipaddress
import os
from pathlib import Path
from dataclasses import MISSING, fields
from typing import Any

import yaml

from ..protocol import names
from ..protocol.vector import decode_vector
from ..scoring.bm25 import CorpusStats
from ..exceptions import NameError_, VectorError, ZoneFileError
from ..scoring.registry import scorer_names
from .model import KINDS, SOA, Delegation, NameServer, Parameter, Settings, Summary, Tool, Zone


def _defaults(cls) -> dict[str, Any]:
    """The model's default of each field that has one: what a file that leaves the key out gets."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_ZONE, _SOA, _SETTINGS = _defaults(Zone), _defaults(SOA), Settings()
_TOOL, _PARAM = _defaults(Tool), _defaults(Parameter)


class _Map(dict):
    """A mapping that remembers the line of each key (1-based) and its own."""

    line = 0
    key_lines: dict


class _Seq(list):
    line = 0
    item_lines: list


_constructor = yaml.constructor.SafeConstructor()
# libyaml's parser when PyYAML has it (built zone files can be megabytes); marks are the same
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _located(node: yaml.Node, errors: list[str], where: str) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = _Map()
        out.line, out.key_lines = line, {}
        for key_node, value_node in node.value:
            key = _constructor.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            kline = key_node.start_mark.line + 1
            if not isinstance(key, str):
                errors.append(f"{where}:{kline}: keys must be plain text")
                continue
            if key in out:
                errors.append(f"{where}:{kline}: duplicate key '{key}' (first at line {out.key_lines[key]})")
                continue
            out[key] = _located(value_node, errors, where)
            out.key_lines[key] = kline
        return out
    if isinstance(node, yaml.SequenceNode):
        out_s = _Seq(_located(n, errors, where) for n in node.value)
        out_s.line, out_s.item_lines = line, [n.start_mark.line + 1 for n in node.value]
        return out_s
    return _constructor.construct_object(node, deep=True)


class _Checker:
    """Collects errors while turning located YAML into the zone model."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.errors: list[str] = []

    def err(self, line: int, message: str) -> None:
        self.errors.append(f"{self.where}:{line}: {message}")

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

    def text(self, m: _Map, key: str, what: str, default: str | None = None, empty_ok: bool = False) -> str:
        if key not in m:
            return default or ""
        value = m[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            self.err(self.lineof(m, key), f"{what} '{key}' must be text")
            return default or ""
        if not value.strip() and not empty_ok:
            self.err(self.lineof(m, key), f"{what} '{key}' is empty")
        return value.strip()

    def integer(self, m: _Map, key: str, what: str, default: int, lo: int, hi: int) -> int:
        if key not in m:
            return default
        value = m[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.err(self.lineof(m, key), f"{what} '{key}' must be a whole number from {lo} to {hi}, got {value!r}")
            return default
        return value

    def number(self, m: _Map, key: str, what: str, default: float, lo: float, hi: float) -> float:
        if key not in m:
            return default
        value = m[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            self.err(self.lineof(m, key), f"{what} '{key}' must be a number from {lo} to {hi}, got {value!r}")
            return default
        return float(value)

    def name(self, value: Any, line: int, what: str) -> str | None:
        if not isinstance(value, str) or not value.strip():
            self.err(line, f"{what} must be a domain name")
            return None
        try:
            return names.normalize(value)
        except NameError_ as exc:
            self.err(line, f"{what} {value!r}: {exc}")
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
            self.err(line, f"{what} {value!r} may not start with '_' (reserved for service and cursor labels)")
            return None
        return low

    def address(self, value: Any, line: int, what: str) -> str | None:
        try:
            return str(ipaddress.ip_address(str(value)))
        except ValueError:
            self.err(line, f"{what} {value!r} is not an IPv4 or IPv6 address")
            return None

    def seq(self, m: _Map, key: str, what: str) -> list[tuple[Any, int]]:
        if key not in m or m[key] is None:
            return []
        value = m[key]
        if not isinstance(value, _Seq):
            self.err(self.lineof(m, key), f"'{key}' in {what} must be a list")
            return []
        return list(zip(value, value.item_lines))

    def vector(self, value: Any, line: int, what: str) -> bytes:
        """A vector in the vector option's encoding, written as base64; b"" after an error."""
        if not isinstance(value, str):
            self.err(line, f"{what} must be base64 text (what tooldns build and tooldns embed write)")
            return b""
        try:
            data = base64.b64decode(value.encode("ascii"), validate=True)
            decode_vector(data)
        except (ValueError, UnicodeEncodeError, VectorError) as exc:
            self.err(line, f"{what} is not a valid vector: {exc}")
            return b""
        return data

    def summary(self, value: Any, line: int, what: str) -> Summary:
        m = self.mapping(value, line, what, {"description"}, {"keywords", "corpus"})
        if m is None:
            return Summary()
        desc = self.text(m, "description", what)
        corpus = self.text(m, "corpus", what, empty_ok=True)
        keywords = []
        for kw, kline in self.seq(m, "keywords", what):
            if not isinstance(kw, (str, int)) or isinstance(kw, bool) or not str(kw).strip():
                self.err(kline, f"keyword in {what} must be non-empty text")
            else:
                keywords.append(str(kw).strip())
        return Summary(desc, tuple(keywords), corpus)

    def nameservers(self, m: _Map, what: str, bailiwick: str | None) -> tuple[NameServer, ...]:
        """Name servers with addresses; in-bailiwick names need an address (glue)."""
        out = []
        items = self.seq(m, "nameservers", what)
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
ZONE_KEYS_OPTIONAL = {"ttl", "summary", "settings", "children", "tools", "corpus_stats"}
TOOL_KEYS_REQUIRED = {"label", "name", "service", "target", "port", "description"}
TOOL_KEYS_OPTIONAL = {"transport", "priority", "weight", "endpoint", "parameters", "id", "vector", "vector_of"}


def parse_zone(text: str, where: str = "<zone>") -> Zone:
    """Parse and validate zone-file text; raise :class:`ZoneFileError` listing every problem."""
    errors: list[str] = []
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise ZoneFileError(f"{where}:{line}: bad YAML: {problem}") from None
    if node is None:
        raise ZoneFileError(f"{where}:1: the file is empty; a zone needs at least origin, soa and nameservers")
    data = _located(node, errors, where)
    c = _Checker(where)
    c.errors.extend(errors)
    top = c.mapping(data, 1, "the zone", ZONE_KEYS_REQUIRED, ZONE_KEYS_OPTIONAL)
    if top is None:
        raise ZoneFileError(c.errors)

    origin = c.name(top.get("origin"), c.lineof(top, "origin"), "origin") if "origin" in top else None
    if origin == ".":
        c.err(c.lineof(top, "origin"), "origin may not be the DNS root")
        origin = None
    zone_origin = origin or "invalid."

    ttl = c.integer(top, "ttl", "zone", _ZONE["ttl"], 0, 2**31 - 1)
    soa = _soa(c, top, zone_origin)
    own_ns = c.nameservers(top, "the zone", None) if "nameservers" in top else ()
    summary = c.summary(top["summary"], c.lineof(top, "summary"), "summary") if "summary" in top else Summary()
    settings = _settings(c, top)
    children = _children(c, top, zone_origin)
    tools = _tools(c, top, zone_origin)
    stats = _corpus_stats(c, top)
    models = sorted({decode_vector(v).model for v in [*(t.vector for t in tools if t.vector),
                                                      *(v for d in children for v in d.vectors)]})
    if len(models) > 1:
        c.err(1, f"vectors of {len(models)} models ({', '.join(models)}) in one zone; a zone scores one model's "
                 "vectors: run tooldns embed to make them all with one")
    if c.errors:
        raise ZoneFileError(c.errors)
    return Zone(origin=zone_origin, soa=soa, nameservers=own_ns, ttl=ttl, summary=summary,
                children=children, tools=tools, settings=settings, corpus_stats=stats, source=where)


def load_zone(path: str | os.PathLike) -> Zone:
    """Read and validate one zone file."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise ZoneFileError(f"{where}:1: the file is not UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise ZoneFileError(f"{where}:0: cannot read: {exc.strerror}") from None
    return parse_zone(text, where)


def zone_files(zonedir: str | os.PathLike) -> list[Path]:
    """The ``*.yaml`` zone files of a directory, sorted; ZoneFileError when there are none."""
    d = Path(zonedir)
    if not d.is_dir():
        raise ZoneFileError(f"{d}: not a directory of zone files")
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
    contact = c.text(m, "contact", "soa", default=f"hostmaster@{origin.rstrip('.')}")
    # RFC 1035 RNAME: the mailbox with '@' turned into '.', dots in the local part escaped.
    local, _, domain = contact.partition("@")
    rname_text = f"{local.replace('.', chr(92) + '.')}.{domain}" if domain else contact
    rname = rname_text if rname_text.endswith(".") else rname_text + "."
    mname = c.name(m["mname"], c.lineof(m, "mname"), "soa mname") if "mname" in m else None
    return SOA(
        mname=mname or _default_soa(origin).mname,
        rname=rname,
        serial=c.integer(m, "serial", "soa", _SOA["serial"], 0, 2**32 - 1),
        refresh=c.integer(m, "refresh", "soa", _SOA["refresh"], 0, 2**31 - 1),
        retry=c.integer(m, "retry", "soa", _SOA["retry"], 0, 2**31 - 1),
        expire=c.integer(m, "expire", "soa", _SOA["expire"], 0, 2**31 - 1),
        minimum=c.integer(m, "minimum", "soa", _SOA["minimum"], 0, 2**31 - 1),
    )


def _settings(c: _Checker, top: _Map) -> Settings:
    if "settings" not in top:
        return Settings()
    m = c.mapping(top["settings"], c.lineof(top, "settings"), "settings", set(),
                  {"scorer", "scorer_options", "child_scorer_options", "prune_ratio", "max_k", "intent_ttl",
                   "embed_intents"})
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
        options[key] = dict(value)
    return Settings(
        scorer=scorer,
        scorer_options=options["scorer_options"],
        child_scorer_options=options["child_scorer_options"],
        prune_ratio=c.number(m, "prune_ratio", "settings", _SETTINGS.prune_ratio, 0.0, 1.0),
        max_k=c.integer(m, "max_k", "settings", _SETTINGS.max_k, 1, 255),
        intent_ttl=c.integer(m, "intent_ttl", "settings", _SETTINGS.intent_ttl, 0, 86400),
        embed_intents=c.text(m, "embed_intents", "settings", default=_SETTINGS.embed_intents, empty_ok=True),
    )


def _children(c: _Checker, top: _Map, origin: str) -> tuple[Delegation, ...]:
    out: list[Delegation] = []
    seen: dict[str, int] = {}
    for item, line in c.seq(top, "children", "the zone"):
        m = c.mapping(item, line, "child", {"label", "summary"}, {"kind", "nameservers", "leaf", "vectors"})
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
        summary = c.summary(m["summary"], c.lineof(m, "summary"), f"summary of child '{label}'") if "summary" in m else Summary()
        child_name = f"{label}.{origin}"
        ns = c.nameservers(m, f"delegation to '{label}'", origin)
        leaf = m.get("leaf", False)
        if not isinstance(leaf, bool):
            c.err(c.lineof(m, "leaf"), f"child 'leaf' must be true or false, got {leaf!r}")
            leaf = False
        vectors = tuple(v for v in (c.vector(item, vline, f"vector of child '{label}'")
                                    for item, vline in c.seq(m, "vectors", f"child '{label}'")) if v)
        out.append(Delegation(label, child_name, kind, summary, ns, leaf, vectors))
    return tuple(out)


def _tools(c: _Checker, top: _Map, origin: str) -> tuple[Tool, ...]:
    out: list[Tool] = []
    seen: dict[tuple[str, str], int] = {}
    for item, line in c.seq(top, "tools", "the zone"):
        m = c.mapping(item, line, "tool", TOOL_KEYS_REQUIRED, TOOL_KEYS_OPTIONAL)
        if m is None or "label" not in m:
            continue
        label = c.label(m["label"], c.lineof(m, "label"), "tool label")
        what = f"tool '{label or m.get('label')}'"
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
            label=label or "invalid", name=c.text(m, "name", what), service=service, target=target or ".",
            port=c.integer(m, "port", what, 0, 0, 65535), description=c.text(m, "description", what),
            transport=transport, priority=c.integer(m, "priority", what, _TOOL["priority"], 0, 65535),
            weight=c.integer(m, "weight", what, _TOOL["weight"], 0, 65535), endpoint=c.text(m, "endpoint", what, empty_ok=True),
            parameters=params, id=c.text(m, "id", what, empty_ok=True),
            vector=c.vector(m["vector"], c.lineof(m, "vector"), f"{what} vector") if "vector" in m else b"",
            vector_of=c.text(m, "vector_of", what, empty_ok=True),
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
    for p, pline in c.seq(m, "parameters", what):
        pm = c.mapping(p, pline, f"parameter of {what}", {"name"}, {"type", "description", "required"})
        if pm is None or "name" not in pm:
            continue
        required = pm.get("required", False)
        if not isinstance(required, bool):
            c.err(c.lineof(pm, "required"), f"parameter 'required' must be true or false, got {required!r}")
            required = False
        params.append(Parameter(c.text(pm, "name", "parameter"), c.text(pm, "type", "parameter", default=_PARAM["type"]),
                                c.text(pm, "description", "parameter", empty_ok=True), required))
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


# -- writing --

def dump_zone(zone: Zone, header: str = "") -> str:
    """The zone-file text of *zone*: what :func:`parse_zone` reads back as an equal zone.

    Keys holding the model's defaults are left out (except ``ttl`` and the SOA's contact and
    serial, which operators look for), so a dumped file reads like a hand-written one. *header*
    becomes ``#`` comment lines at the top.
    """
    doc: dict[str, Any] = {"origin": zone.origin, "ttl": zone.ttl, "soa": _dump_soa(zone.soa, zone.origin),
                           "nameservers": _dump_nameservers(zone.nameservers)}
    if zone.summary != Summary():
        doc["summary"] = _dump_summary(zone.summary)
    settings = _dump_settings(zone.settings)
    if settings:
        doc["settings"] = settings
    if zone.children:
        doc["children"] = [_dump_child(c) for c in zone.children]
    if zone.tools:
        doc["tools"] = [_dump_tool(t) for t in zone.tools]
    if zone.corpus_stats is not None:
        st = zone.corpus_stats
        doc["corpus_stats"] = {"n_docs": st.n_docs, "avgdl": st.avgdl, "df": dict(sorted(st.df.items()))}
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=120)


def write_zone(zone: Zone, path: str | os.PathLike, header: str = "") -> None:
    """Write *zone* to *path* (see :func:`dump_zone`)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(dump_zone(zone, header))


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


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


def _dump_summary(summary: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {"description": summary.description}
    if summary.keywords:
        out["keywords"] = list(summary.keywords)
    if summary.corpus:
        out["corpus"] = summary.corpus
    return out


def _dump_settings(settings: Settings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in fields(Settings)
            if getattr(settings, f.name) != getattr(_SETTINGS, f.name)}


def _dump_child(child: Delegation) -> dict[str, Any]:
    out: dict[str, Any] = {"label": child.label, "kind": child.kind}
    if child.leaf:
        out["leaf"] = True
    out["summary"] = _dump_summary(child.summary)
    out["nameservers"] = _dump_nameservers(child.nameservers)
    if child.vectors:
        out["vectors"] = [base64.b64encode(v).decode("ascii") for v in child.vectors]
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
        out["vector_of"] = tool.vector_of
    return out
