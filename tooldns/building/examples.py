"""Example intents: read them, give them to the catalog's tools, fit the vector map on them, keep the map.

Example intents say which tool served which request: an organisation writes them for its own tools,
a benchmark's training queries are such examples for its catalog, a query log in which agents
reported which tool served them gives more. ``tooldns build`` takes them from the catalog
(``"examples": [...]`` in an entry) and from ``--examples FILE``, in either form:

    [{"query": "latest songs of Beyoncé", "correct_tools": [{"id": "apigen_tool_1530"}]}, ...]   # ToolRet's
    {"apigen_tool_1530": ["latest songs of Beyoncé", ...], ...}                                    # by tool id

Each tool keeps its examples in its zone file (``examples:``); with vectors, the build fits a
:class:`~tooldns.embedding.vectormap.VectorMap` on them (:func:`fit_map`) and bakes it into every
tool vector and centroid, and saves it beside the zone files (:func:`save_map`), where ``tooldns
embed`` finds it again (:func:`load_map`) for tools added later.

    >>> catalog = load_catalogs(["services.en.json"])
    >>> add_examples(catalog, read_examples("queries.dev.en.json"))   # warnings for unknown tool ids
    []
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..embedding.embedder import Embedder
from ..embedding.vectormap import VectorMap, fit_held_out
from ..exceptions import BuildError, EmbeddingError
from ..zone.zonefile import write_atomically
from .catalog import Catalog, fit_to_limits

#: what a map file is called beside the zone files: vector-map-<digest>.npz
MAP_PREFIX = "vector-map-"


def read_examples(path: str | os.PathLike) -> dict[str, list[str]]:
    """Tool id -> example intents, from a file in either form of the module docstring; BuildError
    saying what is wrong otherwise."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as fh:
            data = json.loads(fh.read())
    except OSError as exc:
        raise BuildError(f"{source}: cannot read: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"{source}: not valid JSON: {exc}") from None
    out: dict[str, list[str]] = {}
    if isinstance(data, dict):
        for tool_id, intents in data.items():
            if not isinstance(intents, list) or not all(isinstance(x, str) for x in intents):
                raise BuildError(f"{source}: the examples of {tool_id!r} are not a list of intents (texts)")
            out.setdefault(str(tool_id), []).extend(x.strip() for x in intents if x.strip())
        return out
    if not isinstance(data, list):
        raise BuildError(f"{source}: examples are a list of {{query, correct_tools}} or a mapping of tool id to "
                         f"intents, not {type(data).__name__}")
    for i, entry in enumerate(data):
        query = entry.get("query") if isinstance(entry, dict) else None
        tools = entry.get("correct_tools") if isinstance(entry, dict) else None
        if not isinstance(query, str) or not isinstance(tools, list):
            raise BuildError(f"{source}[{i}]: an example is an object with 'query' (text) and 'correct_tools' "
                             f"(a list of {{\"id\": ...}})")
        for tool in tools:
            tool_id = tool.get("id") if isinstance(tool, dict) else tool
            if query.strip() and isinstance(tool_id, (str, int)):
                out.setdefault(str(tool_id), []).append(query.strip())
    return out


def add_examples(catalog: Catalog, examples: dict[str, list[str]]) -> list[str]:
    """Give each catalog tool its *examples* (after those it has, each once, within the zone file's
    limits); the warnings: examples of tools the catalog does not hold."""
    by_id = {t.id: t for t in catalog.tools}
    unknown = [tool_id for tool_id in examples if tool_id not in by_id]
    for tool_id, intents in examples.items():
        tool = by_id.get(tool_id)
        if tool is not None:
            tool.examples.extend(x for x in intents if x not in tool.examples)
            fit_to_limits(tool, catalog.warnings)
    if not unknown:
        return []
    shown = ", ".join(map(repr, unknown[:5])) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return [f"examples of {len(unknown)} tools the catalog does not hold were left out: {shown}"]


def fit_map(embedder: Embedder, tool_vectors, covered: list[bool], examples: list[list[str]],
            progress=lambda s: None) -> VectorMap | None:
    """The vector map fitted on every tool's *examples* (one list per tool, in the order of
    *tool_vectors*, the model's own unit vectors), or None when no covered tool has any. Each
    example is embedded as an intent (:meth:`Embedder.embed_queries`), as clients embed theirs."""
    pairs = [(x, i) for i, (intents, ok) in enumerate(zip(examples, covered)) if ok
             for x in intents if embedder.covers(x)]
    if not pairs:
        return None
    texts = list(dict.fromkeys(x for x, _ in pairs))
    progress(f"embedding {len(texts)} example intents of {len({i for _, i in pairs})} tools with {embedder.model}")
    try:
        vectors = embedder.embed_queries(texts)
    except EmbeddingError as exc:
        raise BuildError(f"cannot embed the example intents: {exc}") from exc
    row = {x: n for n, x in enumerate(texts)}
    progress(f"fitting the vector map on {len(pairs)} examples")
    return fit_held_out(embedder.model, tool_vectors, [vectors[row[x]] for x, _ in pairs], [i for _, i in pairs],
                        [x for x, _ in pairs])


def map_path(directory: str | os.PathLike, digest: str) -> Path:
    return Path(directory) / f"{MAP_PREFIX}{digest}.npz"


def save_map(directory: str | os.PathLike, vmap: VectorMap) -> Path:
    """Write *vmap* beside the zone files (through a temporary file renamed into place)."""
    path = map_path(directory, vmap.digest)
    write_atomically(path, vmap.to_bytes())
    return path


def load_map(directory: str | os.PathLike, digest: str) -> VectorMap:
    """The map *digest* the zones of *directory* name; BuildError when it is missing or not that map."""
    path = map_path(directory, digest)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BuildError(f"the zones' vectors were made through the vector map {digest}, and {path} is not there: "
                         f"copy it from where the tree was built, or build the tree again") from None
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return VectorMap.from_bytes(data, digest)
    except EmbeddingError as exc:
        raise BuildError(f"{path}: {exc}") from None
