"""The cycle collector and the interpreter's lock in a long-running server: loaded zones are frozen out
of the collector's full collections, and threads give the lock back to the event loop quickly.

A served tree is millions of Python objects that live as long as their zone. CPython's full
(generation 2) collection scans every tracked object, and runs whenever the objects that survived
since the last one reach a quarter of those it scanned: while a lazy server loads a large tree,
each full collection scans all the zones loaded so far. On the million-tool tree that paused the
server up to 654 ms, 16 times in its first 35 s (3.4 s in all), each pause holding every query
that arrived meanwhile.

Zones hold no reference cycles: a dropped or reloaded zone is freed by reference counting
(``tests/test_lazy.py`` checks that dropping hundreds of zones leaves no cyclic garbage). So the
objects of loaded zones can be moved to the collector's permanent generation (:func:`gc.freeze`),
which full collections skip: once after the tree is loaded, and in a lazy tree every
:data:`FREEZE_EVERY` zone loads. Only ``tooldns serve`` does this (the library never changes a
process's collector), after a collection that clears the garbage cycles of the start itself.

The event loop shares the interpreter's lock with the threads that load, reload and rebuild zones
(:mod:`.tree`, :mod:`.lazy`): a thread holding it gives it up when the loop has waited for it
:data:`SWITCH_INTERVAL` seconds (:func:`sys.setswitchinterval`; Python's default, 5 ms, became the p50
of every answer while a lazy tree loaded zones back to back: 5.4 ms against 0.95 ms at 0.5 ms).
"""

from __future__ import annotations

import gc
import sys

#: zone loads of a lazy tree between two freezes
FREEZE_EVERY = 100
#: seconds a thread keeps the interpreter's lock once the event loop asks for it
SWITCH_INTERVAL = 0.0005


class FreezeLoads:
    """A lazy tree's listener (:attr:`tooldns.serving.lazy.LazyZones.listeners`): freezes the objects
    alive every *every* zone loads, after a young collection (a full one is what it saves)."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self.every, self.loads = every, 0

    def __call__(self, resolver, loaded: bool, changed: bool) -> None:
        if not loaded:
            return
        self.loads += 1
        if self.loads % self.every == 0:
            gc.collect(1)
            gc.freeze()


def freeze_tree(tree) -> None:
    """For a process that serves *tree* (a :class:`tooldns.serving.tree.Tree`, just loaded) from now on:
    collect once, then move every object alive now out of later collections; a lazy tree does so again
    every :data:`FREEZE_EVERY` zone loads. And threads give the lock back within :data:`SWITCH_INTERVAL`."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL)
    if tree.lazy is not None:
        tree.lazy.listeners.append(FreezeLoads())
