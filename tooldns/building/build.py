"""``tooldns build``: from a tool catalog to a directory of zone files that ``tooldns serve`` runs.

    tooldns build services.en.json --out built/                    # offline tree (k-means)
    tooldns build services.en.json --taxonomy a2x-taxonomy/ --out built/
    tooldns build services.en.json services.zh.json --out built/   # one bilingual tree

Steps: load and check the catalog (:mod:`.catalog`), build a category tree (:mod:`.trees`),
then write one zone file per category through :mod:`tooldns.zone.zonefile` (the same schema the
server reads), with loopback addresses and glue assigned, plus ``catalog-map.json`` (catalog id -> the tool's DNS names),
``build-report.json`` and ``build-state/`` (:mod:`.state`: what ``tooldns build --update``, :mod:`.update`, needs
to change the tree in place). Decisions, measured on the ToolRet data (``docs/building.md``):

* a child's summary, which its parent scores, is the text of every tool beneath it (short
  category names and descriptions route badly), scored with BM25 k1 = 10 (long documents);
* every zone carries the catalog's global BM25 statistics (document count, mean length, and the
  document frequency of each term its tools use), so a tool scores the same in any zone and the
  client can merge leaves by score.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from ..embedding.registry import DEFAULT_SPEC, installed, make_embedder, spec_for_model
from ..exceptions import BuildError, EmbeddingError
from ..protocol import names
from ..protocol.fusion import DEFAULT_WEIGHT
from ..protocol.plan import WalkPlan
from ..protocol.summary import CENTROIDS as DELEGATION_CENTROIDS
from ..protocol.vector import decode_vector, encode_vector
from ..scoring.bm25 import MAX_FACET_TOOLS, CorpusStats, facets_of
from ..serving.index import own_tools_terms
from ..serving.loader import SNAPSHOT_DIR
from ..zone.model import SOA, Delegation, NameServer, Parameter, Settings, Summary, Tool, Zone
from ..zone.zonefile import write_atomically, write_zone
from .catalog import Catalog, CatalogTool, catalog_terms, load_catalogs
from .examples import MAP_PREFIX, add_examples, fit_map, read_examples, save_map
from .maps import KEPT_SCORERS, LeafMaps
from .quantized import carried_rows, mean_row, read_back, row_centroids
from .state import SELF, BuildState, ChildTerms, Totals, ZoneEntry, tool_digest
from .trees import A2XTreeBuilder, AutoTreeBuilder, Category, TreeBuilder, slug, unique_label

DEFAULT_CHILD_K1 = 10.0
DEFAULT_CHILD_B = 0.75
#: children (and tools) scoring below this share of the best are not returned: measured on ToolRet
#: with K = 5,3,2 it keeps hit rate@10 while scoring about a fifth of the catalog
DEFAULT_PRUNE_RATIO = 0.25
DEFAULT_TOOL_K1 = 1.5
#: BM25's share when a hybrid zone ranks its children (its best facet against its centroids' best
#: cosine): chosen by cross-validation on ToolRet's dev queries with multilingual-e5-small (root route
#: recall at K = 6, docs/building.md); tools keep the client's weight (:attr:`Embedder.fusion`)
CHILD_ALPHA = 0.6
#: the walk a built tree publishes in its root zone (``walk:``, served at ``_walk.<origin>``): what
#: resolvers do when told nothing. Chosen by cross-validation on ToolRet's dev queries (docs/building.md):
#: a hybrid tree at K = 6 with 6 tools a leaf matched flat hybrid search, all over UDP (10 tools of the
#: best leaf, over TCP, found no more); a BM25 tree at K = 7; a hybrid tree whose vectors carry a map
#: learned from example intents at K = 8 (each half of the dev queries, fitted on the other, chose 8
#: over 6 and 7 in English and in Chinese: the map moves the tools it saw, and the root's wider fan-out
#: keeps them in reach; 9 DNS queries, all over UDP). Every tree adds one follow-up page (the page
#: option: the leaf whose tools all made the result asked for its next ones), chosen by
#: cross-validation on the million-tool synthetic catalog's queries (each half chose 1 over 0, 2, 3
#: and 4) and checked on ToolRet: BM25 0.757 -> 0.763, hybrid 0.801 -> 0.804 (English) and 0.763 ->
#: 0.764 (Chinese) for 0.4 more queries; on a million tools 0.499 -> 0.523 for 0.95 more; with example
#: intents, each half fitted on the other, 0.839 -> 0.839 and 0.862 -> 0.871 (English), 0.811 ->
#: 0.816 and 0.815 -> 0.822 (Chinese) for 0.4 more (2026-12-06)
HYBRID_WALK = {"k": (6,), "leaf_k": 6, "pages": 1}
EXAMPLES_WALK = {"k": (8,), "leaf_k": 6, "pages": 1}
BM25_WALK = {"k": (7,), "leaf_k": 6, "pages": 1}


@dataclass
class BuildReport:
    tools_in_catalog: int = 0
    entries_read: int = 0
    placements: int = 0
    tools_placed_more_than_once: int = 0
    tools_unplaced_by_tree: int = 0
    zones: int = 0
    depth: int = 0
    leaf_sizes: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    out: str = ""
    llm_cost: dict = field(default_factory=dict)

    def write(self, outdir: Path) -> None:
        write_atomically(outdir / "build-report.json", json.dumps(self.__dict__, ensure_ascii=False, indent=2))

    def text(self) -> str:
        ls = self.leaf_sizes
        return (f"{self.tools_in_catalog} tools ({self.entries_read} catalog entries read) -> {self.zones} zones, "
                f"depth {self.depth}; {self.placements} placements, {self.tools_placed_more_than_once} tools in more "
                f"than one zone, {self.tools_unplaced_by_tree} put at the root by the tree builder; leaves: "
                f"{ls.get('count', 0)} of min {ls.get('min', 0)} / median {ls.get('median', 0)} / max "
                f"{ls.get('max', 0)} tools; {len(self.warnings)} warnings; {self.seconds:.1f} s -> {self.out}"
                + (f"; LLM: {self.llm_cost['calls']} calls ({self.llm_cost['cached_calls']} cached), "
                   f"{self.llm_cost['prompt_tokens']} prompt + {self.llm_cost['completion_tokens']} completion tokens"
                   if self.llm_cost else ""))


#: texts a build embeds at a time: after each chunk it says how far it is and, at the rate so far, how
#: long the rest will take (a million tools take hours with a transformer on two cores)
EMBED_CHUNK = 4096


#: seconds between two of the embedding's progress lines (a static model embeds a chunk in half a second)
EMBED_PROGRESS_EVERY = 2.0


def embed_in_chunks(embedder, texts: list[str], progress: Callable[[str], None],
                    chunk: int = EMBED_CHUNK, every: float = EMBED_PROGRESS_EVERY):
    """*embedder*'s vectors of *texts*, *chunk* at a time, as one float32 array (a row a text; as lists of
    Python floats a million vectors would take gigabytes); after the first chunk, then after a chunk at
    most every *every* seconds, but never the last, *progress* hears how many are done and about how
    long the rest will take."""
    import numpy as np

    parts = []
    done = 0
    t0 = time.monotonic()
    said = None
    for start in range(0, len(texts), chunk):
        part = np.asarray(embedder.embed(texts[start:start + chunk]), dtype=np.float32)
        parts.append(part.reshape(len(part), -1))
        done += len(part)
        now = time.monotonic()
        if done < len(texts) and (said is None or now - said >= every):
            said = now
            left = (len(texts) - done) * (now - t0) / done
            progress(f"embedded {done:,} of {len(texts):,} tools, about {duration_text(left)} left at this rate "
                     f"(--no-embed builds BM25 zones without vectors)")
    return np.concatenate(parts) if parts else np.zeros((0, getattr(embedder, "dim", 0)), dtype=np.float32)


def duration_text(seconds: float) -> str:
    """*seconds* as a person reads a wait: ``40 s``, ``12 min``, ``7 h 40 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


class Heartbeat:
    """Progress that never goes quiet: while one step runs longer than *every* seconds (clustering a
    million tools, writing a zone of a hundred thousand), a background thread says it again with the
    time it has taken. A context manager; call it as the progress callback.

        with Heartbeat(print) as progress:
            progress("clustering")          # ... "clustering (still at it, 8 s)" every 4 s
    """

    def __init__(self, progress: Callable[[str], None], every: float = 4.0) -> None:
        self.progress, self.every = progress, every
        self.message, self.since, self.last = "", time.monotonic(), time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="build-heartbeat", daemon=True)

    def __call__(self, message: str) -> None:
        self.message, self.since, self.last = message, time.monotonic(), time.monotonic()
        self.progress(message)

    def _beat(self) -> None:
        while not self._stop.wait(self.every / 4):
            now = time.monotonic()
            if self.message and now - self.last >= self.every:
                self.last = now
                self.progress(f"{self.message} (still at it, {now - self.since:.0f} s)")

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def zone_tool(tool: CatalogTool, label: str, service: str) -> Tool:
    url = tool.url.strip()  # as a zone file's reader strips an endpoint
    parsed = urlparse(url) if url else None
    if parsed and parsed.scheme in ("http", "https") and parsed.hostname:
        target, port = parsed.hostname.rstrip(".") + ".", parsed.port or (443 if parsed.scheme == "https" else 80)
    else:
        target, port = "localhost.", 0
    description = " ".join([*tool.names[1:], tool.description]).strip()
    # stripped as a zone file's reader strips them: the zone written is the zone read back (leaf maps are
    # made from the zone held here, :class:`~.maps.LeafMaps`)
    params = tuple(Parameter(n.strip(), t.strip() or "string", d.strip(), r) for n, t, d, r in tool.parameters)
    return Tool(label=label, name=tool.names[0], service=service, target=target, port=port, description=description,
                endpoint=url, parameters=params, id=tool.id, examples=tuple(tool.examples))


def single_address(subnet: str) -> bool:
    """Whether *subnet* is one whole address (``tooldns build --address``): every zone is served there."""
    return subnet.count(".") == 3 or ":" in subnet


def _addresses(subnet: str):
    """127.0.0.1, 127.0.0.2, ... skipping .0 and .255 in the last octet; past 127.0.255.254 (65,024
    zones: a catalog of about a million tools), on into 127.1.0.1 and the next second octets. A
    whole address instead of two octets: that address for every zone."""
    if single_address(subnet):
        while True:
            yield subnet
    a, b = (int(x) for x in subnet.split("."))
    for second in range(b, 256):
        for c in range(256):
            for d in range(1, 255):
                yield f"{a}.{second}.{c}.{d}"


def _tool_labels(catalog: Catalog, indices, taken: set[str], warnings: list[str]) -> dict[int, str]:
    """A DNS label per tool: from its name, else its id, else ``t<index>`` (each fallback warned once)."""
    out = {}
    for i in sorted(indices):
        t = catalog.tools[i]
        base = slug(t.names[0])
        if not re.search(r"[a-z]", base):  # nothing readable left (a Chinese name gives only digits)
            base = slug(t.id)
            warnings.append(f"tool {t.id}: its name {t.names[0]!r} gives no DNS-safe label; "
                            + (f"labelled from its id ({base})" if base else f"labelled t{i}"))
        out[i] = unique_label(base, taken, f"t{i}")
    return out


@dataclass
class _Layout:
    """Where each category goes: its zone origin, depth and name-server address (breadth first, so
    the root gets the first address)."""

    order: list[tuple[Category, str, int]]
    origin_of: dict[int, str]
    address_of: dict[int, str]

    @classmethod
    def of(cls, root: Category, origin: str, subnet: str) -> "_Layout":
        order: list[tuple[Category, str, int]] = []
        queue = [(root, origin, 0)]
        while queue:
            cat, zone_origin, depth = queue.pop(0)
            order.append((cat, zone_origin, depth))
            queue.extend((child, f"{child.label}.{zone_origin}", depth + 1) for child in cat.children)
        addresses = dict(zip((id(cat) for cat, _, _ in order), _addresses(subnet)))
        if len(addresses) < len(order):
            raise BuildError(f"{len(order)} zones need more addresses than {subnet}.0.1 onwards has")
        return cls(order, {id(cat): o for cat, o, _ in order}, addresses)

    def nameservers(self, cat: Category) -> tuple[NameServer, ...]:
        return (NameServer(f"ns1.{self.origin_of[id(cat)]}", self.address_of[id(cat)]),)

    def leaves_first(self) -> list[tuple[int, Category, str]]:
        """(place in :attr:`order`, category, origin) of every zone, the leaves first: a build writes them
        so, and their maps are made while it makes the parents' summaries (their
        children's centroids: minutes for a million tools' root)."""
        zones = [(n, cat, origin) for n, (cat, origin, _) in enumerate(self.order)]
        return sorted(zones, key=lambda zone: bool(zone[1].children))


def _title(cat: Category) -> str:
    return f"{cat.title}: {cat.description}".strip(": ")


#: every built zone's SOA serial; a parent's copy of a child's summary says it stands for it, so that
#: a built tree starts without fetching a summary (``docs/summaries.md``)
SERIAL = 1


def corpus_counts(token_lists) -> Counter:
    """The index terms of some tools (their token lists, each tool once), counted: a delegation's
    ``corpus_terms``, which stands for the text of the tools beneath it at a fraction of its size
    (``tooldns build`` and ``tooldns build --update`` alike)."""
    counts: Counter = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    return counts


def facet_terms(token_lists) -> tuple[tuple[tuple[str, int], ...], ...]:
    """A delegation's ``facets``: the index terms of the tools beneath it (their token lists, in
    catalog order) counted in groups (:func:`~tooldns.scoring.bm25.facets_of`; ``tooldns build`` and
    ``tooldns build --update`` alike)."""
    return tuple(tuple(counts.items()) for counts in facets_of(list(token_lists)))


def _delegation(child: Category, layout: _Layout, tool_tokens: list[list[str]], embedded: "Embedded | None",
                made: tuple[bytes, ...] | None = None) -> Delegation:
    """The delegation to *child*: its summary counts the terms of every tool beneath it (and, for a
    child of few tools, groups them into facets); its centroids *made* already, or made here."""
    members = sorted(child.all_tools())  # catalog order
    facets = facet_terms([tool_tokens[i] for i in members]) if len(members) <= MAX_FACET_TOOLS else ()
    if made is None:
        made = embedded.centroids(members) if embedded else ()
    return Delegation(child.label, layout.origin_of[id(child)], child.kind,
                      Summary(_title(child), tuple(child.keywords), serial=SERIAL,
                              corpus_terms=tuple(corpus_counts(tool_tokens[i] for i in members).items()),
                              facets=facets),
                      layout.nameservers(child), leaf=not child.children, vectors=made)


def _made_beside(maps: LeafMaps, outdir: Path, state: BuildState, layout: _Layout, embedded: "Embedded | None"):
    """The centroids of a leaf child of a zone being written, made by the processes that made the leaf's
    map (:meth:`LeafMaps.centroids`), by child; None (made here): a zone with children, or none made."""
    def made(child: Category) -> tuple[bytes, ...] | None:
        if embedded is None or child.children:
            return None
        return maps.centroids(outdir / state.zones[layout.origin_of[id(child)]].file)
    return made


def _zone(cat: Category, zone_origin: str, layout: _Layout, tools: tuple[Tool, ...], tool_tokens: list[list[str]],
          settings: Settings, stats: CorpusStats | None, embedded: "Embedded | None", centre: bytes = b"",
          made=lambda child: None) -> Zone:
    """The zone of one category: its tools, and a delegation to each child whose summary counts the
    terms of every tool beneath it (with the centroids *made* gives for a child, when not None)."""
    children = tuple(_delegation(child, layout, tool_tokens, embedded, made(child)) for child in cat.children)
    return Zone(origin=zone_origin, soa=SOA(f"ns1.{zone_origin}", f"hostmaster.{zone_origin}", serial=SERIAL),
                nameservers=layout.nameservers(cat), summary=Summary(_title(cat) or zone_origin),
                children=children, tools=tools, settings=settings, corpus_stats=stats, vector_centre=centre)


def _settings(cat: Category, settings: Settings, child_k1: float, child_b: float) -> Settings:
    """The zone's settings: the build's, with the k1 the tree builder chose for ranking this
    category's children (larger for big children, :func:`~.trees.scaled_k1`)."""
    if cat.child_k1 is None or not cat.children or cat.child_k1 == child_k1:
        return settings
    return dataclasses.replace(settings, child_scorer_options={**settings.child_scorer_options,
                                                               "k1": round(cat.child_k1, 3), "b": child_b})


def build_zones(catalog: Catalog, root: Category, out: str | os.PathLike, *, origin: str = "tools.",
                subnet: str = "127.0", service: str = "http", child_k1: float = DEFAULT_CHILD_K1,
                child_b: float = DEFAULT_CHILD_B,
                tool_k1: float = DEFAULT_TOOL_K1, prune_ratio: float = DEFAULT_PRUNE_RATIO,
                scorer: str | None = None, scorer_options: dict | None = None, embedded: "Embedded | None" = None,
                max_leaf: int | None = None, max_children: int | None = None, progress=lambda s: None,
                terms: list[tuple[str, ...]] | None = None) -> BuildReport:
    """Write one zone file per category of *root* into *out* (through :func:`write_zone`); return the report.

    With *embedded* (the catalog's vectors), every tool carries its vector and every delegation a few centroids
    of the tools beneath it, and the zones score with ``hybrid`` unless *scorer* says otherwise; *terms*: each
    tool's :func:`~.catalog.catalog_terms` if read; also ``build-state/`` for ``build --update`` (:func:`_new_state`)."""
    t0 = time.perf_counter()
    origin = names.normalize(origin)
    if service not in names.SERVICES or service == names.ANY_SERVICE:
        raise BuildError(f"unknown service {service!r}")
    outdir = _cleared(Path(out))

    proto_tools, tool_tokens, stats = _catalog_text(catalog, service, progress, terms)
    scorer = scorer or ("hybrid" if embedded else "bm25")
    settings = _tree_settings(scorer, {"k1": tool_k1, **(scorer_options or {})}, child_k1, child_b, prune_ratio,
                              embedded, outdir)
    centre = embedded.centre() if embedded and scorer == "hybrid" else b""
    layout = _Layout.of(root, origin, subnet)
    header = f"Built by tooldns build from {', '.join(catalog.sources)}"
    report = BuildReport(tools_in_catalog=len(catalog.tools), entries_read=catalog.entries_read,
                         warnings=list(catalog.warnings), out=str(outdir))
    mapping: dict[str, list] = {t.id: [] for t in catalog.tools}
    label_warnings: list[str] = []
    state = _new_state(outdir, catalog, layout, tool_tokens, stats, settings, subnet, service, max_leaf, max_children)
    # the leaves get their maps as they are written, in processes beside this one
    with LeafMaps(outdir / SNAPSHOT_DIR, scorer in KEPT_SCORERS, progress=progress) as maps:
        shown, made = time.monotonic(), _made_beside(maps, outdir, state, layout, embedded)
        for n, (rank, cat, zone_origin) in enumerate(layout.leaves_first(), 1):
            indices = sorted(set(cat.tools))
            labels = _tool_labels(catalog, indices, set(), label_warnings)
            tools = tuple(dataclasses.replace(proto_tools[i], label=labels[i],
                                              **(embedded.tool_fields(i) if embedded else {})) for i in indices)
            for tool in tools:
                mapping[tool.id].append((rank, tool.owner(zone_origin)))
            zone = _zone(cat, zone_origin, layout, tools, tool_tokens, _settings(cat, settings, child_k1, child_b),
                         _zone_stats(stats, indices, tool_tokens) if tools else None, embedded, centre, made)
            if cat is root:  # what resolvers do when told nothing
                zone = dataclasses.replace(zone, walk=published_walk(scorer, embedded))
            write_zone(zone, outdir / state.zones[zone_origin].file, header)  # root.yaml, else <origin>yaml
            if zone.children:
                state.write_terms(outdir, zone_origin, _child_terms(zone))
            else:  # its map, and the centroids of its vectors its parent's delegation carries
                maps.add(outdir / state.zones[zone_origin].file, Embedded.CENTROIDS if embedded else 0, zone)
            if time.monotonic() - shown >= 2.0 or n == len(layout.order):
                shown = time.monotonic()
                progress(f"wrote {n}/{len(layout.order)} zones")
    report.warnings.extend([*dict.fromkeys(label_warnings), *maps.warnings()])  # a tool placed twice: warned once
    mapping = {tool_id: [owner for _, owner in sorted(owners)] for tool_id, owners in mapping.items()}  # tree order
    _account(report, mapping, layout)
    write_atomically(outdir / "catalog-map.json", json.dumps(mapping, ensure_ascii=False, indent=0))
    state.write(outdir)
    report.seconds = time.perf_counter() - t0
    report.write(outdir)
    return report


def _catalog_text(catalog: Catalog, service: str, progress,
                  terms: list[tuple[str, ...]] | None) -> tuple[list[Tool], list[tuple[str, ...]], CorpusStats]:
    """The catalog's tools as zone tools, their index terms (*terms*, else :func:`~.catalog.catalog_terms`:
    those of the zone tool's text, each kept once in memory) and the global statistics over exactly the
    text zone servers index."""
    progress(f"global statistics of {len(catalog.tools)} tools' text")
    proto_tools = [zone_tool(t, "x", service) for t in catalog.tools]
    terms = terms if terms is not None else catalog_terms(catalog.tools, progress)
    return proto_tools, terms, CorpusStats.from_tokens(terms)


def _cleared(outdir: Path) -> Path:
    """*outdir*, made if need be, without the last build's zone files and vector map, with a directory
    for the indexes and leaf maps a lazy server keeps (:mod:`tooldns.serving.loader`; the last
    build's are stale)."""
    outdir.mkdir(parents=True, exist_ok=True)
    kept = outdir / SNAPSHOT_DIR
    for old in [*outdir.glob("*.yaml"), *outdir.glob(f"{MAP_PREFIX}*.npz"), *kept.glob("*.pickle"), *kept.glob("*.map")]:
        old.unlink()
    (outdir / SNAPSHOT_DIR).mkdir(mode=0o700, exist_ok=True)
    return outdir


def _tree_settings(scorer: str, options: dict, child_k1: float, child_b: float, prune_ratio: float,
                   embedded: "Embedded | None", outdir: Path) -> Settings:
    """The settings of every zone of a built tree (before :func:`_settings` adapts a zone's child k1)."""
    child_options = {"k1": child_k1, "b": child_b, **({"alpha": CHILD_ALPHA} if scorer == "hybrid" else {})}
    if embedded and scorer == "hybrid" and embedded.fusion != DEFAULT_WEIGHT:
        options = {"alpha": embedded.fusion, **options}  # tools ranked as the client fuses them (published_walk)
    return Settings(scorer=scorer, scorer_options=options, child_scorer_options=child_options, prune_ratio=prune_ratio,
                    **(_vector_settings(embedded, outdir) if embedded and scorer == "hybrid" else {}))


def _vector_settings(embedded: "Embedded", outdir: Path) -> dict:
    """What zones of *embedded*'s vectors say of them: the spec with which they embed intents that come
    without a vector (so that dig and clients without the model get hybrid answers too), and the vector
    map the vectors went through, saved beside the zone files."""
    out = {"embed_intents": embedded.spec} if embedded.spec else {}
    if embedded.vector_map is not None:
        save_map(outdir, embedded.vector_map)
        out["vector_map"] = embedded.vector_map.digest
    return out


def published_walk(scorer: str, embedded: "Embedded | None") -> WalkPlan | None:
    """The walk a built tree's root publishes: :data:`HYBRID_WALK` (with the vectors' model, which
    resolvers embed intents with when they can), :data:`EXAMPLES_WALK` when the vectors carry a map
    learned from example intents, or :data:`BM25_WALK`; none for LLM-scored zones. A hybrid walk names
    BM25's share in the client's fusion that suits the model (:attr:`Embedder.fusion`)."""
    if scorer == "hybrid" and embedded is not None:
        walk = EXAMPLES_WALK if embedded.vector_map is not None else HYBRID_WALK
        return WalkPlan(**walk, model=embedded.model, fusion=embedded.fusion)
    return WalkPlan(**BM25_WALK) if scorer in ("bm25", "hybrid") else None


def _zone_stats(stats: CorpusStats, indices: list[int], tool_tokens: list[list[str]]) -> CorpusStats:
    """A zone's ``corpus_stats``: the catalog's, with the df of the terms its tools *indices* use."""
    restricted = stats.restricted({term for i in indices for term in tool_tokens[i]})
    return CorpusStats(restricted.n_docs, round(restricted.avgdl, 6), dict(sorted(restricted.df.items())))


def _new_state(outdir: Path, catalog: Catalog, layout: _Layout, tool_tokens: list[list[str]], stats: CorpusStats,
               settings: Settings, subnet: str, service: str, max_leaf: int | None,
               max_children: int | None) -> BuildState:
    """``build-state/`` (:mod:`.state`): what ``tooldns build --update`` needs to change this tree in
    place, the last one's removed; each parent's terms are written with its zone
    (:func:`_child_terms`), ``state.json`` last. *max_leaf* and *max_children* (the offline tree's;
    None for other trees) let an update split a leaf that grows past twice *max_leaf*."""
    child_k1, child_b = settings.child_scorer_options["k1"], settings.child_scorer_options["b"]
    shutil.rmtree(BuildState.directory(outdir), ignore_errors=True)
    (outdir / "update-report.json").unlink(missing_ok=True)  # the last update's, of the tree replaced
    root_origin = layout.order[0][1]
    parent_of = {id(child): origin for cat, origin, _ in layout.order for child in cat.children}
    zones = {origin: ZoneEntry(("root" if origin == root_origin else origin.rstrip(".")) + ".yaml",
                               parent_of.get(id(cat)), layout.address_of[id(cat)])
             for cat, origin, _ in layout.order}
    state = BuildState(root_origin, service, subnet,
                       {"child_k1": child_k1, "child_b": child_b, "tool_k1": settings.scorer_options.get("k1"),
                        "prune_ratio": settings.prune_ratio, "max_leaf": max_leaf, "max_children": max_children},
                       zones, {t.id: tool_digest(t) for t in catalog.tools}, stats, Totals.of(tool_tokens))
    return state


def _child_terms(zone: Zone) -> ChildTerms:
    """A parent's children as its scorer sees them: each delegation's summary counted (its corpus
    terms, counted once already, and its description and keywords), its own tools as ``SELF`` (as the
    server makes that document, :func:`~tooldns.serving.index.own_tools_terms`)."""
    children = {d.label: Counter(d.summary.counts()) for d in zone.children}
    facets = {d.label: own_facets(d.summary) for d in zone.children}
    if zone.tools:
        children[SELF], facets[SELF] = own_tools_terms(zone.tools)
    return ChildTerms.of(zone.settings, children, facets)  # as the zone's scorer ranks them


def own_facets(summary: Summary) -> list[Counter]:
    """A delegation's facets as its parent's scorer ranks them (a learned summary's: those the child published)."""
    return list(map(Counter, summary.scored_facets()))


def _account(report: BuildReport, mapping: dict[str, list[str]], layout: _Layout) -> None:
    """Placements, depth and leaf sizes into *report*; every tool must have been placed."""
    placed_counts = [len(v) for v in mapping.values()]
    unplaced = [tid for tid, v in mapping.items() if not v]
    if unplaced:  # every builder must place every tool; a bug otherwise, never a silent drop
        raise BuildError(f"{len(unplaced)} tools were not placed in any zone, e.g. {unplaced[:5]}")
    leaf_sizes = [len(set(cat.tools)) for cat, _, _ in layout.order if not cat.children]
    report.placements = sum(placed_counts)
    report.tools_placed_more_than_once = sum(1 for c in placed_counts if c > 1)
    report.zones = len(layout.order)
    report.depth = max(d for _, _, d in layout.order) + 1
    report.leaf_sizes = {"count": len(leaf_sizes), "min": min(leaf_sizes, default=0),
                         "median": statistics.median(leaf_sizes) if leaf_sizes else 0,
                         "max": max(leaf_sizes, default=0)}


class Embedded:
    """A catalog's vectors (one unit-length row per tool) under one model: what zones carry of them."""

    #: vectors a delegation carries for the tools beneath it, however many they are
    CENTROIDS = DELEGATION_CENTROIDS

    def __init__(self, model: str, vectors, digests: list[str], covered: list[bool] | None = None, *,
                 spec: str = "", vector_map=None, clusters_tree: bool = True,
                 fusion: float = DEFAULT_WEIGHT) -> None:
        import numpy as np

        self.model, self.digests = model, digests
        #: whether the tree is clustered on these vectors (:attr:`Embedder.clusters_tree`); else on words
        self.clusters_tree = clusters_tree
        #: BM25's share in the client's fusion that suits the model (:attr:`Embedder.fusion`): the tree's
        #: zones rank tools with it and its walk names it
        self.fusion = fusion
        #: the embedder spec the vectors were made with (zones embed intents that come without one with it)
        self.spec = spec
        #: the map of the embedding space learned from example intents and baked into the vectors, or None
        self.vector_map = vector_map
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self._encoded: list[bytes] | None = None  # each vector as zone files carry it (made when centroids need them)
        self._carried = None  # and those read back
        #: tools the model covers (its language): the others get no vector, and BM25 alone ranks them
        self.covered = covered if covered is not None else [True] * len(digests)

    @classmethod
    def of(cls, catalog: Catalog, embedder, service: str = "http", progress=lambda s: None,
           spec: str = "") -> "Embedded":
        """Every tool of *catalog* embedded; when tools carry example intents, through the vector map
        fitted on them (:func:`.examples.fit_map`)."""
        tools = [zone_tool(t, "x", service) for t in catalog.tools]
        texts = [t.embedding_text() for t in tools]
        covered = [embedder.covers(text) for text in texts]
        progress(f"embedding {sum(covered)} of {len(tools)} tools with {embedder.model} "
                 f"({len(tools) - sum(covered)} in a language it does not cover)")
        try:
            vectors = embed_in_chunks(embedder, texts, progress)
        except EmbeddingError as exc:
            raise BuildError(f"cannot embed the catalog: {exc}") from exc
        vmap = fit_map(embedder, vectors, covered, [t.examples for t in tools], progress)
        if vmap is not None:
            vectors = vmap.apply(vectors)
        return cls(embedder.model, vectors, [t.text_digest() for t in tools], covered, spec=spec, vector_map=vmap,
                   clusters_tree=getattr(embedder, "clusters_tree", True),
                   fusion=getattr(embedder, "fusion", DEFAULT_WEIGHT))

    @property
    def clusters(self):
        """The vectors to cluster the tree on: each less the mean of the covered ones, at unit length (the
        zones' cosines are taken from that centre, :meth:`centre`: a model whose every pair of texts has a
        cosine near 0.8 would otherwise place every tool in two groups, its second as near as its first);
        None when the model covers too few tools to route by, or its vectors route worse than words
        (:attr:`clusters_tree`)."""
        import numpy as np

        if not self.clusters_tree or sum(self.covered) < len(self.covered) / 2:
            return None
        x = self.vectors - self.vectors[np.asarray(self.covered, dtype=bool)].mean(axis=0)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    def tool_fields(self, i: int) -> dict:
        if not self.covered[i]:
            return {}
        return {"vector": self.carried()[0][i], "vector_of": self.digests[i]}  # encoded once, for centroids too

    def carried(self):
        """Every tool's vector as its zone file carries it, quantised (:func:`encode_vector`), and read
        back: (the encoded bytes, the rows)."""
        if self._carried is None:  # a matrix at a time: a million vectors one by one took a minute and 4 GB
            self._encoded, rows = carried_rows(self.model, self.vectors)
            self._carried = rows.reshape(self.vectors.shape)
        return self._encoded, self._carried

    def centre(self) -> bytes:
        """The mean of every covered tool's vector as zone files carry it (as :func:`centre_of` takes it)."""
        import numpy as np

        _, rows = self.carried()
        if not any(self.covered):
            return b""
        return encode_vector(self.model, mean_row(rows, np.asarray(self.covered, dtype=bool)).tolist())

    def centroids(self, indices: list[int], n: int = CENTROIDS) -> tuple[bytes, ...]:
        """At most *n* unit vectors standing for the tools *indices* (k-means centres)."""
        indices = [i for i in indices if self.covered[i]]
        # of the distinct vectors the zone files carry, in the order of their bytes, as `tooldns embed`
        # makes them again from the files (quantized.centroids_of): the same centroids, byte for byte, so
        # that an embed after a build rewrites nothing
        encoded, rows = self.carried()
        return row_centroids(self.model, rows[[i for _, i in sorted({encoded[i]: i for i in indices}.items())]], n)


def default_embed() -> str | None:
    """The embedder spec ``tooldns build`` embeds with when told neither ``--embed`` nor ``--no-embed``:
    the default embedder when its package is installed here (the ``server`` extra installs it), else
    None (BM25 zones)."""
    return DEFAULT_SPEC if installed(DEFAULT_SPEC) else None


def centre_of(vectors: list[bytes]) -> bytes:
    """The zones' ``vector_centre``: the mean of tool vectors (each as zone files carry it), in the vector
    option's encoding; b"" without any. ``tooldns build`` and ``tooldns embed`` alike."""
    if not vectors:
        return b""
    return encode_vector(decode_vector(vectors[0]).model, mean_row(read_back(vectors)).tolist())


def build(services: list[str], out: str, *, taxonomy: str | None = None, builder: TreeBuilder | None = None,
          embed: str | None = None, examples: list[str] | None = None, tree_options: dict | None = None,
          progress=lambda s: None, **options) -> BuildReport:
    """Catalog files -> zone directory, with the given tree, the A2X tree in *taxonomy*, or the offline
    one (built with *tree_options*); with *embed* (an embedder spec, ``e5``, or an
    :class:`~tooldns.embedding.Embedder`), vectors for hybrid zones;
    with *examples* (files of example intents, :mod:`.examples`), the vector map learned from them."""
    with Heartbeat(progress) as beat:
        return _build(services, out, taxonomy, builder, embed, examples, tree_options, beat, options)


def _build(services, out, taxonomy, builder, embed, examples, tree_options, progress, options) -> BuildReport:
    """:func:`build` with its progress kept alive by a :class:`Heartbeat`."""
    t0 = time.perf_counter()
    progress(f"reading {', '.join(map(str, [*services, *(examples or [])]))}")
    catalog = load_catalogs(services)
    for path in examples or []:
        catalog.warnings.extend(add_examples(catalog, read_examples(path)))
    with_examples = sum(1 for t in catalog.tools if t.examples)
    progress(f"catalog: {len(catalog.tools)} tools from {', '.join(catalog.sources)}"
             + (f", {with_examples} with example intents" if with_examples else "") + f"; {len(catalog.warnings)} warnings")
    embedded = None
    if embed:
        try:
            embedder = make_embedder(embed) if isinstance(embed, str) else embed
        except EmbeddingError as exc:
            raise BuildError(str(exc)) from exc
        spec = embed if isinstance(embed, str) else (spec_for_model(embedder.model) or "")
        embedded = Embedded.of(catalog, embedder, options.get("service", "http"), progress, spec=spec)
    terms = catalog_terms(catalog.tools, progress)  # read once: for the tree and for the zones
    if builder is None:
        builder = (A2XTreeBuilder(taxonomy) if taxonomy else
                   AutoTreeBuilder(**(tree_options or {}), vectors=embedded.clusters if embedded else None, terms=terms))
    root = builder.build(catalog, progress)
    offline = isinstance(builder, AutoTreeBuilder)
    report = build_zones(catalog, root, out, progress=progress, embedded=embedded, terms=terms,
                         max_leaf=builder.max_leaf if offline else None,
                         max_children=builder.max_children if offline else None, **options)
    report.tools_unplaced_by_tree = getattr(builder, "unplaced", 0)
    cost = getattr(builder, "cost", None)
    report.llm_cost = dict(cost.__dict__) if cost is not None else {}
    report.seconds = time.perf_counter() - t0
    report.write(Path(out))
    return report


def chosen_embed(embed: str | None = None, no_embed: bool = False, scorer: str | None = None) -> str | None:
    """The embedder spec a build embeds with: *embed* when given; none with *no_embed* or a *scorer* other
    than hybrid; else :func:`default_embed` (``tooldns build``'s ``--embed``, ``--no-embed`` and ``--scorer``)."""
    if embed:
        return embed
    if no_embed or scorer not in (None, "hybrid"):
        return None
    return default_embed()
