"""Category trees over a catalog: what ``tooldns build`` turns into zones.

A :class:`Category` holds tools (indices into the catalog) and child categories. Builders are
interchangeable behind one method, ``build(catalog, progress) -> Category``:

* :class:`AutoTreeBuilder`: offline, deterministic, no model and no network. Recursive
  splitting (at most 100 children a node, leaves of about 20 tools, as many levels as the
  catalog's size needs: one for ToolRet's 1,839 tools) by k-means over TF-IDF vectors of the tools' text, then a few rounds of moving each
  tool to the group whose aggregated text BM25 ranks first for the tool's own text: the groups
  become the ones a query about the tool would be routed to (measured: routing recall at the
  root from 83 % to 87 % at K = 3 on ToolRet). A tool whose second group scores nearly as well
  is placed in both. Children get short DNS labels from their most distinctive terms.
* :class:`A2XTreeBuilder`: a given tree in the A2X format (``taxonomy.json`` + ``class.json``).
* An LLM builder (A2X's Algorithm 1) plugs in the same way.

    >>> root = AutoTreeBuilder().build(load_catalogs(["services.en.json"]))
    >>> [c.label for c in root.children][:3]
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..scoring.bm25 import BM25
from .catalog import Catalog
from ..exceptions import BuildError
from ..scoring.tokenize import tokenize

Progress = Callable[[str], None]

#: place a tool in its second group too when that group is nearly as close: measured on ToolRet,
#: 0.9 of the best BM25 routing score, 0.95 of the best cosine
LEXICAL_OVERLAP = 0.9
DENSE_OVERLAP = 0.95
#: (children a node, tools a leaf): wide and shallow trees cost fewer queries for the same hit rate;
#: chosen by cross-validation on ToolRet's dev queries (docs/building.md)
LEXICAL_SHAPE = (100, 20)
DENSE_SHAPE = (80, 24)


def auto_depth(n_tools: int, max_children: int, max_leaf: int) -> int:
    """Levels of splitting a catalog of *n_tools* needs for leaves of about *max_leaf* tools."""
    if n_tools <= max_leaf:
        return 1
    return max(1, round(math.log(n_tools / max_leaf) / math.log(max_children)))


def _quiet(_: str) -> None:
    pass


@dataclass
class Category:
    label: str  # DNS label ("" for the root)
    title: str
    description: str = ""
    tools: list[int] = field(default_factory=list)  # catalog indices placed at this node
    children: list["Category"] = field(default_factory=list)
    kind: str = "functional"
    keywords: list[str] = field(default_factory=list)

    def walk(self, depth: int = 0):
        yield self, depth
        for child in self.children:
            yield from child.walk(depth + 1)

    def all_tools(self) -> set[int]:
        out = set(self.tools)
        for child in self.children:
            out |= child.all_tools()
        return out


class TreeBuilder(Protocol):
    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category: ...


def slug(text: str, limit: int = 40) -> str:
    """A DNS label from text: ASCII letters and digits joined by '-', or '' if none remain."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    ascii_text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", ascii_text)
    out = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return out[:limit].strip("-")


def unique_label(base: str, taken: set[str], fallback: str) -> str:
    label = base or fallback
    candidate, n = label, 2
    while candidate in taken:
        suffix = f"-{n}"
        candidate = label[:63 - len(suffix)] + suffix
        n += 1
    taken.add(candidate)
    return candidate


def _idna_label(term: str) -> str:
    try:
        label = term.encode("idna").decode("ascii")
    except UnicodeError:
        return ""
    return label if len(label) <= 63 and re.fullmatch(r"[a-z0-9-]+", label) else ""


class AutoTreeBuilder:
    """Offline recursive k-means splitting; deterministic for the same input and parameters.

    With *vectors* (one unit-length embedding per catalog tool, ``tooldns build --embed``) the
    groups are k-means clusters of the vectors, and a tool whose second-nearest centroid is
    nearly as close as its nearest (cosine at least *overlap* times) is placed in both: the tree a
    hybrid scorer routes well. Without, they are clusters of TF-IDF vectors moved towards the group
    BM25 routes each tool's own text to.
    """

    def __init__(self, max_children: int | None = None, max_leaf: int | None = None, max_depth: int | None = None,
                 overlap: float | None = None, seed: int = 0, refine: int = 3, k1: float = 10.0, b: float = 0.75,
                 vectors=None) -> None:
        dense = vectors is not None
        self.max_children = max_children or (DENSE_SHAPE if dense else LEXICAL_SHAPE)[0]
        self.max_leaf = max_leaf or (DENSE_SHAPE if dense else LEXICAL_SHAPE)[1]
        self.max_depth = max_depth  # None: what the catalog's size needs (auto_depth)
        if self.max_children < 2 or self.max_leaf < 1 or (max_depth is not None and max_depth < 1):
            raise BuildError("max_children must be at least 2, max_leaf and max_depth at least 1")
        self.vectors = vectors
        self.overlap = overlap if overlap is not None else (DENSE_OVERLAP if vectors is not None else LEXICAL_OVERLAP)
        self.seed, self.refine = seed, refine
        self.k1, self.b = k1, b  # as the parent zone will score its children

    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category:
        import numpy as np
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts = [t.text() for t in catalog.tools]
        if not texts:
            raise BuildError("the catalog has no tools")
        if self.vectors is not None and len(self.vectors) != len(texts):
            raise BuildError(f"{len(self.vectors)} vectors for {len(texts)} tools")
        vectorizer = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None, sublinear_tf=True)
        self._x = vectorizer.fit_transform(texts)
        self._tokens = [tokenize(t) for t in texts]
        self._terms = np.array(vectorizer.get_feature_names_out())
        self._np = np
        self._progress = progress
        self._depth = self.max_depth or auto_depth(len(texts), self.max_children, self.max_leaf)
        root = Category("", "All tools", "Every tool of the catalog")
        self._split(root, list(range(len(texts))), 1)
        return root

    def _split(self, node: Category, members: list[int], depth: int) -> None:
        if len(members) <= self.max_leaf or depth > self._depth:
            node.tools = sorted(members)
            return
        k = min(self.max_children, max(2, math.ceil(len(members) / self.max_leaf)))
        self._progress(f"splitting {node.label or 'the root'} ({len(members)} tools) into up to {k}")
        groups = self._dense_groups(members, k) if self.vectors is not None else self._lexical_groups(members, k)
        if len(groups) < 2 or max(len(g) for g in groups) >= len(members):
            node.tools = sorted(members)  # nothing to split on: keep them here
            return
        self._add_children(node, members, groups, depth)

    def _kmeans(self, x, k: int) -> list[int]:
        from sklearn.cluster import KMeans

        return KMeans(n_clusters=k, random_state=self.seed, n_init=3, max_iter=100).fit_predict(x)

    def _dense_groups(self, members: list[int], k: int) -> list[list[int]]:
        np = self._np
        x = self.vectors[members]
        labels = self._kmeans(x, k)
        groups = [[m for m, lab in zip(members, labels) if lab == c] for c in range(k)]
        keep = [c for c in range(k) if groups[c]]
        groups = [groups[c] for c in keep]
        centroids = np.array([x[labels == c].mean(axis=0) for c in keep])
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
        if self.overlap < 1.0 and len(groups) > 1:
            self._place_twice(members, groups, x @ centroids.T)
        return groups

    def _lexical_groups(self, members: list[int], k: int) -> list[list[int]]:
        np = self._np
        labels = self._kmeans(self._x[members], k)
        groups: list[list[int]] = [[m for m, lab in zip(members, labels) if lab == c] for c in range(k)]
        groups = [g for g in groups if g]
        sims = None
        for _ in range(self.refine):  # move each tool to the group BM25 routes its own text to
            index = BM25(tokens=[[t for m in g for t in self._tokens[m]] for g in groups], k1=self.k1, b=self.b)
            sims = np.array([index.scores_tokens(self._tokens[m]) for m in members])
            best = sims.argmax(axis=1)
            moved = [[m for m, bi in zip(members, best) if bi == c] for c in range(len(groups))]
            if moved == groups:
                break
            groups = [g for g in moved if g]
            sims = None
        if self.overlap < 1.0 and len(groups) > 1:
            if sims is None:
                index = BM25(tokens=[[t for m in g for t in self._tokens[m]] for g in groups], k1=self.k1, b=self.b)
                sims = np.array([index.scores_tokens(self._tokens[m]) for m in members])
            self._place_twice(members, groups, sims)
        return groups

    def _place_twice(self, members: list[int], groups: list[list[int]], sims) -> None:
        """Put each member in its second group too when it is nearly as similar (*overlap* of its best)."""
        order = self._np.argsort(-sims, axis=1)
        for row, member in enumerate(members):
            first, second = order[row, 0], order[row, 1]
            if sims[row, second] > 0 and sims[row, second] >= self.overlap * sims[row, first]:
                groups[second].append(member)

    def _add_children(self, node: Category, members: list[int], groups: list[list[int]], depth: int) -> None:
        """A child per group, labelled from its most distinctive terms, split in turn."""
        np = self._np
        taken: set[str] = set()
        parent_mean = np.asarray(self._x[members].mean(axis=0)).ravel()
        for i, group in enumerate(sorted(groups, key=lambda g: (-len(g), min(g)))):
            weights = np.asarray(self._x[group].mean(axis=0)).ravel() - 0.5 * parent_mean
            top = [self._terms[j] for j in np.argsort(-weights)[:12]]
            ascii_terms = [t for t in top if slug(t) == t]
            base = "-".join(ascii_terms[:2])[:40] if ascii_terms else next(filter(None, map(_idna_label, top)), "")
            label = unique_label(base, taken, f"c{i + 1}")
            child = Category(label, ", ".join(top[:3]), "Tools about " + ", ".join(top[:8]), keywords=top[:8])
            node.children.append(child)
            self._split(child, group, depth + 1)


class A2XTreeBuilder:
    """A category tree given in the A2X format; tools it does not place go to the root."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category:
        try:
            taxonomy = json.loads((self.directory / "taxonomy.json").read_text(encoding="utf-8"))
            classes = json.loads((self.directory / "class.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BuildError(f"{self.directory}: cannot read taxonomy.json and class.json: {exc}") from None
        cats = taxonomy.get("categories")
        root_id = taxonomy.get("root", "root")
        if not isinstance(cats, dict) or root_id not in cats:
            raise BuildError(f"{self.directory}/taxonomy.json: needs 'categories' with the root '{root_id}'")
        index = {t.id: i for i, t in enumerate(catalog.tools)}
        self.unknown: list[str] = []

        def make(cat_id: str, label: str, seen: frozenset) -> Category:
            if cat_id in seen:
                raise BuildError(f"taxonomy.json: category {cat_id} is its own ancestor")
            info = classes.get(cat_id, {}) if isinstance(classes, dict) else {}
            node_data = cats.get(cat_id) or {}
            name = info.get("name", cat_id)
            node = Category(label, name, " ".join(filter(None, [info.get("description", ""), info.get("boundary", "")])))
            for sid in node_data.get("services", []):
                if sid in index:
                    node.tools.append(index[sid])
                else:
                    self.unknown.append(sid)
            taken: set[str] = set()
            for child_id in node_data.get("children", []):
                if child_id not in cats:
                    raise BuildError(f"taxonomy.json: category {cat_id} names unknown child {child_id}")
                child_name = (classes.get(child_id) or {}).get("name", child_id)
                child_label = unique_label(slug(child_name, 30), taken, slug(child_id, 30) or "c")
                node.children.append(make(child_id, child_label, seen | {cat_id}))
            return node

        root = make(root_id, "", frozenset())
        placed = root.all_tools()
        missing = [i for i in range(len(catalog.tools)) if i not in placed]
        root.tools.extend(missing)
        self.unplaced = len(missing)
        progress(f"A2X tree: {sum(1 for _ in root.walk())} categories; {len(missing)} tools not in it go to the root; "
                 f"{len(self.unknown)} ids in it are not in the catalog")
        return root
