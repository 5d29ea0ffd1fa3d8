"""How much memory a loaded zone holds: what a lazy server's bound in bytes counts (``--max-loaded-memory``).

A zone's footprint (:func:`zone_footprint`) is the sum of :func:`sys.getsizeof` over the objects its
parsed zone and its index reach (each once): the tools, the scorers' postings, the encoded records and
the fast path's pieces the index holds. Not counted: classes, modules, functions, whatever is not zone
data (a lock, an HTTP client), and what the index leaves out when pickled (its signer, the intent
embedder the process shares), which a zone refers to but does not own. The figure is what Python
allocated for the zone's objects; the process's resident memory runs higher (the allocator's slack,
the resolver the server makes of each index and its packed zone: a million-tool tree's server held
1,564 MiB with 768 MiB counted, 129 MiB of it before any zone was loaded; docs/serving.md). Walking
a leaf's objects takes 3 to 16 ms, so the loading process walks what it pickles, read back, once, and
writes the count in the pickle's header (:func:`tooldns.serving.loader.held_bytes`): a lazy server
walks only the zones it loads in its own threads.

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
#: objects asked of the collector for their referents in one call at most: a large leaf's level of
#: objects in one C call would hold the interpreter's lock for the whole of it
CHUNK = 2000
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
    while level:  # breadth first, a level's referents asked of the collector CHUNK objects a call
        fresh = []
        for obj in level:
            if id(obj) not in seen:
                seen.add(id(obj))
                fresh.append(obj)
        level = []
        for start in range(0, len(fresh), CHUNK):
            chunk = fresh[start:start + CHUNK]
            total += sum(map(sys.getsizeof, chunk))
            level += [o for o in gc.get_referents(*chunk) if id(o) not in seen and _is_data(o)]
    return total


def zone_footprint(zone, index) -> int:
    """Bytes *zone* (as its file says) and its *index* hold of their own: the index as it is pickled."""
    return footprint(zone, index.__getstate__())
