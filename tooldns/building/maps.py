"""Leaf maps written at build time: a lazy server answers a leaf from the first time it is met.

A lazy server answers a leaf it does not hold from the leaf's map (:mod:`tooldns.serving.mapped`) in
under half a millisecond, where reading and indexing the zone file took some 110 ms for a leaf of 700
BM25 tools, and 150 ms to 2 s for a hybrid leaf (its vectors clustered for the summary its parent
reads). A hybrid leaf's map holds its vectors too, and answers every intent that comes with its
vector; the server's loading process keeps maps as it loads leaves. :class:`LeafMaps` makes them as
``tooldns build`` writes the leaves, in processes of their own beside the writing one, so that a tree
is served from them from its first query (``tooldns build --update``: the leaves it rewrote or added);
for a hybrid tree, the same processes make each leaf's centroids that its parent's delegation carries
(a million-tool root's 2,233 took three minutes of the writing process after its last leaf).
Each process indexes the zone the writing process wrote (handed over with the file's name: the zone a
server reads back from that file, :func:`~.build.zone_tool`; reading the YAML back was two fifths of a
map's making) and keeps its map in the tree's ``.snapshots/`` under the name a server looks for (the
code, the default limits, the file's path and stamp): a server run with other limits, other code, or
after the file is edited finds none there and loads the leaf as before. A file added without its zone
is read as a server reads it.

    >>> with LeafMaps("built/.snapshots") as maps:
    ...     maps.add("built/weather.tools.yaml")
    >>> maps.made
    1
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context

from ..serving.loader import fast_index, keep_map
from ..zone.limits import ZoneLimits
from ..zone.model import Zone
from ..zone.zonefile import check_utf8, parse_zone, read_zone_file, stat_stamp
from .quantized import centroids_of

#: the scorers whose leaves get a map; an llm scorer's index is not kept
KEPT_SCORERS = ("bm25", "hybrid")
#: leaves a map process may have waiting, each: the writing process waits beyond (a zone handed over is
#: held until its map is made; a million-tool tree's leaves all waiting would be its every tool)
AHEAD = 4
#: seconds between two progress lines while the last maps are made
PROGRESS_EVERY = 2.0


def map_file(path: str, snapshots: str, centroids: int = 0,
             zone: Zone | None = None) -> tuple[bool, tuple[bytes, ...] | None]:
    """The leaf map of the zone file at *path* kept in *snapshots*, as a server's loading process keeps
    it (False for a zone that has none: children, a scorer whose index cannot be kept, or one that
    cannot be written); and with *centroids*, at most that many centroids of the leaf's tool vectors,
    as its parent's delegation carries them (:func:`~.quantized.centroids_of`, the bytes ``tooldns build``
    makes in its own process), else None. *zone*, when given, is the zone the file holds (as its writer
    held it), else the file is read."""
    limits = ZoneLimits()
    if zone is None:
        data, st = read_zone_file(path, limits)
        check_utf8(data, path)
        zone = parse_zone(data, path, limits)
    else:
        st = os.stat(path)
        zone = dataclasses.replace(zone, source=path)  # as the file's reader names it
    made = None
    if centroids and not zone.children:
        made = centroids_of([t.vector for t in zone.tools if t.vector], centroids)
    if zone.children or zone.settings.scorer not in KEPT_SCORERS:  # none to make: not indexed for nothing
        return False, made
    return keep_map(snapshots, path, stat_stamp(st), limits, fast_index(zone)), made


def _one_thread() -> None:
    """A map process's numeric libraries use one thread: the processes are as many as the cores, and
    k-means's OpenMP threads, as many again in each, spun waiting for each other (a million-tool build's
    leaf centroids took four times the processor time they take alone)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


class LeafMaps:
    """Leaf maps (:func:`map_file`) made in *processes* processes (the machine's cores by
    default) as files are :meth:`add`-ed, when *wanted* (a tree of BM25 or hybrid zones); the context
    waits for them all on leaving (:attr:`made`, :attr:`failed`)."""

    def __init__(self, snapshots: str | os.PathLike, wanted: bool = True, processes: int | None = None,
                 progress=lambda s: None) -> None:
        self.snapshots, self.progress = str(snapshots), progress
        self._processes = processes or os.cpu_count() or 1
        self._pool = (ProcessPoolExecutor(self._processes, mp_context=get_context("forkserver"),
                                          initializer=_one_thread) if wanted else None)
        self._ahead: list[Future] = []  # the maps not made yet
        self._futures: dict[str, Future] = {}  # by the path of the leaf, in the order added
        self.made = self.failed = 0

    def add(self, path: str | os.PathLike, centroids: int = 0, zone: Zone | None = None) -> None:
        """Make the map of the leaf written at *path* (from *zone*, the zone written there, when given),
        if maps are wanted, and with *centroids* the centroids of its tool vectors (:meth:`centroids`)."""
        if self._pool is None or str(path) in self._futures:  # a file added again: its one map
            return
        self._ahead = [f for f in self._ahead if not f.done()]
        if len(self._ahead) >= AHEAD * self._processes:  # a zone waiting is held in memory: not the whole tree's
            wait(self._ahead, return_when=FIRST_COMPLETED)
        self._futures[str(path)] = future = self._pool.submit(map_file, str(path), self.snapshots, centroids, zone)
        self._ahead.append(future)

    def centroids(self, path: str | os.PathLike) -> tuple[bytes, ...] | None:
        """The centroids of the leaf at *path* made beside its map (waiting for them), or None: not
        asked, no maps wanted, or their making failed (the caller then makes them itself)."""
        future = self._futures.get(str(path))
        if future is None or future.exception() is not None:
            return None
        return future.result()[1]

    def warnings(self) -> list[str]:
        """What a build report says of the maps: the leaves left without one."""
        return [f"{self.failed} leaves have no map: a lazy server loads them when first asked"] \
            if self.failed else []

    def __enter__(self) -> "LeafMaps":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is None:
            return
        try:
            if exc[0] is None:
                self._wait()
        finally:
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def _wait(self) -> None:
        pending = set(self._futures.values())
        while pending:
            done, pending = wait(pending, timeout=PROGRESS_EVERY)
            for future in done:
                made = future.exception() is None and future.result()[0]
                self.made += bool(made)
                self.failed += future.exception() is not None
            self.progress(f"leaf maps: {len(self._futures) - len(pending)}/{len(self._futures)} "
                          f"zone files read")
