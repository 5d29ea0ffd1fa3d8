"""``tooldns build --update``: add, change and remove tools of a built tree in place.

    tooldns build --update services.json --out built/      # the catalog as it is now

The catalog is compared with what the tree was built from (``build-state/``, :mod:`.state`: a
digest of every tool, where each is placed in ``catalog-map.json``), and only the zones on the
changed tools' paths are rewritten:

* a changed tool (same id, other name, description, parameters or URL) is rewritten in every zone
  that holds it, under the same DNS name (its label stays; its vector too, while the text it was
  made from is unchanged);
* a new tool goes to one leaf, found by routing its text from the root as the zone servers route a
  query: at each zone the child whose summary ranks first by the zone's own BM25 settings, by
  the children's facets when every child has them, as the zone's server ranks them
  (:class:`.state.ChildTerms`, which keeps them as written);
* a removed tool leaves every zone that holds it;
* every zone on those paths gets a new SOA serial (``max(serial + 1, unix time)``: ahead of the
  serials a running server raised by itself), and each parent's copy of a changed child's summary
  gets the child's new terms (``summary.corpus_terms``: those of every tool beneath it, counted) and its new
  serial (``summary.serial``), so a running ``tooldns serve`` reloads the files and keeps using the
  parents' copies (``docs/summaries.md``). Files are written bottom-up, each through a temporary
  file renamed into place: a server sees every zone old or new, never half-written, and never a
  parent naming a child serial that is not written yet.

Global BM25 statistics (``corpus_stats``, in every zone with tools) are left as written while they
stay close to the catalog's: ``build-state`` keeps both, and when their drift
(:func:`.state.drift`) passes :data:`DRIFT_THRESHOLD` (or with ``refresh_stats``), every zone is
rewritten with fresh ones. A leaf pushed past twice the tree's ``max_leaf`` is split into new
leaves with ``split_leaves`` (new zones, on new addresses: a running ``tooldns serve --lazy``
serves them within a round of its file watcher, any other after a restart), and reported otherwise.

Every zone is changed through the one schema (:mod:`tooldns.zone.zonefile`): loaded, changed as
a :class:`~tooldns.zone.model.Zone` and written back by :func:`~tooldns.zone.zonefile.write_zone`,
its header comment lines (the ``#`` lines at the top) kept and no other comment (``docs/zonefiles.md``).
Loading and writing the root of a 100,000-tool tree (703 delegations, 1.5 MB) costs about half a
second an update more than splicing its text did (``docs/building.md``).

    >>> report = update(["services.json"], "built/")
    >>> print(report.text())
    updated built/: 1 added, 0 changed, 0 removed; 3 of 93 zones rewritten ...
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from pathlib import Path

from ..exceptions import BuildError, ZoneFileError
from ..scoring.bm25 import CorpusStats
from ..scoring.tokenize import tokenize
from ..serving.index import own_tools_terms
from ..serving.loader import SNAPSHOT_DIR
from ..zone.model import SOA, Delegation, NameServer, Summary, Tool, Zone
from ..zone.zonefile import header_of, load_zone, write_atomically, write_zone
from .build import (_addresses, _tool_labels, corpus_counts, facet_terms, own_facets, single_address,
                    zone_tool)
from .catalog import Catalog, load_catalogs, json_loads
from .maps import LeafMaps
from .state import SELF, BuildState, ChildTerms, ZoneEntry, drift, tool_digest
from .trees import LEAF_SLACK, AutoTreeBuilder

#: the statistics drift (:func:`.state.drift`: the larger of the idf error and the relative
#: mean-length error) past which an update rewrites every zone with fresh statistics. Measured on
#: ToolRet (``scripts/bench/bench_update.py drift``, docs/building.md): stale statistics move hit rate@10
#: by at most 0.2 point even at 5 % drift, but a few queries' top ten change from the first tool
#: (near ties swap); up to 0.5 % drift, the top-ten set of about 4 % of queries (at most 7 %)
DRIFT_THRESHOLD = 0.005


@dataclass
class UpdateReport:
    """What an update did (``update-report.json``, and :meth:`text` for people)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: origins of the zones rewritten, and of the zones new (split leaves' children)
    zones: list[str] = field(default_factory=list)
    new_zones: list[str] = field(default_factory=list)
    zones_in_tree: int = 0
    drift: dict = field(default_factory=dict)
    threshold: float = DRIFT_THRESHOLD
    refreshed: bool = False
    #: leaves split (with split_leaves), and leaves past their bound left as they are
    split: list[str] = field(default_factory=list)
    oversize: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    out: str = ""

    def write(self, outdir: Path) -> None:
        write_atomically(Path(outdir) / "update-report.json",
                         json.dumps(self.__dict__, ensure_ascii=False, indent=2))

    def text(self) -> str:
        shown = ", ".join(self.zones[:8]) + (f" ... ({len(self.zones) - 8} more)" if len(self.zones) > 8 else "")
        lines = [f"updated {self.out}: {len(self.added)} added, {len(self.changed)} changed, {len(self.removed)} "
                 f"removed; {len(self.zones)} of {self.zones_in_tree} zones rewritten"
                 + (f" ({shown})" if self.zones else "") + f"; {self.seconds:.2f} s"]
        d = self.drift.get("drift", 0.0)
        if self.refreshed:
            lines.append(f"statistics refreshed: all {self.zones_in_tree} zones rewritten (drift {d:.2%}, "
                         f"threshold {self.threshold:.2%})")
        else:
            lines.append(f"statistics kept as written: drift {d:.2%} (idf {self.drift.get('idf', 0):.2%}, mean "
                         f"length {self.drift.get('avgdl', 0):.2%}), refreshed past {self.threshold:.2%}")
        if self.split:
            lines.append(f"split {len(self.split)} leaves into {len(self.new_zones)} new zones "
                         f"({', '.join(self.split)}): tooldns serve --lazy serves them as it is, any other serve after a "
                         "restart")
        for origin, size in self.oversize.items():
            lines.append(f"leaf {origin} holds {size} tools, past twice max-leaf: update with --split-leaves to "
                         "split it (new zones: served by tooldns serve --lazy at once, otherwise after a restart), or rebuild")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def update(services: list[str], out: str, *, refresh_stats: bool = False, split_leaves: bool = False,
           threshold: float = DRIFT_THRESHOLD, progress=lambda s: None) -> UpdateReport:
    """Catalog files -> the built tree in *out*, changed in place (see the module docstring)."""
    return update_tree(load_catalogs(services), out, refresh_stats=refresh_stats, split_leaves=split_leaves,
                       threshold=threshold, progress=progress)


def update_tree(catalog: Catalog, out: str, *, refresh_stats: bool = False, split_leaves: bool = False,
                threshold: float = DRIFT_THRESHOLD, progress=lambda s: None) -> UpdateReport:
    """:func:`update` with the catalog loaded."""
    t0 = time.perf_counter()
    if not catalog.tools:
        raise BuildError("the catalog has no tools; an update never empties a tree")
    job = _Update(catalog, Path(out), threshold, progress)
    report = job.run(refresh_stats, split_leaves)
    # the maps of the leaves rewritten or added (a lazy server answers them from the first query again)
    leaves = [job.path(o) for o in [*report.zones, *report.new_zones] if o in job.state.zones and not job.children.get(o)]
    with LeafMaps(Path(out) / SNAPSHOT_DIR, bool(leaves), progress=progress) as maps:
        for path in leaves:
            maps.add(path)
    report.seconds = time.perf_counter() - t0
    if report.zones or report.added or report.changed or report.removed:
        report.write(Path(out))
    return report


def next_serial(serial: int) -> int:
    """The serial of a zone the update rewrites: one more, or the unix time if that is larger, so that
    it is ahead of what a running server serves (it raises a zone's serial by one at each change
    it serves by itself, ``docs/summaries.md``)."""
    return max(serial + 1, int(time.time())) % 2**32


def _owner_parts(owner: str) -> tuple[str, str]:
    """(zone origin, label) of a tool's DNS name ``<label>._<service>._<transport>.<origin>``."""
    label, _, _, origin = owner.split(".", 3)
    return origin, label


def dump_mapping(mapping: dict[str, list[str]]) -> str:
    """``catalog-map.json`` as the build writes it (``json.dumps(mapping, ensure_ascii=False, indent=0)``),
    with the C string encoder: ``indent`` makes ``json`` use its pure-Python encoder, a second for the
    120,000 placements of a 100,000-tool tree."""
    quote = encode_basestring  # what json.dumps(..., ensure_ascii=False) does to a string
    items = [f"{quote(tid)}: " + ("[\n" + ",\n".join(map(quote, owners)) + "\n]" if owners else "[]")
             for tid, owners in mapping.items()]
    return "{\n" + ",\n".join(items) + "\n}" if items else "{}"


def _renewed(child: Delegation, copy: tuple | None) -> Delegation:
    """A parent's delegation to *child* with what *copy* renews (``(counts, facets, serial, leaf)``, each
    None: kept); a pinned summary is the operator's, never rewritten (the leaf mark still follows the tree)."""
    if copy is None:
        return child
    counts, facets, serial, leaf = copy
    summary = child.summary
    if not summary.pinned:
        summary = dataclasses.replace(summary, serial=serial,
                                      **({"corpus": "", "corpus_terms": tuple(counts.items())} if counts is not None
                                         else {}),
                                      **({"facets": facets} if facets is not None else {}))
    return dataclasses.replace(child, summary=summary, **({"leaf": leaf} if leaf is not None else {}))


@dataclass
class _Edits:
    """What changes in one zone's own tools."""

    remove: set[str] = field(default_factory=set)
    replace: dict[str, int] = field(default_factory=dict)  # id -> catalog index
    add: list[int] = field(default_factory=list)  # catalog indices


class _Update:
    """One update of one directory: the catalog, the state, and what is loaded on the way."""

    def __init__(self, catalog: Catalog, outdir: Path, threshold: float, progress) -> None:
        self.catalog, self.outdir, self.threshold, self.progress = catalog, outdir, threshold, progress
        self.state = BuildState.read(outdir)
        self.index = {t.id: i for i, t in enumerate(catalog.tools)}
        self.children = self.state.children_of()
        self._terms: dict[str, ChildTerms] = {}
        self._proto: dict[int, Tool] = {}
        self._tokens: dict[int, list[str]] = {}
        #: zone origin -> (the zone, its file's header comment lines) for the zones read, until written
        self.loaded: dict[str, tuple[Zone, str]] = {}
        self.report = UpdateReport(out=str(outdir), threshold=threshold, zones_in_tree=len(self.state.zones))

    # -- catalog tools as zone tools --

    def proto(self, i: int) -> Tool:
        if i not in self._proto:
            self._proto[i] = zone_tool(self.catalog.tools[i], "x", self.state.service)
        return self._proto[i]

    def tokens(self, i: int) -> list[str]:
        if i not in self._tokens:
            self._tokens[i] = tokenize(self.proto(i).text())
        return self._tokens[i]

    def terms(self, origin: str) -> ChildTerms:
        if origin not in self._terms:
            self._terms[origin] = self.state.read_terms(self.outdir, origin)
        return self._terms[origin]

    def path(self, origin: str) -> Path:
        return self.outdir / self.state.zones[origin].file

    def load(self, origin: str) -> Zone:
        """The zone *origin*, read through the schema (once, until it is written)."""
        if origin not in self.loaded:
            path = self.path(origin)
            try:
                self.loaded[origin] = (load_zone(path), header_of(path))
            except ZoneFileError as exc:
                raise BuildError(f"cannot update a tree with a broken zone file:\n{exc}") from None
            except OSError as exc:  # the file gone since it was read
                raise BuildError(f"{path}: cannot read: {exc.strerror}") from None
        return self.loaded[origin][0]

    # -- routing a new tool --

    def route(self, tokens: list[str]) -> str:
        """The zone a new tool goes to: from the root, the child whose summary ranks first for the
        tool's own text, as a query would be routed (a tool that shares no term with any child goes
        to the one with the shortest summary)."""
        origin = self.state.origin
        while self.children[origin]:
            terms = self.terms(origin)
            ranked = terms.rank(tokens)
            label, score = ranked[0]
            if score <= 0:
                label = min(terms.children, key=lambda lab: sum(terms.children[lab].values()))
            if label == SELF:
                return origin
            child = f"{label}.{origin}"
            if child not in self.state.zones:
                raise BuildError(f"{self.state.terms_path(self.outdir, origin)}: names a child {label} that the "
                                 "tree does not have; build the tree again once")
            origin = child
        return origin

    # -- the update --

    def run(self, refresh_stats: bool, split_leaves: bool) -> UpdateReport:
        state, report = self.state, self.report
        digests = {t.id: tool_digest(t) for t in self.catalog.tools}
        report.added = [tid for tid in digests if tid not in state.digests]
        report.removed = [tid for tid in state.digests if tid not in digests]
        report.changed = [tid for tid, d in digests.items() if tid in state.digests and state.digests[tid] != d]
        quiet = not (report.added or report.removed or report.changed or refresh_stats)
        report.drift = drift(state.written, state.current)
        if quiet and not split_leaves:
            return report
        mapping = self._read_mapping()
        if quiet and not self._oversize(mapping):
            return report
        edits = self._plan(mapping)
        # The zones' own tools; the old text of every removed or changed tool, from a zone that holds it.
        old_tokens: dict[str, list[str]] = {}
        new_tools = {origin: self._edit_tools(self.load(origin), e, old_tokens) for origin, e in edits.items()}
        for tid in report.removed + report.changed:
            if tid not in old_tokens:
                report.warnings.append(f"tool {tid}: not found in the zones catalog-map.json names; the statistics "
                                       "may count it wrongly until they are refreshed")
        self._statistics(old_tokens, refresh_stats)
        # Terms of the children's summaries along every changed path; which delegations change text.
        changed_pairs = self._update_terms(old_tokens, mapping) | self._update_mapping(mapping, new_tools)
        for origin in new_tools:  # a zone with children and tools: its own tools are one more candidate
            if self.children[origin]:
                terms = self.terms(origin)
                terms.children[SELF], terms.facets[SELF] = own_tools_terms(new_tools[origin])
                changed_pairs.add((origin, SELF))
        # Leaves past their bound: split (their new leaves written now), or reported when edited.
        bound = LEAF_SLACK * (state.settings.get("max_leaf") or float("inf"))
        oversize = (self._oversize(mapping) if split_leaves else
                    {o: len(t) for o, t in new_tools.items() if len(t) > bound and not self.children[o]})
        splits: dict[str, list[Delegation]] = {}
        for origin in oversize if split_leaves else []:
            delegations, kept = self._split(origin, new_tools.get(origin, self.load(origin).tools), mapping)
            if delegations:
                splits[origin], new_tools[origin] = delegations, kept
        report.oversize = {o: n for o, n in oversize.items() if o in edits and o not in splits}
        # Every zone on a changed path (all of them with fresh statistics), bottom-up.
        affected = {z for o in [*edits, *splits] for z in state.path(o)}
        if report.refreshed:
            affected = set(state.zones) - set(report.new_zones)
        report.zones = sorted(affected, key=lambda o: (-state.depth(o), o))
        self._write_all(report.zones, new_tools, changed_pairs, splits, mapping)
        for origin in {p[0] for p in changed_pairs} | set(splits):
            state.write_terms(self.outdir, origin, self.terms(origin))
        if report.added or report.removed or splits:
            write_atomically(self.outdir / "catalog-map.json", dump_mapping(mapping))
        state.digests = digests
        state.updates += 1
        state.write(self.outdir)
        report.zones_in_tree = len(state.zones)
        return report

    def _read_mapping(self) -> dict[str, list[str]]:
        path = self.outdir / "catalog-map.json"
        try:
            return json_loads(path.read_bytes())
        except (OSError, json.JSONDecodeError) as exc:
            raise BuildError(f"{path}: cannot read: {exc}") from None

    def _plan(self, mapping: dict[str, list[str]]) -> dict[str, _Edits]:
        """Which zones' own tools change, and how: removed and changed tools where catalog-map.json
        places them, new tools where routing takes them."""
        edits: dict[str, _Edits] = {}
        for tid in self.report.removed:
            for owner in mapping.get(tid, []):
                edits.setdefault(_owner_parts(owner)[0], _Edits()).remove.add(tid)
        for tid in self.report.changed:
            for owner in mapping.get(tid, []):
                edits.setdefault(_owner_parts(owner)[0], _Edits()).replace[tid] = self.index[tid]
        for tid in self.report.added:
            i = self.index[tid]
            edits.setdefault(self.route(self.tokens(i)), _Edits()).add.append(i)
        unknown = sorted(o for o in edits if o not in self.state.zones)
        if unknown:
            raise BuildError(f"catalog-map.json places tools in zones the tree does not have ({', '.join(unknown[:5])})"
                             "; build the tree again once")
        return edits

    def _statistics(self, old_tokens: dict[str, list[str]], refresh: bool) -> None:
        """The catalog's statistics kept current; the written ones extended by the terms new to them,
        or, past the threshold (or with *refresh*), replaced by the current ones."""
        report, current, written = self.report, self.state.current, self.state.written
        for tid in report.removed + report.changed:
            if tid in old_tokens:
                current.remove(old_tokens[tid])
        for tid in report.changed + report.added:
            current.add(self.tokens(self.index[tid]))
        for tid in report.changed + report.added:
            for term in self.tokens(self.index[tid]):
                if term not in written.df and term in current.df:
                    written.df[term] = current.df[term]
        report.drift = drift(written, current)
        report.refreshed = refresh or report.drift["drift"] > self.threshold
        if report.refreshed:
            self.state.written = current.stats()
            self.progress(f"statistics drift {report.drift['drift']:.2%}: refreshing them in all "
                          f"{len(self.state.zones)} zones")

    def _write_all(self, order: list[str], new_tools: dict, changed_pairs: set, splits: dict, mapping: dict) -> None:
        """Rewrite the zones in *order* (children before parents), each parent's changed copies with
        its children's new text and serials."""
        serials: dict[str, int] = {}
        beneath = self._beneath_index(mapping)
        for n, origin in enumerate(order, 1):
            corpora = {}
            for child in self.children[origin]:
                if child in serials:
                    label = child.split(".", 1)[0]
                    counts = facets = None
                    if (origin, label) in changed_pairs:
                        tokens = list(map(self.tokens, self._tools_beneath(child, beneath)))
                        counts, facets = corpus_counts(tokens), facet_terms(tokens)
                        self.terms(origin).facets[label] = [Counter(dict(f)) for f in facets]  # as written
                    corpora[label] = (counts, facets, serials[child], False if child in splits else None)
            serials[origin] = self._write(origin, new_tools.get(origin), corpora, splits.get(origin),
                                          self.report.refreshed, self.state.written)
            if self.report.refreshed and (n % 200 == 0 or n == len(order)):
                self.progress(f"rewrote {n}/{len(order)} zones")

    def _edit_tools(self, zone: Zone, e: _Edits, old_tokens: dict[str, list[str]]) -> tuple[Tool, ...]:
        """The zone's tools after the edits; the old text's tokens of removed and changed tools into
        *old_tokens*."""
        tools, labels = [], set()
        adding = {self.catalog.tools[i].id: i for i in e.add}
        for tool in zone.tools:
            if tool.id in e.remove or tool.id in e.replace:
                old_tokens.setdefault(tool.id, tokenize(tool.text()))
            if tool.id in e.remove:
                continue
            # an added id already here (left by an interrupted update) is rewritten in place
            i = e.replace[tool.id] if tool.id in e.replace else adding.pop(tool.id, None)
            if i is not None:
                p = self.proto(i)
                same_text = tool.vector and tool.vector_of == p.text_digest()
                tool = dataclasses.replace(tool, name=p.name, target=p.target, port=p.port, description=p.description,
                                           endpoint=p.endpoint, parameters=p.parameters, id=p.id,
                                           examples=p.examples, vector=tool.vector if same_text else b"",
                                           vector_of=tool.vector_of if same_text else "")
            tools.append(tool)
            labels.add(tool.label)
        if adding:
            fresh = _tool_labels(self.catalog, adding.values(), labels, self.report.warnings)
            tools.extend(dataclasses.replace(self.proto(i), label=fresh[i]) for i in sorted(adding.values()))
        if zone.settings.scorer == "hybrid":
            missing = sum(1 for t in tools if not t.vector) - sum(1 for t in zone.tools if not t.vector)
            if missing > 0:
                self.report.warnings.append(f"{zone.origin}: {missing} new or changed tools have no vector (BM25 "
                                            "alone ranks them) and the centroids above them are as built: run "
                                            "tooldns embed on the directory")
        return tuple(tools)

    def _update_terms(self, old_tokens: dict[str, list[str]], mapping) -> set[tuple[str, str]]:
        """Each changed tool's tokens out of (old text) and into (new text) the term counts of every
        delegation above it, once per delegation however many of its zones are beneath; the
        (parent, child label) pairs whose summary text changed."""
        report, pairs_changed = self.report, set()

        def pairs(origins) -> set[tuple[str, str]]:
            out = set()
            for origin in origins:
                chain = self.state.path(origin)
                out.update((parent, child.split(".", 1)[0]) for child, parent in zip(chain, chain[1:]))
            return out

        def placed(tid: str) -> list[str]:
            return [_owner_parts(owner)[0] for owner in mapping.get(tid, [])]

        for tid in report.removed + report.changed:
            for parent, label in pairs(placed(tid)):
                pairs_changed.add((parent, label))
                if tid in old_tokens:
                    counts = self.terms(parent).children.setdefault(label, Counter())
                    counts.subtract(old_tokens[tid])
                    for term in [t for t in set(old_tokens[tid]) if counts[t] <= 0]:
                        del counts[term]
        for tid in report.changed:
            for parent, label in pairs(placed(tid)):
                self.terms(parent).children.setdefault(label, Counter()).update(self.tokens(self.index[tid]))
        return pairs_changed

    def _update_mapping(self, mapping: dict, new_tools: dict[str, tuple[Tool, ...]]) -> set[tuple[str, str]]:
        """catalog-map.json after the edits (added tools in their zone, removed ones gone); the term
        counts above each added tool; the (parent, child label) pairs above added tools."""
        report, pairs = self.report, set()
        for tid in report.removed:
            mapping.pop(tid, None)
        added = set(report.added)
        for origin, tools in new_tools.items():
            for tool in tools:
                if tool.id in added and tool.owner(origin) not in mapping.get(tool.id, []):
                    mapping.setdefault(tool.id, []).append(tool.owner(origin))
        for tid in report.added:
            tokens = self.tokens(self.index[tid])
            chain = self.state.path(_owner_parts(mapping[tid][0])[0])
            for child, parent in zip(chain, chain[1:]):
                self.terms(parent).children.setdefault(child.split(".", 1)[0], Counter()).update(tokens)
                pairs.add((parent, child.split(".", 1)[0]))
        return pairs

    def _oversize(self, mapping: dict) -> dict[str, int]:
        """Leaves holding more than twice the tree's max_leaf catalog tools, and how many (none when
        the tree was not the offline one)."""
        max_leaf = self.state.settings.get("max_leaf")
        if not max_leaf:
            return {}
        sizes = Counter(origin for owners in mapping.values() for origin in {_owner_parts(o)[0] for o in owners})
        return {o: n for o, n in sizes.items() if n > LEAF_SLACK * max_leaf and not self.children.get(o, True)}

    def _beneath_index(self, mapping: dict) -> dict[str, list[int]]:
        """zone origin -> catalog indices of the tools placed in it."""
        out: dict[str, list[int]] = {}
        for tid, owners in mapping.items():
            i = self.index.get(tid)
            if i is None:
                continue
            for owner in owners:
                out.setdefault(_owner_parts(owner)[0], []).append(i)
        return out

    def _tools_beneath(self, origin: str, beneath: dict[str, list[int]]) -> list[int]:
        """Catalog indices of every tool in *origin* and beneath it, in catalog order (as the build
        joins their text into the parent's copy of its summary)."""
        out, stack = set(), [origin]
        while stack:
            zone = stack.pop()
            out.update(beneath.get(zone, ()))
            stack.extend(self.children.get(zone, ()))
        return sorted(out)

    def _zone_stats(self, tools: tuple[Tool, ...], written: CorpusStats) -> CorpusStats | None:
        """A zone's ``corpus_stats``: the written statistics, with the df of the terms its tools use."""
        if not tools:
            return None
        terms = {t for tool in tools for t in tokenize(tool.text())}
        return CorpusStats(written.n_docs, round(written.avgdl, 6),
                           dict(sorted((t, written.df[t]) for t in terms if t in written.df)))

    def _write(self, origin: str, tools: tuple[Tool, ...] | None, corpora: dict, split: list | None, refresh: bool,
               written: CorpusStats) -> int:
        """Rewrite one zone's file through the schema: the zone loaded, its SOA serial raised, its changed
        delegations' copies (corpus terms, facets, serial, leaf mark) renewed, its tools and statistics
        replaced when they changed, and the zone written back with its header comment lines
        (:func:`~tooldns.zone.zonefile.write_zone`); the new serial."""
        zone = self.load(origin)
        serial = next_serial(zone.soa.serial)
        children = [_renewed(child, corpora.get(child.label)) for child in zone.children]
        if tools is None:
            tools = zone.tools
        stats = self._zone_stats(tools, written) if (refresh or tools is not zone.tools) else zone.corpus_stats
        if split is not None:
            children.extend(split)
            stats = self._zone_stats(tools, written)
        zone = dataclasses.replace(zone, soa=dataclasses.replace(zone.soa, serial=serial), children=tuple(children),
                                   tools=tools, corpus_stats=stats)
        write_zone(zone, self.path(origin), self.loaded.pop(origin)[1])  # written once: not kept loaded
        return serial

    # -- splitting a leaf --

    def _split(self, origin: str, tools: tuple[Tool, ...], mapping: dict) -> tuple[list[Delegation], tuple[Tool, ...]]:
        """Split the leaf *origin* (its tools after the edits) into new leaves, clustered as the offline
        builder splits a node; write their zone files. Returns the leaf's delegations to them and the
        tools it keeps (those that are not catalog tools: written by hand)."""
        state, report = self.state, self.report
        leaf = self.load(origin)
        members = [(self.index[t.id], t) for t in tools if t.id in self.index]
        sub = Catalog([self.catalog.tools[i] for i, _ in members])
        max_leaf = state.settings["max_leaf"]
        builder = AutoTreeBuilder(max_children=state.settings.get("max_children"), max_leaf=max_leaf, max_depth=1,
                                  k1=state.settings.get("child_k1", 10.0), b=state.settings.get("child_b", 0.75),
                                  terms=[self.tokens(i) for i, _ in members])  # kept: the delegations count them
        root = builder.build(sub)
        if not root.children:
            report.oversize[origin] = len(tools)
            return [], tools
        used = {e.address for e in state.zones.values()}
        addresses = (_addresses(state.subnet) if single_address(state.subnet)  # the one address of every zone
                     else (a for a in _addresses(state.subnet) if a not in used))
        children_terms, children_facets, delegations = {}, {}, []
        serial = next_serial(0)
        for child in root.children:
            child_origin = f"{child.label}.{origin}"
            address = next(addresses)
            ns = (NameServer(f"ns1.{child_origin}", address),)
            placed = tuple(members[j][1] for j in sorted(set(child.tools)))
            title = f"{child.title}: {child.description}".strip(": ")
            zone = Zone(origin=child_origin, soa=SOA(f"ns1.{child_origin}", f"hostmaster.{child_origin}", serial=serial),
                        nameservers=ns, summary=Summary(title),
                        tools=placed, settings=leaf.settings, corpus_stats=self._zone_stats(placed, state.written))
            entry = ZoneEntry(child_origin.rstrip(".") + ".yaml", origin, address)
            if (self.outdir / entry.file).exists():
                raise BuildError(f"{self.outdir / entry.file} exists already: cannot split {origin}")
            write_zone(zone, self.outdir / entry.file, self.loaded[origin][1])  # the leaf's header
            state.zones[child_origin] = entry
            self.children[origin].append(child_origin)
            self.children[child_origin] = []
            indices = sorted(members[j][0] for j in set(child.tools))
            tokens = list(map(self.tokens, indices))
            delegation = Delegation(child.label, child_origin, child.kind,
                                    Summary(title, tuple(child.keywords), serial=serial,
                                            corpus_terms=tuple(corpus_counts(tokens).items()),
                                            facets=facet_terms(tokens)), ns, leaf=True)
            delegations.append(delegation)
            # as the parent's scorer sees it (build's _child_terms): the summary's text and corpus, counted
            children_terms[child.label] = Counter(delegation.summary.counts())
            children_facets[child.label] = own_facets(delegation.summary)
            for tool in placed:
                mapping[tool.id] = [o for o in mapping.get(tool.id, []) if o != tool.owner(origin)] \
                                   + [tool.owner(child_origin)]
            report.new_zones.append(child_origin)
        kept = tuple(t for t in tools if t.id not in self.index)
        if kept:  # the leaf's own tools compete with its new children as one more candidate
            children_terms[SELF], children_facets[SELF] = own_tools_terms(kept)
        self._terms[origin] = ChildTerms.of(leaf.settings, children_terms, children_facets)
        report.split.append(origin)
        return delegations, kept
