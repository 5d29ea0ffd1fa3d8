"""Tool catalogs: the JSON users arrive with, loaded and checked, nothing silently dropped.

Shape (as ``services.en.json`` of the ToolRet benchmark)::

    [{"id": "apibank_tool_25", "name": "OpenBankAccount", "description": "...",
      "metadata": {"inputSchema": {"account": {"type": "string", "description": "...", "required": false}},
                   "url": "apis/open_bank_account.py"},
      "examples": ["open a new account for Ana at the bank"]}, ...]

``examples`` (optional) are intents the tool serves; ``tooldns build`` fits its vector map on them
(:mod:`.examples`).

A catalog file is read one entry at a time (ijson, when installed): a million tools' JSON is never
held whole as Python objects, which would need several times the file's size.

Errors that stop a build (all listed at once, with the entry's index): not a JSON list, an entry
that is not an object, a missing or empty id, a duplicate id, no name and no description.
Warnings that do not (each counted in the report): an empty description (the name stands in),
an inputSchema that is not an object (ignored). Several catalogs may be merged: entries with the
same id are the same tool, and their texts are joined (an English and a Chinese catalog make one
bilingual tree).

    >>> catalog = load_catalogs(["services.en.json"])
    >>> len(catalog.tools), catalog.warnings[:1]
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..exceptions import BuildError
from ..protocol.hygiene import cap_repeats
from ..protocol.summary import clip
from ..scoring.tokenize import tokenize
from ..zone.limits import ZoneLimits


@dataclass(slots=True)  # a million of them: no per-tool __dict__
class CatalogTool:
    id: str
    name: str
    description: str
    parameters: list[tuple[str, str, str, bool]] = field(default_factory=list)  # name, type, description, required
    url: str = ""
    names: list[str] = field(default_factory=list)  # every name seen (merged catalogs)
    examples: list[str] = field(default_factory=list)  # intents the tool serves (merged catalogs: all of them)

    def text(self) -> str:
        """Name, other names, description, and parameter names and descriptions: what flat lexical
        search reads."""
        params = " ".join(f"{p[0]} {p[2]}" for p in self.parameters)
        return " ".join([*self.names, self.description, params]).strip()

    def terms(self) -> list[str]:
        """The index terms its zone holds of this tool: :meth:`text` with each word past
        :data:`~tooldns.protocol.hygiene.MAX_REPEATS` dropped, tokenized (the words of the zone tool's
        ``Tool.text()``, in the same order: the same terms)."""
        return tokenize(cap_repeats(self.text()))


#: tools from which :func:`catalog_terms` reads their text in processes of their own, and how many a
#: process is handed at once
PARALLEL_TERMS = 50_000
TERMS_CHUNK = 10_000


def catalog_terms(tools: list[CatalogTool], progress: Callable[[str], None] = lambda s: None,
                  every: float = 2.0, processes: int | None = None) -> list[tuple[str, ...]]:
    """Each tool's :meth:`~CatalogTool.terms`, read once for both the tree builder and the zones'
    statistics, each term kept once in memory however many tools use it (a million tools' terms would
    otherwise be some 33 million strings); *progress* told how far every *every* seconds. From
    :data:`PARALLEL_TERMS` tools on, read in *processes* processes (the machine's cores by default),
    :data:`TERMS_CHUNK` tools at a time: a million tools' text took a minute on one core."""
    processes = processes or os.cpu_count() or 1
    out: list[tuple[str, ...]] = []
    shown = time.monotonic()

    def collect(parts: Iterable[list[tuple[str, ...]]], received: bool) -> None:
        nonlocal shown
        for part in parts:  # a part *received* from another process: its strings interned here again
            out.extend((tuple(map(sys.intern, terms)) for terms in part) if received else part)
            if time.monotonic() - shown >= every:
                shown = time.monotonic()
                progress(f"reading the tools' text: {len(out)}/{len(tools)}")

    def chunks():
        return (tools[i:i + TERMS_CHUNK] for i in range(0, len(tools), TERMS_CHUNK))

    if len(tools) >= PARALLEL_TERMS and processes > 1:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool
        from multiprocessing import get_context

        try:
            with ProcessPoolExecutor(processes, mp_context=get_context("forkserver")) as pool:
                collect(pool.map(_chunk_terms, chunks()), True)
            return out
        except BrokenProcessPool:  # processes that could not run (a script without a main guard): read here
            out.clear()
    collect(map(_chunk_terms, chunks()), False)
    return out


def _chunk_terms(tools: list[CatalogTool]) -> list[tuple[str, ...]]:
    """The terms of each of *tools*, each term one string within the chunk (pickled once, then referred
    to)."""
    return [tuple(map(sys.intern, tool.terms())) for tool in tools]


@dataclass
class Catalog:
    tools: list[CatalogTool]
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    entries_read: int = 0


def _params(schema, where: str, warnings: list[str]) -> list[tuple[str, str, str, bool]]:
    if schema is None:
        return []
    if not isinstance(schema, dict):
        warnings.append(f"{where}: inputSchema is not an object; ignored")
        return []
    # JSON Schema style {"type": "object", "properties": {...}, "required": [...]} or a flat mapping
    required_list = schema.get("required") if isinstance(schema.get("required"), list) else []
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else schema
    out = []
    for name, spec in props.items():
        if not isinstance(spec, dict):
            continue
        required = spec.get("required", name in required_list)
        out.append((str(name), str(spec.get("type", "")), str(spec.get("description", "")), bool(required is True)))
    return out


def _examples(value, where: str, warnings: list[str]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        warnings.append(f"{where}: 'examples' is not a list of intents; ignored")
        return []
    out = [str(x).strip() for x in value if isinstance(x, str) and x.strip()]
    if len(out) != len(value):
        warnings.append(f"{where}: {len(value) - len(out)} examples that are not text ignored")
    return out


def parse_catalog(data, source: str = "<catalog>") -> Catalog:
    """Check one catalog's decoded JSON; raise :class:`BuildError` listing every fatal problem."""
    if not isinstance(data, list):
        raise BuildError(f"{source}: a catalog is a JSON list of tools, got {type(data).__name__}")
    return _parse_entries(data, source)


def _parse_entries(entries: Iterable, source: str) -> Catalog:
    """:func:`parse_catalog` of a catalog's entries, however they are decoded (a list, or ijson's items
    one at a time: :func:`_read_catalog`)."""
    errors, warnings, tools, seen = [], [], [], {}
    count = 0
    for i, entry in enumerate(entries):
        count = i + 1
        where = f"{source}[{i}]"
        if not isinstance(entry, dict):
            errors.append(f"{where}: each tool is a JSON object, got {type(entry).__name__}")
            continue
        tid = entry.get("id")
        if not isinstance(tid, (str, int)) or not str(tid).strip():
            errors.append(f"{where}: missing or empty 'id'")
            continue
        tid = str(tid).strip()
        size = len(tid.encode("utf-8", "surrogatepass"))
        if size > ZoneLimits.max_text_bytes:  # a zone file's id holds no more
            errors.append(f"{where}: an id of {size} bytes; at most {ZoneLimits.max_text_bytes} are allowed")
            continue
        where = f"{where} (id {tid})"
        if tid in seen:
            errors.append(f"{where}: duplicate id, first at index {seen[tid]}")
            continue
        seen[tid] = i
        name = str(entry.get("name") or "").strip()
        desc = str(entry.get("description") or "").strip()
        if not name and not desc:
            errors.append(f"{where}: neither 'name' nor 'description'; nothing to index")
            continue
        if not desc:
            warnings.append(f"{where}: empty description; the name stands in for it")
            desc = name
        if not name:
            warnings.append(f"{where}: empty name; the id stands in for it")
            name = tid
        meta = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
        tools.append(CatalogTool(tid, name, desc, _params(meta.get("inputSchema"), where, warnings),
                                 str(meta.get("url") or ""), [name], _examples(entry.get("examples"), where, warnings)))
    if errors:
        shown = errors[:50] + ([f"... and {len(errors) - 50} more"] if len(errors) > 50 else [])
        raise BuildError("\n".join(shown))
    return Catalog(tools, warnings, [source], count)


try:  # a catalog of 100,000 tools is 55 MB of JSON: orjson reads it in a quarter of json's time
    import orjson as _fast_json
except ImportError:  # pragma: no cover - orjson comes with the server extra
    _fast_json = None


try:  # entry by entry: a million tools' catalog without its whole decoded JSON in memory
    import ijson as _ijson
except ImportError:  # pragma: no cover - ijson comes with the server extra
    _ijson = None


def json_loads(data: bytes | str):
    """Parse JSON *data*, with orjson where it is installed (the same values; errors are
    :class:`json.JSONDecodeError` either way)."""
    return _fast_json.loads(data) if _fast_json is not None else json.loads(data)


def _read_catalog(fh, source: str) -> Catalog:
    """The catalog in the open file *fh*: a JSON list decoded entry by entry with ijson; anything
    else (or without ijson) decoded whole, so that its errors read the same. Invalid JSON (or UTF-8)
    raises :class:`json.JSONDecodeError` from decoding the file whole, with its line number; what
    only ijson refuses is read whole too."""
    start = fh.read(4096)
    if _ijson is None or not start.lstrip()[:1] == b"[":
        return parse_catalog(json_loads(start + fh.read()), source)
    fh.seek(0)
    try:
        return _parse_entries(_ijson.items(fh, "item", use_float=True), source)
    except (_ijson.JSONError, UnicodeDecodeError):
        # decoded whole instead: its error, with a line number; or what ijson cannot read but orjson can
        # (integers past 64 bits), read as before
        fh.seek(0)
        return parse_catalog(json_loads(fh.read()), source)


def load_catalogs(paths: list[str | os.PathLike]) -> Catalog:
    """Load and merge catalogs; the same id in two catalogs is one tool with both texts."""
    merged: dict[str, CatalogTool] = {}
    out = Catalog([], [], [], 0)
    for path in paths:
        source = os.fspath(path)
        try:
            with open(source, "rb") as fh:
                cat = _read_catalog(fh, source)
        except OSError as exc:
            raise BuildError(f"{source}: cannot read: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise BuildError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        out.warnings.extend(cat.warnings)
        out.sources.append(source)
        out.entries_read += cat.entries_read
        for tool in cat.tools:
            old = merged.get(tool.id)
            if old is None:
                merged[tool.id] = tool
                out.tools.append(tool)
            else:
                if tool.name not in old.names:
                    old.names.append(tool.name)
                if tool.description not in old.description:
                    old.description = f"{old.description} {tool.description}"
                if not old.parameters:
                    old.parameters = tool.parameters
                old.examples.extend(x for x in tool.examples if x not in old.examples)
    for tool in out.tools:
        fit_to_limits(tool, out.warnings)
    return out


def fit_to_limits(tool: CatalogTool, warnings: list[str], limits: ZoneLimits = ZoneLimits()) -> None:
    """Cut what a zone file could not hold (the limits ``tooldns check`` and ``tooldns serve`` apply),
    saying so: a built tree is always one the server loads."""
    where = f"tool {tool.id[:80]!r}"
    description = clip(tool.description, limits.max_description_bytes)
    if description != tool.description:
        warnings.append(f"{where}: description cut to {limits.max_description_bytes} bytes")
        tool.description = description
    names = [clip(n, limits.max_name_bytes) for n in tool.names]
    if names != tool.names:
        warnings.append(f"{where}: name cut to {limits.max_name_bytes} bytes")
        tool.names = names
        tool.name = names[0]
    if len(tool.url.encode("utf-8", "surrogatepass")) > limits.max_endpoint_bytes:
        warnings.append(f"{where}: endpoint of more than {limits.max_endpoint_bytes} bytes left out")
        tool.url = ""
    if len(tool.parameters) > limits.max_parameters:
        warnings.append(f"{where}: only its first {limits.max_parameters} of {len(tool.parameters)} parameters kept")
        del tool.parameters[limits.max_parameters:]
    examples = list(dict.fromkeys(clip(x, limits.max_example_bytes) for x in tool.examples))
    if len(examples) > limits.max_examples:
        warnings.append(f"{where}: only its first {limits.max_examples} of {len(examples)} example intents kept")
        del examples[limits.max_examples:]
    tool.examples = examples
    fitted = [(clip(n, limits.max_text_bytes), clip(t, limits.max_text_bytes), clip(d, limits.max_parameter_bytes), r)
              for n, t, d, r in tool.parameters]
    if fitted != tool.parameters:
        warnings.append(f"{where}: parameter texts cut to {limits.max_text_bytes} bytes (names, types) and "
                        f"{limits.max_parameter_bytes} (descriptions)")
        tool.parameters = fitted
