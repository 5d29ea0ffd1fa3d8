"""Vectors for a directory of zone files as it stands: fill in what is missing or stale, in place.

``tooldns build --embed`` gives every tool a vector and every delegation a few centroids; zone
files edited afterwards drift from them: an organisation adds a tool by hand (no vector, so the
hybrid scorer ranks it by BM25 alone), or rewrites a description (its vector, made from the old
text, is stale: ``vector_of`` no longer matches :meth:`Tool.text_digest`). :func:`embed_tree`
puts that right for a whole directory:

* every zone that scores vectors (scorer ``hybrid``, or carrying any vector already; with
  ``scorer="hybrid"``, every zone, switched to ``hybrid``) has each tool without a vector, with a
  stale one or with one of another model embedded afresh; fresh vectors are kept byte for byte;
  a tool in a language the model does not cover (:meth:`Embedder.covers`: Chinese for the English
  all-MiniLM-L6-v2) gets no vector, as ``tooldns build`` gives it none, and BM25 alone ranks it;
* in those zones, every delegation whose child zone file is in the directory gets its centroids
  recomputed from the vectors of every tool in the child's subtree (delegations are followed by
  origin across the files; tools of zones that score no vectors are embedded for this without
  being written), with :meth:`tooldns.building.build.Embedded.centroids`, as ``tooldns build``
  makes them;
* each changed zone is written back through :func:`tooldns.zone.zonefile.dump_zone` (header
  comment lines kept), atomically (:func:`tooldns.zone.zonefile.write_atomically`), so that a running
  ``tooldns serve`` reloads it by itself.

:func:`vector_gaps` and :func:`tree_warnings` say what is missing or stale without changing
anything (``tooldns check``).

    >>> report = embed_tree("built/", make_embedder("hash"))
    >>> print(report.text())
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..embedding.embedder import Embedder
from ..embedding.local import model_covers as local_model_covers
from ..embedding.registry import DEFAULT_SPEC, spec_for_model
from ..embedding.vectormap import VectorMap
from ..exceptions import EmbeddingError, ZoneFileError
from ..protocol.fusion import DEFAULT_WEIGHT
from ..protocol.vector import decode_vector, encode_vector
from ..scoring.hybrid import HybridScorer
from ..zone.model import Delegation, Tool, Zone
from ..zone.zonefile import dump_zone, header_of, load_zone, parse_zone, write_atomically, zone_files
from .build import Embedded, centre_of
from .quantized import centroids_of
from .examples import load_map, map_path

HYBRID = "hybrid"
#: the options the hybrid scorer takes (a zone switched to it keeps only these)
HYBRID_OPTIONS = frozenset(p for p in inspect.signature(HybridScorer.__init__).parameters
                           if p not in ("self", "docs", "briefs", "vectors"))


@dataclass
class ZoneFile:
    """One zone file of a directory: where it is, the zone it holds, and its header comment lines."""

    path: Path
    zone: Zone
    header: str = ""


@dataclass
class EmbedReport:
    """What :func:`embed_tree` did."""

    directory: str
    model: str
    zones: int = 0
    zones_changed: list[str] = field(default_factory=list)
    tools_missing: int = 0
    tools_stale: int = 0
    tools_other_model: int = 0
    #: tools whose zone's vectors went through another vector map than the tree's (or none): made again
    tools_remapped: int = 0
    #: tools left without a vector: the model does not cover their language
    tools_not_covered: int = 0
    delegations_updated: int = 0
    zones_switched: int = 0
    zones_skipped: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def tools_embedded(self) -> int:
        return self.tools_missing + self.tools_stale + self.tools_other_model + self.tools_remapped

    def text(self) -> str:
        other = f", {self.tools_other_model} of another model" if self.tools_other_model else ""
        other += f", {self.tools_remapped} through the tree's vector map" if self.tools_remapped else ""
        lines = [f"{self.directory}: {len(self.zones_changed)} of {self.zones} zones changed (model {self.model})",
                 f"tools embedded: {self.tools_embedded} ({self.tools_missing} missing, {self.tools_stale} stale{other})",
                 f"delegations updated: {self.delegations_updated}"]
        if self.tools_not_covered:
            lines.append(f"tools without a vector: {self.tools_not_covered} (in a language {self.model} does not "
                         "cover; BM25 alone ranks them)")
        if self.zones_switched:
            lines.append(f"zones switched to {HYBRID}: {self.zones_switched}")
        if self.zones_skipped:
            lines.append(f"zones left alone: {self.zones_skipped} (they score no vectors; --scorer {HYBRID} "
                         "embeds them too)")
        if self.zones_changed:
            shown = ", ".join(Path(p).name for p in self.zones_changed[:10])
            more = f" and {len(self.zones_changed) - 10} more" if len(self.zones_changed) > 10 else ""
            lines.append(f"written: {shown}{more}")
        return "\n".join(lines)


# -- reading --

def read_tree(directory: str | os.PathLike) -> list[ZoneFile]:
    """Every zone file of *directory*, validated; one :class:`ZoneFileError` listing every problem."""
    files, errors, seen = [], [], {}
    for path in zone_files(directory):
        try:
            zone = load_zone(path)
        except ZoneFileError as exc:
            errors.extend(exc.errors)
            continue
        if zone.origin in seen:
            errors.append(f"{path}:1: origin {zone.origin} is already in {seen[zone.origin]}")
        seen[zone.origin] = path
        files.append(ZoneFile(path, zone, header_of(path)))
    if errors:
        raise ZoneFileError(errors)
    return files


def uses_vectors(zone: Zone) -> bool:
    """Whether *zone* scores vectors or carries any: what ``tooldns embed`` keeps up to date."""
    return (zone.settings.scorer == HYBRID or any(t.vector for t in zone.tools)
            or any(d.vectors for d in zone.children))


def vector_models(zone: Zone) -> Counter:
    """How many vectors of each model *zone* carries (tools and centroids)."""
    found = [*(t.vector for t in zone.tools if t.vector), *(v for d in zone.children for v in d.vectors)]
    return Counter(decode_vector(v).model for v in found)


def default_spec(files: list[ZoneFile]) -> tuple[str, str | None]:
    """The embedder spec to use when none is given, and a note when the zones' own model cannot be
    made again by name (their vectors are then replaced with ``minilm``'s)."""
    models = sum((vector_models(f.zone) for f in files), Counter())
    if not models:
        return DEFAULT_SPEC, None
    model = models.most_common(1)[0][0]
    spec = spec_for_model(model)
    if spec is not None:
        return spec, None
    return DEFAULT_SPEC, (f"the zones' vectors are of {model}, which tooldns embed cannot make again by name; "
                          f"embedding with {DEFAULT_SPEC} replaces them (pass --model local:PATH or "
                          f"--model openai:{model} to keep {model})")


# -- what is missing or stale --

def _everything(text: str) -> bool:
    return True


def model_covers(model: str | None):
    """Whether the embedder of *model* covers a text (:meth:`Embedder.covers`), told without building
    it, so that ``tooldns check`` needs no model: the bundled all-MiniLM-L6-v2 and its static form cover
    text that is not mostly CJK (:func:`tooldns.embedding.local.model_covers`), every other model everything."""
    if model is None:
        return _everything
    return functools.partial(local_model_covers, model)


def tool_state(tool: Tool, model: str | None = None, covers=_everything) -> str:
    """``ok``, ``missing`` (no vector, and *covers* its text), ``stale`` (made from other text) or
    ``other`` (of a model other than *model*). A tool without a vector whose text *covers* says no
    to is ``ok``: it is to have none."""
    if not tool.vector:
        return "missing" if covers(tool.embedding_text()) else "ok"
    if model is not None and decode_vector(tool.vector).model != model:
        return "other"
    return "stale" if tool.vector_of != tool.text_digest() else "ok"


def zone_model(zone: Zone) -> str | None:
    """The model of *zone*'s vectors (None: it has none)."""
    models = vector_models(zone)
    return models.most_common(1)[0][0] if models else None


def vector_gaps(zone: Zone, model: str | None = None) -> tuple[int, int]:
    """(tools without a vector, tools with a stale vector) of *zone*; tools in a language the model
    of the zone's vectors (else *model*, the tree's) does not cover are to have none, and are not counted."""
    covers = model_covers(zone_model(zone) or model)
    states = Counter(tool_state(t, covers=covers) for t in zone.tools)
    return states["missing"], states["stale"]


def subtree_tools(origin: str, by_origin: dict[str, Zone]) -> list[Tool]:
    """Every tool of zone *origin* and of the zones beneath it in *by_origin*, each once (a tool placed
    in two leaves counts once), in the order a depth-first walk meets them."""
    out, seen, stack = [], set(), [origin]
    while stack:
        zone = by_origin[stack.pop()]
        for tool in zone.tools:
            key = tool.id or (tool.name, tool.service, tool.target, tool.port, tool.endpoint, tool.description)
            if key not in seen:
                seen.add(key)
                out.append(tool)
        stack.extend(reversed([d.name for d in zone.children if d.name in by_origin]))
    return out


def tree_warnings(files: list[ZoneFile], directory: str | os.PathLike) -> list[str]:
    """What ``tooldns check DIR`` warns about vectors: tools without one or with a stale one, delegations
    without centroids in zones that score vectors, zones of different models."""
    run = f"(run: tooldns embed {directory})"
    by_origin = {f.zone.origin: f.zone for f in files}
    models = Counter(m for f in files for m in vector_models(f.zone))
    tree_model = models.most_common(1)[0][0] if models else None  # for zones without vectors of their own
    out = []
    for f in files:
        if not uses_vectors(f.zone):
            continue
        missing, stale = vector_gaps(f.zone, tree_model)
        if missing or stale:
            out.append(f"{f.path}: {missing} tools without a vector, {stale} with a stale vector {run}")
        covers = model_covers(zone_model(f.zone) or tree_model)
        bare = [d.label for d in f.zone.children if not d.vectors and d.name in by_origin
                and any(t.vector or covers(t.embedding_text()) for t in subtree_tools(d.name, by_origin))]
        if bare:
            out.append(f"{f.path}: {len(bare)} delegations without centroids ({', '.join(bare[:10])}"
                       f"{', ...' if len(bare) > 10 else ''}) {run}")
    maps = Counter(f.zone.settings.vector_map for f in files if f.zone.settings.vector_map)
    for digest, zones in sorted(maps.items()):
        if not map_path(directory, digest).exists():
            out.append(f"{directory}: {zones} zones' vectors were made through the vector map {digest}, and "
                       f"{map_path(directory, digest).name} is not here: tooldns embed cannot give new tools the same "
                       "map (copy it from where the tree was built, or build the tree again)")
    if len(models) > 1:
        zones_of = Counter(m for f in files for m in set(vector_models(f.zone)))
        counts = ", ".join(f"{m}: {n} zones" for m, n in sorted(zones_of.items()))
        out.append(f"{directory}: vectors of {len(models)} models ({counts}); a client sends one model's vector "
                   f"(run: tooldns embed {directory} --model SPEC)")
    return out


# -- embedding --

class _Vectors:
    """Encoded vectors of tool texts under one embedder, embedded in one batch when asked."""

    def __init__(self, embedder: Embedder, vector_map: VectorMap | None = None) -> None:
        self.embedder = embedder
        self.model = embedder.model
        self.covers = embedder.covers
        self.by_text: dict[str, bytes] = {}
        #: the map the tree's vectors went through (:mod:`tooldns.embedding.vectormap`), given to new ones too
        self.vector_map = vector_map

    def state(self, tool: Tool) -> str:
        return tool_state(tool, self.model, self.covers)

    def embed(self, texts) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in self.by_text and self.covers(t)))
        if not todo:
            return
        vectors = self.embedder.embed(todo)
        if len(vectors) != len(todo):
            raise EmbeddingError(f"{self.model} gave {len(vectors)} vectors for {len(todo)} texts")
        if self.vector_map is not None:
            vectors = self.vector_map.apply(vectors).tolist()
        self.by_text.update((t, encode_vector(self.model, v)) for t, v in zip(todo, vectors))

    def of(self, tool: Tool) -> bytes:
        """*tool*'s own vector when it is fresh and of this model, else the one embedded here (b"":
        none, the model does not cover its text)."""
        if self.state(tool) == "ok":
            return tool.vector
        return self.by_text.get(tool.embedding_text(), b"")


def _targets(files: list[ZoneFile], scorer: str | None) -> set[str]:
    return {f.zone.origin for f in files if scorer == HYBRID or uses_vectors(f.zone)}


def _texts_to_embed(files: list[ZoneFile], targets: set[str], vectors: "_Vectors") -> list[str]:
    """Texts of the tools whose vectors are to be (re)made, and of the tools beneath target zones
    that have none (their zones score no vectors, but the centroids above them need them)."""
    by_origin = {f.zone.origin: f.zone for f in files}
    below = {t for origin in targets for d in by_origin[origin].children if d.name in by_origin
             for t in subtree_tools(d.name, by_origin)}
    tools = [t for f in files if f.zone.origin in targets for t in f.zone.tools] + list(below)
    return [t.embedding_text() for t in tools if vectors.state(t) != "ok"]


#: the report's counter of each state a tool's vector is made afresh in
_COUNTERS = {"missing": "tools_missing", "stale": "tools_stale", "other": "tools_other_model"}


def _embed_tools(zone: Zone, vectors: _Vectors, report: EmbedReport) -> Zone:
    tools = []
    for tool in zone.tools:
        state = vectors.state(tool)
        if state != "ok":
            vector = vectors.of(tool)
            if vector:
                counter = _COUNTERS[state]
                setattr(report, counter, getattr(report, counter) + 1)
            tool = dataclasses.replace(tool, vector=vector, vector_of=tool.text_digest() if vector else "")
        report.tools_not_covered += not tool.vector
        tools.append(tool)
    return dataclasses.replace(zone, tools=tuple(tools))


def _delegation(d: Delegation, zone: Zone, by_origin: dict[str, Zone], vectors: _Vectors, n: int,
                report: EmbedReport) -> Delegation:
    if d.name not in by_origin:  # the child lives elsewhere: its centroids stay unless of another model
        if d.vectors and decode_vector(d.vectors[0]).model != vectors.model:
            report.warnings.append(f"{zone.source}: the centroids of {d.name} are of "
                                   f"{decode_vector(d.vectors[0]).model} and its zone file is not here: removed "
                                   f"(the child is scored by BM25 alone until they are made again)")
            return dataclasses.replace(d, vectors=())
        return d
    fresh = centroids_of([v for v in map(vectors.of, subtree_tools(d.name, by_origin)) if v], n)
    if fresh != d.vectors:
        report.delegations_updated += 1
        return dataclasses.replace(d, vectors=fresh)
    return d


def _switch(zone: Zone, scorer: str, report: EmbedReport) -> Zone:
    """*zone* scoring with *scorer* (hybrid), keeping only the options the hybrid scorer takes."""
    s = zone.settings
    if s.scorer == scorer:
        return zone
    report.zones_switched += 1
    kept = {key: {k: v for k, v in getattr(s, key).items() if k in HYBRID_OPTIONS}
            for key in ("scorer_options", "child_scorer_options")}
    dropped = sorted({k for key in kept for k in getattr(s, key) if k not in kept[key]})
    if dropped:
        report.warnings.append(f"{zone.source}: scorer {s.scorer} -> {scorer}: dropped options {', '.join(dropped)}")
    return dataclasses.replace(zone, settings=dataclasses.replace(s, scorer=scorer, **kept))


def _tree_map(files: list[ZoneFile], targets: set[str], directory, model: str,
              report: EmbedReport) -> VectorMap | None:
    """The vector map the target zones name (the one most of them name), when it is of *model*: the map
    new vectors go through; None when they name none, or it is of another model (its vectors are all
    made again, plainly)."""
    named = Counter(f.zone.settings.vector_map for f in files if f.zone.origin in targets and f.zone.settings.vector_map)
    if not named:
        return None
    vmap = load_map(directory, named.most_common(1)[0][0])
    if vmap.model != model:
        report.warnings.append(f"the zones' vector map {vmap.digest} is of {vmap.model}, not {model}: the vectors "
                               f"are made again without it (build the tree again to learn a map for {model})")
        return None
    return vmap


def _tree_centre(zones: dict[str, Zone], targets: set[str], model: str) -> bytes:
    """The centre every target zone carries: the one they carry when it is of *model*, else the mean of
    every tool vector of the target zones (as ``tooldns build`` makes it)."""
    carried = Counter(zones[o].vector_centre for o in targets if zones[o].vector_centre)
    if carried:
        centre = carried.most_common(1)[0][0]
        if decode_vector(centre).model == model:
            return centre
    return centre_of([t.vector for o in sorted(targets) for t in zones[o].tools if t.vector])


def embed_tree(directory: str | os.PathLike, embedder: Embedder, centroids: int = Embedded.CENTROIDS,
               scorer: str | None = None, progress=lambda s: None) -> EmbedReport:
    """Fill in the missing and stale vectors of the zone files in *directory*, in place (module docstring).

    *scorer* ``"hybrid"`` switches every zone to the hybrid scorer (and embeds them all); otherwise
    only zones that score vectors or carry some are touched and scorers are left as they are.
    New vectors go through the vector map the zones name (``vector-map-<digest>.npz`` in *directory*),
    and every target zone carries the tree's centre. Nothing is written unless every changed zone is
    valid; EmbeddingError when the embedder fails, BuildError when the zones' map is missing.
    """
    if scorer not in (None, HYBRID):
        raise ValueError(f"embed_tree switches zones to {HYBRID} only, not {scorer!r}")
    if centroids < 1:
        raise ValueError(f"centroids must be at least 1, not {centroids}")
    files = read_tree(directory)
    report = EmbedReport(str(directory), embedder.model, zones=len(files))
    targets = _targets(files, scorer)
    report.zones_skipped = len(files) - len(targets)
    vmap = _tree_map(files, targets, directory, embedder.model, report)
    digest = vmap.digest if vmap is not None else ""
    vectors = _Vectors(embedder, vmap)
    originals = {f.zone.origin: f.zone for f in files}
    # a zone whose vectors went through another map (or none where the tree has one) is embedded anew
    remapped = {f.zone.origin for f in files if f.zone.origin in targets and f.zone.settings.vector_map != digest
                and uses_vectors(f.zone)}
    report.tools_remapped = sum(1 for o in remapped for t in originals[o].tools if t.vector)
    files = [ZoneFile(f.path, _forget_vectors(f.zone), f.header) if f.zone.origin in remapped else f for f in files]
    texts = _texts_to_embed(files, targets, vectors)
    progress(f"embedding {len(set(filter(vectors.covers, texts)))} texts with {vectors.model}"
             + (f" through the vector map {digest}" if digest else ""))
    vectors.embed(texts)
    zones = {f.zone.origin: (_embed_tools(f.zone, vectors, report) if f.zone.origin in targets else f.zone)
             for f in files}
    report.tools_missing -= report.tools_remapped  # forgotten above, and counted as missing by _embed_tools
    centre = _tree_centre(zones, targets, vectors.model)
    changed = []
    for f in files:
        zone = zones[f.zone.origin]
        if f.zone.origin in targets:
            zone = dataclasses.replace(zone, children=tuple(_delegation(d, zone, zones, vectors, centroids, report)
                                                            for d in zone.children),
                                       vector_centre=centre,
                                       settings=dataclasses.replace(zone.settings, vector_map=digest),
                                       # the walk it publishes names the model resolvers embed intents with,
                                       # and BM25's share in their fusion that suits it
                                       walk=dataclasses.replace(zone.walk, model=vectors.model,
                                                                fusion=embedder.fusion) if zone.walk else None)
            zone = _switch(zone, scorer, report) if scorer else zone
            if zone.settings.scorer == HYBRID:
                zone = dataclasses.replace(zone, settings=_fused_with(zone.settings, embedder.fusion))
        if zone != originals[f.zone.origin]:
            changed.append((f, zone))
    _write(changed)
    report.zones_changed = [str(f.path) for f, _ in changed]
    return report


def _fused_with(settings, fusion: float):
    """A hybrid zone's *settings* ranking tools with BM25's share *fusion*, as the client fuses them
    (``alpha``; left out when it is the default, as a build leaves it out)."""
    options = {k: v for k, v in settings.scorer_options.items() if k != "alpha"}
    if fusion != DEFAULT_WEIGHT:
        options["alpha"] = fusion
    return dataclasses.replace(settings, scorer_options=options)


def _forget_vectors(zone: Zone) -> Zone:
    """*zone* with its tools' vectors dropped, so that they are made again (through the tree's map)."""
    return dataclasses.replace(zone, tools=tuple(dataclasses.replace(t, vector=b"", vector_of="") for t in zone.tools))


def _write(changed: list[tuple[ZoneFile, Zone]]) -> None:
    """Check every changed zone reads back, then write each through a file renamed into place (a server
    polling the file sees the old version or the new one, never half of it)."""
    texts = [(f.path, dump_zone(zone, f.header)) for f, zone in changed]
    for path, text in texts:
        parse_zone(text, where=str(path))  # ZoneFileError before anything is written
    for path, text in texts:
        write_atomically(path, text)
