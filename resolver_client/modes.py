"""Search modes: how wide a resolution walks and how much it returns (after the A2X registry).

One name picks a whole set of walk settings, so an agent says what it wants rather than tuning
K per depth:

* ``get_one``: the single best tool, by the narrowest walk (K = 1 at every step, one tool asked
  of the leaf): fewest queries, one tool back.
* ``get_important``: the best few (K = 3 at every step, 3 tools from each leaf, every tool found
  returned). The default, and exactly what the resolver did before modes existed.
* ``get_all``: every relevant tool, for agents that plan over many. Wider walks (K = 10 at the
  root, 5 at every step below) and more tools asked of each leaf (16); the tools back are those
  scoring at least :data:`ALL_FLOOR` (0.3) x the best score found (the relevance floor; tools
  without a score are kept). Built trees score tools with the whole catalog's BM25 statistics
  (``docs/building.md``), so scores compare across leaves and one floor over all of them holds;
  over hand-written zones without shared statistics (the demo tree) it can drop the tools of a
  second topic that happened to score lower.
  The floor never drops a leaf's best three tools on a path of best threes (``Walk.floor_spares``),
  so ``get_all`` returns every tool ``get_important`` finds by its built-in K of 3, however weak
  (the README's "plan a trip: flights, hotel, weather" lost one to the floor before: 5 tools
  against 6), and those of the wider walk above the floor. Below the root's children its walk is
  bounded by the resolver's default beam, 10 zones a depth here (:func:`.walk.auto_beam`;
  ``Resolver(beam=None)`` for none).

Pruning: servers leave out children and tools scoring below their ``prune_ratio`` x the best
(0.25 in built zones). The intent option has no field to ask for less, and none is needed: what
narrows a walk is K, and ``get_all`` asks a larger one; in a BM25 tree, tools pruned in a leaf
score below 0.25 x that leaf's best, so below the 0.3 floor anyway. Measured on 300 ToolRet dev queries (BM25 tree),
serving the same tree with no pruning at all raised ``get_all``'s recall over everything
returned from 0.836 to 0.839, at 11.0 DNS queries per resolution instead of 8.3.

Explicit ``k``, ``leaf_k`` or ``top`` given to :meth:`Resolver.resolve` (``--k``, ``--leaf-k``, ``--top``
of ``tooldns-resolve``) override the mode's own.

    >>> settings_for("get_one")
    ModeSettings(name='get_one', k=1, leaf_k=1, top=1, floor=None)
    >>> check_mode("get_some")
    Traceback (most recent call last):
    resolver_client.exceptions.ResolverError: unknown search mode 'get_some': choose one of get_one, get_important, get_all
"""

from __future__ import annotations

from dataclasses import dataclass

from .exceptions import ResolverError

GET_ONE = "get_one"
GET_IMPORTANT = "get_important"
GET_ALL = "get_all"
#: every mode, narrowest first
MODES = (GET_ONE, GET_IMPORTANT, GET_ALL)
DEFAULT_MODE = GET_IMPORTANT

#: get_all keeps tools scoring at least this share of the best score found (chosen on 300 ToolRet
#: dev queries: 0.3 kept 30 tools a query for recall 0.836 over them; 0.4, 19 for 0.805; none, 59 for 0.850)
ALL_FLOOR = 0.3


@dataclass(frozen=True)
class ModeSettings:
    """What a mode asks of the walk: K per depth (the last repeats), tools per leaf (None: K),
    how many tools come back (None: all), and the relevance floor (share of the best score)."""

    name: str
    k: int | tuple[int, ...]
    leaf_k: int | None
    top: int | None
    floor: float | None


_SETTINGS = {
    GET_ONE: ModeSettings(GET_ONE, k=1, leaf_k=1, top=1, floor=None),
    GET_IMPORTANT: ModeSettings(GET_IMPORTANT, k=3, leaf_k=None, top=None, floor=None),
    GET_ALL: ModeSettings(GET_ALL, k=(10, 5), leaf_k=16, top=None, floor=ALL_FLOOR),
}


def check_mode(mode: object) -> str:
    """*mode* itself when it names a search mode; :class:`ResolverError` saying which exist if not."""
    if not isinstance(mode, str) or mode not in _SETTINGS:
        raise ResolverError(f"unknown search mode {mode!r}: choose one of {', '.join(MODES)}")
    return mode


def settings_for(mode: object) -> ModeSettings:
    """The walk settings of search mode *mode* (checked with :func:`check_mode`)."""
    return _SETTINGS[check_mode(mode)]
