"""How much memory a loaded zone holds: what a lazy server's bound in bytes counts (``--max-loaded-memory``).

A zone's footprint is the sum of :func:`sys.getsizeof` over the objects its parsed zone and its index
reach (each once): the tools, the scorers' postings, the encoded records and the fast path's pieces.
Not counted: classes, modules, functions, and whatever is not zone data (a lock, an HTTP client, an
embedding model the process shares), which a zone refers to but does not own. The figure is what
Python allocated for the zone's objects; the process's resident memory runs higher (the allocator's
slack, the fast path's pieces: a million-tool tree's server held 1,564 MiB with 768 MiB counted,
129 MiB of it before any zone was loaded; docs/serving.md). Walking a leaf's objects takes 3 to 16 ms,
so a lazy server counts a zone read back from a pickle by the pickle's length instead
(:func:`tooldns.serving.loader.held_bytes`), and walks only the zones it loads in its own threads.

    >>> footprint(["weather", b"\\x00" * 100]) > 100
    True
"""

from __future__ import annotations

import gc
import sys
import types

#: objects a zone points at without owning them: never counted, never followed
_NOT_DATA = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
             types.CodeType, types.FrameType)
#: the modules whose instances are zone data (containers, strings, numbers, records, postings, vectors)
_DATA_MODULES = ("builtins", "array", "numpy", "tooldns", "dnslib", "collections")


def _is_data(obj) -> bool:
    if isinstance(obj, _NOT_DATA):
        return False
    module = type(obj).__module__ or ""
    return module.split(".", 1)[0] in _DATA_MODULES


def footprint(*roots) -> int:
    """Bytes of the objects *roots* reach, each counted once, zone data only (see the module's text)."""
    seen: set[int] = set()
    total = 0
    level = [r for r in roots if _is_data(r)]
    while level:  # breadth first, one level's referents asked of the collector in one call
        fresh = []
        for obj in level:
            if id(obj) not in seen:
                seen.add(id(obj))
                fresh.append(obj)
        total += sum(map(sys.getsizeof, fresh))
        level = [o for o in gc.get_referents(*fresh) if id(o) not in seen and _is_data(o)]
    return total
