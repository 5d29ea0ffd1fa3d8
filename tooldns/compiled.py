"""The modules a query's answer runs through, compiled, and the import hook that keeps a compiled
module from standing in for source it was not built from.

``TOOLDNS_COMPILE=1 pip install ...`` compiles :data:`MODULES` with Cython (``setup.py``; about 4
minutes on 2 cores): the same Python source, annotations ignored, run as C calls into the interpreter
instead of bytecode, so a never-seen intent costs a server 13 to 17 % fewer instructions
(docs/performance.md, "Compiled"). A plain ``pip install`` compiles nothing (nor fetches Cython): every
module runs from its source, and the two answer alike (the test suite runs on whichever is installed).

Each compiled module lies beside its source with a stamp (``<extension file>.source-sha256``) naming
the SHA-256 of the source it was built from. Python would import an extension module before the
source of the same name, so an edited source, or one a checkout changed, would silently not run:
the hook installed at ``import tooldns`` (:func:`install`) imports the source instead whenever the
stamp does not name the source as it is now (with a warning to rebuild: ``TOOLDNS_COMPILE=1 pip
install -e .``), and always when ``TOOLDNS_PURE=1`` is set at run time.

    >>> import tooldns.compiled as c
    >>> c.status()
    {'compiled': [...], 'source': [...]}
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import select
import sys
import threading
import time
from pathlib import Path

#: the modules compiled, by their place in the package: a query's path through the server (socket,
#: wire, lookup, scoring, packing) and the codecs both sides speak
MODULES = (
    "tooldns.protocol.brief", "tooldns.protocol.budget", "tooldns.protocol.ede", "tooldns.protocol.edns",
    "tooldns.protocol.fit", "tooldns.protocol.fusion", "tooldns.protocol.hygiene", "tooldns.protocol.intent",
    "tooldns.protocol.meta", "tooldns.protocol.names", "tooldns.protocol.page", "tooldns.protocol.summary",
    "tooldns.protocol.ttlcache", "tooldns.protocol.txt", "tooldns.protocol.vector",
    "tooldns.scoring.bm25", "tooldns.scoring.sums", "tooldns.scoring.scorer", "tooldns.scoring.tokenize",
    "tooldns.scoring.wordtable",
    "tooldns.serving.fast.cpack", "tooldns.serving.fast.cquery", "tooldns.serving.fast.pack",
    "tooldns.serving.fast.path", "tooldns.serving.index", "tooldns.serving.lookup", "tooldns.serving.multizone",
    "tooldns.serving.options", "tooldns.serving.ratelimit", "tooldns.serving.reply", "tooldns.serving.resolver",
    "tooldns.serving.server", "tooldns.serving.wire",
)

#: modules that run compiled only: imported from their source they raise ImportError, and the one
#: module that chooses them runs the Python references instead: :mod:`tooldns.scoring.bm25` for the
#: scorer's (:mod:`tooldns.scoring.sums`: C loops, or numpy; :mod:`tooldns.scoring.wordtable`: words
#: looked up in C, or a dict), :mod:`tooldns.serving.fast.path` for the fast path's
#: (:mod:`tooldns.serving.fast.cquery`: a query and its intent read with C integers, or Python's;
#: :mod:`tooldns.serving.fast.cpack`: whole referrals and answers written in C, or record by record)
COMPILED_ONLY = ("tooldns.scoring.sums", "tooldns.scoring.wordtable", "tooldns.serving.fast.cpack",
                 "tooldns.serving.fast.cquery")

#: what a compiled module's stamp is named: its extension file's name and this
STAMP_SUFFIX = ".source-sha256"
#: set (to anything but "" or "0") at install time, :data:`MODULES` are compiled (Cython is fetched
#: for the build then, and only then: ``build_backend.py``)
COMPILE_VARIABLE = "TOOLDNS_COMPILE"
#: set (to anything but "" or "0") at run time, every module runs from its source; at install time,
#: nothing is compiled even with ``TOOLDNS_COMPILE`` set
PURE_VARIABLE = "TOOLDNS_PURE"


#: items a compiled loop that builds an index goes through between two :func:`turn` calls
TURN_EVERY = 64


#: the longest a thread working in turns keeps the interpreter's lock while no watched socket has
#: anything waiting (seconds): what an event loop busy elsewhere than its sockets (sending a reply,
#: a timer due) may wait for it
TURN_AT_LEAST = 0.0005


class _Watched:
    """The sockets of the servers this process runs (:func:`watch`): a turn is given when one of them
    has a query waiting, which its event loop is then about to read."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}  # fd -> servers watching it
        self.poll = select.poll()
        self.lock = threading.Lock()
        self.last = 0.0  # when the last turn was given


_watched = _Watched()


def watch(fd: int) -> None:
    """Have :func:`turn` give the lock whenever socket *fd* (a server's) has something to read."""
    with _watched.lock:
        _watched.fds[fd] = _watched.fds.get(fd, 0) + 1
        _watched.poll.register(fd, select.POLLIN)


def unwatch(fd: int) -> None:
    """Undo one :func:`watch` of *fd* (before the socket is closed)."""
    with _watched.lock:
        left = _watched.fds.pop(fd, 0) - 1
        if left > 0:
            _watched.fds[fd] = left
        else:
            try:
                _watched.poll.unregister(fd)
            except KeyError:
                pass


def _nothing_waits() -> bool:
    """Whether every watched socket is quiet and a turn was given less than :data:`TURN_AT_LEAST` ago;
    False when no socket is watched (no server here: a turn, as for any thread that may wait)."""
    if not _watched.fds or time.perf_counter() - _watched.last >= TURN_AT_LEAST:
        return False
    try:
        return not _watched.poll.poll(0)
    except (OSError, RuntimeError):  # polled by another thread at once: give the turn
        return False


def turn() -> None:
    """Give the interpreter's lock to a thread that waits for it (the event loop, when a zone is
    indexed or read back in a work thread). Compiled code never gives it back by itself: it does not
    run the bytecode loop that checks whether another thread asked, so a compiled loop over a
    10,000-tool zone held the lock for its whole length (a reload's p99 274 ms against 26 ms from
    source). ``time.sleep(0)`` lets go of the lock and takes it back, 50 to 80 us later (the kernel's
    timer slack): time the waiting thread needs to wake and take it. Called every :data:`TURN_EVERY`
    items, it is given only when a server's socket has a query waiting (:func:`watch`) or
    :data:`TURN_AT_LEAST` has gone by: with nobody waiting, a zone met for the first time was read
    back and packed a third slower for nothing."""
    if _nothing_waits():
        return
    time.sleep(0)
    _watched.last = time.perf_counter()


class Turns:
    """:func:`turn` at most every *seconds* of work: called between small steps (the pieces of an
    index read back, :mod:`tooldns.serving.loader`), it gives the lock away only once the steps since
    the last turn took that long. A turn costs more than a small step (the lock given to a waiting
    thread must be waited for again): one after each of a zone's 30 pieces made its loads 60 % slower."""

    def __init__(self, seconds: float = 0.0002) -> None:
        self.seconds = seconds
        self._last = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._last >= self.seconds:
            turn()
            self._last = time.perf_counter()


def _set(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0")


def pure() -> bool:
    """Whether ``TOOLDNS_PURE`` asks for the source."""
    return _set(PURE_VARIABLE)


def compile_requested() -> bool:
    """Whether an install is to compile :data:`MODULES`: ``TOOLDNS_COMPILE`` set, ``TOOLDNS_PURE`` not."""
    return _set(COMPILE_VARIABLE) and not pure()


def source_digest(path: str | Path) -> str:
    """The SHA-256 (hex) of the source file *path*: what a stamp names."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _extension(directory: str, leaf: str) -> str | None:
    """The extension module *leaf* in *directory*, if one was built there."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = os.path.join(directory, leaf + suffix)
        if os.path.exists(candidate):
            return candidate
    return None


def _stale(extension: str, source: str) -> bool:
    """Whether *extension* was built from other source than *source* (or its stamp is missing)."""
    try:
        stamp = Path(extension + STAMP_SUFFIX).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return True
    return stamp != source_digest(source)


class SourceFinder:
    """The import hook (a meta path finder): for a module of :data:`MODULES` with a compiled twin
    that may not run, the spec of its source; for every other import, nothing (the usual finders)."""

    def find_spec(self, fullname: str, path=None, target=None):
        del target
        if fullname not in MODULES or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            extension = _extension(directory, leaf)
            if extension is None or not os.path.exists(source):
                continue
            if pure():
                return importlib.util.spec_from_file_location(fullname, source)
            if _stale(extension, source):
                import warnings

                warnings.warn(f"{fullname}: the compiled module was built from other source than "
                              f"{source}; running the source (rebuild: {COMPILE_VARIABLE}=1 pip install -e .)", RuntimeWarning, stacklevel=2)
                return importlib.util.spec_from_file_location(fullname, source)
            return None
        return None


def install() -> None:
    """Put :class:`SourceFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())


def status() -> dict[str, list[str]]:
    """Which of :data:`MODULES` run compiled and which from source (importing them)."""
    out: dict[str, list[str]] = {"compiled": [], "source": []}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a module that runs compiled only (COMPILED_ONLY): its callers' source ways run
            if name not in COMPILED_ONLY:
                raise
            out["source"].append(name)
            continue
        loader = getattr(module, "__loader__", None)
        out["compiled" if isinstance(loader, importlib.machinery.ExtensionFileLoader) else "source"].append(name)
    return out
