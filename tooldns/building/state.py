"""What ``tooldns build`` remembers of a built tree, so that ``tooldns build --update`` can change it in place.

A built directory holds, besides its zone files, ``catalog-map.json`` (catalog id -> the tool's DNS
names: where each tool is placed) and ``build-state/``:

* ``build-state/state.json``: the tree's shape (each zone's file, parent and address), the build's
  settings, a digest of each catalog tool as it was built (an update compares the catalog with
  these, not with the zone files: reading the 5,199 files of a 100,000-tool tree takes a minute),
  and two sets of global BM25 statistics: ``written``, those the zone files carry
  (``corpus_stats``), and ``current``, those of the catalog as it stands now (kept up to date by
  each update, so that their drift can be measured without reading every tool);
* ``build-state/terms/<zone file stem>.json``, one per zone with children: the index terms of each
  child's summary (its title, keywords and the text of every tool beneath it) with their counts,
  and the BM25 k1 and b the zone ranks its children with. With them a new tool is routed down the
  tree as the zone servers would route a query made of its text, without reading (or tokenizing)
  the summaries, which at the root of a 100,000-tool tree are 30 MB of text.

The file formats are this module's alone (``tooldns-build-state/1``); :func:`tool_digest` says
when a catalog tool changed.

    >>> state = BuildState.read("built/")
    >>> state.zones["tools."].file, len(state.digests)
    ('root.yaml', 1839)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..exceptions import BuildError
from ..scoring.bm25 import CorpusStats, FacetRanker
from ..scoring.tokenize import Tokenized
from ..zone.zonefile import write_atomically
from .catalog import CatalogTool, json_loads

STATE_DIR = "build-state"
FORMAT = "tooldns-build-state/1"
#: the key of a zone's own tools in its terms file (no DNS label is ".")
SELF = "."


def tool_digest(tool: CatalogTool) -> str:
    """A short digest of what a catalog tool puts in its zone (names, description, parameters, URL,
    example intents): an update rewrites the tool when it differs from the one recorded at the last
    build or update. (A tool without examples digests as before examples existed.)"""
    text = repr((tool.names, tool.description, tool.parameters, tool.url, *([tool.examples] if tool.examples else [])))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


@dataclass
class Totals:
    """Statistics of the catalog as it stands: document count, total length, document frequencies;
    kept up to date one tool at a time (:meth:`add`, :meth:`remove`)."""

    n_docs: int = 0
    length: int = 0
    df: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, docs) -> "Totals":
        df: Counter[str] = Counter()
        length = 0
        for toks in docs:
            df.update(set(toks))
            length += len(toks)
        return cls(len(docs), length, dict(df))

    @property
    def avgdl(self) -> float:
        return self.length / self.n_docs if self.n_docs else 0.0

    def add(self, tokens: list[str]) -> None:
        self.n_docs += 1
        self.length += len(tokens)
        for term in set(tokens):
            self.df[term] = self.df.get(term, 0) + 1

    def remove(self, tokens: list[str]) -> None:
        self.n_docs -= 1
        self.length -= len(tokens)
        for term in set(tokens):
            left = self.df.get(term, 0) - 1
            if left > 0:
                self.df[term] = left
            else:
                self.df.pop(term, None)

    def stats(self) -> CorpusStats:
        return CorpusStats(self.n_docs, self.avgdl, dict(self.df))


def _idf(n: int, df: int) -> float:
    """BM25's idf, as :class:`~tooldns.scoring.bm25.BM25` computes it."""
    return math.log(1 + (max(n, df) - df + 0.5) / (df + 0.5))


def drift(written: CorpusStats, current: Totals) -> dict[str, float]:
    """How far the statistics the zones carry (*written*) are from the catalog's (*current*):

    * ``n_docs``, ``avgdl``: relative differences;
    * ``idf``: the idf differences summed over the catalog's term occurrences (each term counted
      once per tool that uses it), relative to the same sum of the current idf: how much of the
      scores' weight is off. (Not a mean of relative differences: a term that every tool uses has
      an idf near 0, which one tool more or less changes several times over, to no effect on any
      score.) The document count's drift feeds it too;
    * ``drift``: the larger of ``avgdl`` and ``idf``, what the refresh threshold is compared with
      (``docs/building.md``: measured on ToolRet, the share of queries whose top ten changes grows
      with it).
    """
    n, avgdl = current.n_docs, current.avgdl
    out = {"n_docs": abs(written.n_docs - n) / n if n else 0.0,
           "avgdl": abs(written.avgdl - avgdl) / avgdl if avgdl else 0.0}
    total = off = 0.0
    for term, df in current.df.items():
        fresh = _idf(n, df)
        off += df * abs(_idf(written.n_docs, written.df.get(term, df)) - fresh)
        total += df * fresh
    out["idf"] = off / total if total else 0.0
    out["drift"] = max(out["avgdl"], out["idf"])
    return out


@dataclass
class ZoneEntry:
    """Where a zone of the tree is: its file (in the directory), its parent (None: the root) and the
    address of its name server."""

    file: str
    parent: str | None
    address: str


@dataclass
class BuildState:
    """``build-state/state.json``: see the module docstring."""

    origin: str
    service: str
    subnet: str
    #: the build's settings an update needs: child_k1, child_b, tool_k1, prune_ratio, max_leaf
    #: (None when the tree was not the offline one: no leaf is split then)
    settings: dict
    zones: dict[str, ZoneEntry]
    digests: dict[str, str]
    written: CorpusStats
    current: Totals
    updates: int = 0

    # -- the tree's shape --

    def children_of(self) -> dict[str, list[str]]:
        """origin -> its children's origins, in the order the state lists them (the zone's order)."""
        out: dict[str, list[str]] = {o: [] for o in self.zones}
        for origin, entry in self.zones.items():
            if entry.parent is not None:
                out[entry.parent].append(origin)
        return out

    def path(self, origin: str) -> list[str]:
        """*origin* and its ancestors, up to the root."""
        out = [origin]
        while self.zones[out[-1]].parent is not None:
            out.append(self.zones[out[-1]].parent)
        return out

    def depth(self, origin: str) -> int:
        return len(self.path(origin)) - 1

    # -- files --

    @staticmethod
    def directory(outdir: str | os.PathLike) -> Path:
        return Path(outdir) / STATE_DIR

    @classmethod
    def read(cls, outdir: str | os.PathLike) -> "BuildState":
        path = cls.directory(outdir) / "state.json"
        try:
            data = json_loads(path.read_bytes())
        except FileNotFoundError:
            raise BuildError(f"{outdir}: no {STATE_DIR}/state.json: not a tree tooldns build made, or made before "
                             "tooldns build --update existed; build it again once") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise BuildError(f"{path}: cannot read: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BuildError(f"{path}: not a {FORMAT} file")
        try:
            w, c = data["written"], data["current"]
            return cls(data["origin"], data["service"], data["subnet"], data["settings"],
                       {o: ZoneEntry(**e) for o, e in data["zones"].items()}, data["digests"],
                       CorpusStats(w["n_docs"], w["avgdl"], w["df"]), Totals(c["n_docs"], c["length"], c["df"]),
                       data.get("updates", 0))
        except (KeyError, TypeError) as exc:
            raise BuildError(f"{path}: malformed ({exc})") from None

    def write(self, outdir: str | os.PathLike) -> None:
        data = {"format": FORMAT, "origin": self.origin, "service": self.service, "subnet": self.subnet,
                "settings": self.settings, "updates": self.updates,
                "zones": {o: e.__dict__ for o, e in self.zones.items()},
                "written": {"n_docs": self.written.n_docs, "avgdl": self.written.avgdl, "df": self.written.df},
                "current": {"n_docs": self.current.n_docs, "length": self.current.length, "df": self.current.df},
                "digests": self.digests}
        directory = self.directory(outdir)
        directory.mkdir(parents=True, exist_ok=True)  # a tree of one zone writes no terms before it
        write_atomically(directory / "state.json", json.dumps(data, ensure_ascii=False))

    def terms_path(self, outdir: str | os.PathLike, origin: str) -> Path:
        return self.directory(outdir) / "terms" / (Path(self.zones[origin].file).stem + ".json")

    def read_terms(self, outdir: str | os.PathLike, origin: str) -> "ChildTerms":
        path = self.terms_path(outdir, origin)
        try:
            data = json_loads(path.read_bytes())
            return ChildTerms(float(data["k1"]), float(data["b"]),
                              {label: Counter(counts) for label, counts in data["children"].items()},
                              {label: [Counter(f) for f in facets] for label, facets in data.get("facets", {}).items()},
                              float(data.get("facet_k1", 1.5)))
        except FileNotFoundError:
            raise BuildError(f"{path}: missing; build the tree again once") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BuildError(f"{path}: cannot read: {exc}") from None

    def write_terms(self, outdir: str | os.PathLike, origin: str, terms: "ChildTerms") -> None:
        path = self.terms_path(outdir, origin)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps({"k1": terms.k1, "b": terms.b, "children": {
            label: dict(counts.most_common()) for label, counts in terms.children.items()},
            "facet_k1": terms.facet_k1, "facets": {label: [dict(f) for f in facets]
                                                   for label, facets in terms.facets.items() if facets}},
            ensure_ascii=False))


@dataclass
class ChildTerms:
    """A zone's children as its scorer sees them: each child's label -> the terms of its summary,
    counted (``SELF``: the zone's own tools, which compete as one more candidate), and the BM25
    parameters it ranks them with."""

    k1: float
    b: float
    children: dict[str, Counter]
    #: each child's facets (its tools' terms in groups, as its delegation carries them; ``SELF``'s
    #: made as the server makes them), none for a child without; and the k1 they are ranked with
    facets: dict[str, list[Counter]] = field(default_factory=dict)
    facet_k1: float = 1.5

    @classmethod
    def of(cls, settings, children: dict[str, Counter], facets: dict[str, list[Counter]]) -> "ChildTerms":
        """*children* and their *facets* with the BM25 parameters a zone of *settings* ranks its children
        by (its scorer options, its child scorer options over them)."""
        options = {**settings.scorer_options, **settings.child_scorer_options}
        return cls(float(options.get("k1", 1.5)), float(options.get("b", 0.75)), children, facets,
                   float(options.get("facet_k1", 1.5)))

    def faceted(self) -> bool:
        """Whether every child has facets: then the zone's scorer ranks them by their best facet."""
        return bool(self.children) and all(self.facets.get(label) for label in self.children)

    def rank(self, query: list[str]) -> list[tuple[str, float]]:
        """Each child's BM25 score for the query tokens *query*, best first (ties in zone order): the
        scores :class:`~tooldns.scoring.bm25.BM25` gives over the children's summaries, from their
        term counts; by their best facet when every child has facets, as
        :class:`~tooldns.scoring.bm25.FacetRanker` ranks them."""
        labels = list(self.children)
        scores = self._facet_scores(labels, query) if self.faceted() else self._scores(labels, query)
        order = sorted(range(len(labels)), key=lambda i: (-scores[i], i))
        return [(labels[i], scores[i]) for i in order]

    def _scores(self, labels: list[str], query: list[str]) -> list[float]:
        """Each child's BM25 score over whole summaries, from their term counts."""
        docs = [self.children[label] for label in labels]
        n = len(docs)
        lengths = [sum(d.values()) for d in docs]
        avgdl = (sum(lengths) / n if n else 0.0) or 1.0
        scores = [0.0] * n
        for term, qtf in Counter(query).items():
            holders = [i for i, d in enumerate(docs) if term in d]
            if not holders:
                continue
            idf = _idf(n, len(holders))
            for i in holders:
                tf = docs[i][term]
                scores[i] += qtf * idf * tf / (tf + self.k1 * (1 - self.b + self.b * lengths[i] / avgdl))
        return scores

    def _facet_scores(self, labels: list[str], query: list[str]) -> list[float]:
        """Each child's best facet's score, as :class:`~tooldns.scoring.bm25.FacetRanker` scores it."""
        ranker = FacetRanker([Tokenized(" ", self.children[label], tuple(self.facets[label])) for label in labels],
                             k1=self.facet_k1, b=self.b)
        scores = [0.0] * len(labels)
        for facet, score in enumerate(ranker.index.scores_tokens(query)):
            owner = ranker.owners[facet]
            scores[owner] = max(scores[owner], score)
        return scores
