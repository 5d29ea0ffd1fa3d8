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
which full collections skip: once after the tree is loaded, and after each zone load or reload
(:class:`QuietLoads`), which also runs without the collector: a zone's tens of thousands of new
objects set off young collections that each scanned them, 1.5 ms each, 73 in 15 s of a flood of 30
first-time zones a second, the longest 12.6 ms, every one holding the loop. Only ``tooldns serve``
does this (the library never changes a process's collector), after a collection that clears the
garbage cycles of the start itself.

The event loop shares the interpreter's lock with the threads that load, reload and rebuild zones
(:mod:`.tree`, :mod:`.lazy`): a thread holding it gives it up when the loop has waited for it
:data:`SWITCH_INTERVAL` seconds (:func:`sys.setswitchinterval`; Python's default, 5 ms, became the p50
of every answer while a lazy tree loaded zones back to back: 5.4 ms against 0.95 ms at 0.5 ms).
"""

from __future__ import annotations

import gc
import sys
import threading

#: seconds a thread keeps the interpreter's lock once the event loop asks for it
SWITCH_INTERVAL = 0.0005


class QuietLoads:
    """A lazy tree's loads without the cycle collector (:attr:`tooldns.serving.lazy.LazyZones.load_guard`):
    a young collection before (cheap: between loads the young generations hold what queries left), none
    during, and everything alive frozen after, the zone's objects with it. Counts the loads it froze
    (and the leaf maps opened under it: :meth:`tooldns.serving.lazy.LazyZones.lookup`, on the event loop)."""

    def __init__(self) -> None:
        self.loads = 0
        self._depth = 0  # loads under way (a load may load its parent; loading threads)
        self._was_enabled = True
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._was_enabled = gc.isenabled()
                gc.collect(1)
                gc.disable()

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._depth -= 1
            self.loads += 1
            if self._depth == 0:
                gc.freeze()
                if self._was_enabled:
                    gc.enable()


def freeze_tree(tree) -> None:
    """For a process that serves *tree* (a :class:`tooldns.serving.tree.Tree`, just loaded) from now on:
    collect once, then move every object alive now out of later collections; zones load and reload
    without the collector, freezing after each (:class:`QuietLoads`). And threads give the lock back within
    :data:`SWITCH_INTERVAL`."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL)
    from .store import ZoneStore

    quiet = QuietLoads()
    ZoneStore.load_guard = quiet  # this process serves one tree: its reloads, and its lazy loads
    if tree.lazy is not None:
        tree.lazy.load_guard = quiet
