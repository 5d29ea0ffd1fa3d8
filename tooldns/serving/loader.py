"""Zone files read and indexed in another process, and indexes kept on disk to be read back in one go.

Parsing a zone file's YAML and indexing it are pure Python: in a thread of the serving process they
share the interpreter's lock with the event loop, which then answers late (a leaf of 100 tools:
about 28 ms of work, of which the loop gets its turns only every switch interval). A
:class:`ZoneLoader` does that work in a process of its own (``--load-processes``, 1 by default: the
zones a lazy server loads, and every reload of an edited file) and hands back the index pickled,
through a file: the serving process only reads it and unpickles it, about 1 ms for a built leaf
(180 ms for a leaf of 10,000 tools), in pieces of a few tenths of a millisecond, between which the
event loop gets the lock (:func:`pickle_in_pieces`).

With a snapshot directory (``--snapshots DIR``; a tree written by ``tooldns build`` has one,
``.snapshots/``, used when nothing else is said), the loading process also keeps each index it
made there, named by a digest of the file's bytes, of the code that reads them and of the limits:
a zone loaded again (dropped and asked again, the next start of the server) is read back whole,
unparsed, by the serving process itself (the file read and hashed with the interpreter's lock let
go; no round trip to the loading process), and answers in a few milliseconds even the first time
it is met. An edited file has another digest: its old snapshot is never used again (``rm -r DIR``
at any time frees the space).

A snapshot is code to :mod:`pickle`, as ``__pycache__`` is to Python: it is read only from a
directory the server's own user owns and nobody else may write to, and only when the snapshot file
is so too (as OpenSSH's StrictModes); otherwise the directory is not used, and the log says why.
An index that cannot be pickled (an ``llm`` scorer's) is made in the loading thread too.

    >>> loader = ZoneLoader(processes=1, snapshots="built/.snapshots")
    >>> loader.load("built/weather.tools.yaml", ZoneLimits()).index.origin   # None: load it yourself
    'weather.tools.'
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
import os
import pickle
import signal
import stat
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from ..compiled import Turns
from ..exceptions import ZoneFileError
from ..zone.limits import ZoneLimits
from ..zone.model import Zone
from ..zone.zonefile import check_utf8, parse_zone, read_zone_file, stat_stamp, write_atomically
from .fast.pack import routes_of, tool_pieces
from .footprint import footprint
from .index import ZoneIndex
from .mapped import map_bytes, map_name

log = logging.getLogger(__name__)

#: the name of the snapshot directory ``tooldns build`` makes beside the zone files it writes
SNAPSHOT_DIR = ".snapshots"
#: bumped when what a snapshot holds changes shape beyond what the code digest sees
FORMAT = 10
#: tools (and children) pickled a piece, and items a piece of a larger list or dictionary (postings,
#: texts): each piece is unpickled in one call of its own, which holds the interpreter's lock, at most
#: about 0.6 ms (a tool takes 20 to 40 us, a posting 0.2); smaller pieces cost more in all (a built
#: leaf of about 200 tools: 1.06 ms in 11 pieces, 1.35 ms in 82 of 8 tools and 64 items)
TOOLS_A_PIECE = 16
ITEMS_A_PIECE = 1000
#: lists, tuples and dictionaries longer than this are pickled apart from what holds them (in parts of
#: about :data:`ITEMS_A_PIECE` items): a leaf of 69 tools whose postings and texts were all in the
#: index's own piece took 2.3 ms in that one call
SPLIT_ABOVE = 256
#: the sources whose classes a snapshot holds, and the layout of a leaf map: a change to any makes every
#: snapshot and map stale
_PICKLED_SOURCES = ("zone", "scoring", "protocol", "serving/index.py", "serving/summaries.py", "serving/fast/pack.py",
                    "serving/footprint.py", "serving/mapped.py", "embedding")


@dataclass(frozen=True)
class Loaded:
    """What a loading process gives back: the zone as its file says, its index, the stamp of the
    file it read (:func:`~tooldns.zone.zonefile.stat_stamp`) and about how many bytes of memory the
    zone and its index hold (:func:`held_bytes` of what they were read back from)."""

    zone: Zone
    index: ZoneIndex
    stamp: tuple[int, int, int]
    size: int


def held_bytes(pickled) -> int:
    """How many bytes the objects unpickled from *pickled* (:func:`pickle_in_pieces`) hold
    (:func:`~tooldns.serving.footprint.zone_footprint`), as walked when it was pickled: read from its
    header, nothing walked again."""
    return _header(pickled)[1]


_DIGEST: str | None = None


def code_digest() -> str:
    """A digest of the package's version, Python's, :data:`FORMAT` and the sources of what snapshots
    hold: a snapshot made by other code is never read."""
    global _DIGEST
    if _DIGEST is None:
        from .. import __version__

        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256(f"{FORMAT} {__version__} {sys.version}".encode())
        for part in _PICKLED_SOURCES:
            for source in sorted((root / part).rglob("*.py")) if (root / part).is_dir() else [root / part]:
                h.update(source.name.encode())
                h.update(source.read_bytes())
        _DIGEST = h.hexdigest()[:16]
    return _DIGEST


class _Refs(pickle.Pickler):
    """Pickles an object, each object of an earlier piece as a reference (its number)."""

    def __init__(self, file, known: dict[int, int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.known = known

    def persistent_id(self, obj):
        return self.known.get(id(obj))


class _Bulky(_Refs):
    """Pickles an object only to find the lists, tuples and dictionaries in it to be pickled apart
    (:data:`SPLIT_ABOVE`), in the order met; objects of earlier pieces are not looked into."""

    def __init__(self, known: dict[int, int]) -> None:
        super().__init__(io.BytesIO(), known)
        self.found: dict[int, object] = {}

    def persistent_id(self, obj):
        number = self.known.get(id(obj))
        if number is None and _splittable(obj) and len(obj) > SPLIT_ABOVE:
            self.found.setdefault(id(obj), obj)
        return number


class _Globals(_Refs):
    """Pickles an object only to find the classes and functions its pickle names: pickled once, in a
    piece of their own, each later piece refers to them by number instead of looking each up by
    module and name again (a fifth of the time a small zone took to unpickle)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), {})
        self.found: dict[int, object] = {}

    def persistent_id(self, obj):
        if isinstance(obj, (type, types.FunctionType)) or (  # a module's builtin, not a bound method
                isinstance(obj, types.BuiltinFunctionType) and isinstance(obj.__self__, (types.ModuleType, type(None)))):
            self.found.setdefault(id(obj), obj)
        return None


def _splittable(obj) -> bool:
    """Lists, tuples and dictionaries, but not a list that pickles itself packed (a posting list:
    two bytes objects, however long)."""
    if isinstance(obj, list):
        return type(obj).__reduce__ is list.__reduce__
    return isinstance(obj, dict) or type(obj) is tuple


class _Unrefs(pickle.Unpickler):
    """Unpickles a piece, each reference to an earlier piece's object by its number."""

    def __init__(self, data, objects: list) -> None:
        super().__init__(io.BytesIO(data))
        self.objects = objects

    def persistent_load(self, number: int):
        return self.objects[number]


def pickle_in_pieces(zone: Zone, index: ZoneIndex) -> bytes:
    """*zone* and *index* pickled as pieces, each unpickled by one call of its own
    (:func:`unpickle_pieces`): the classes and functions it names; the tools a few at a time; every
    list, tuple or dictionary longer than :data:`SPLIT_ABOVE` (postings, texts), what it holds of
    the others first, in parts of about :data:`ITEMS_A_PIECE` items (counted with the lists in them)
    then joined; the zone and the index's state last. An object of an earlier piece is referred to by
    its number. The unpickling thread gives the interpreter's lock to the event loop between pieces
    once it has held it a while (:class:`~tooldns.compiled.Turns`): one call over a 10,000-tool
    leaf's index held it 180 ms. Laid out as a header (its length in 8 bytes, then the pieces' kinds
    and lengths and the bytes the zone and index read back hold, pickled) and the pieces one after the
    other, each read where it lies. The bytes held are walked here (:mod:`.footprint`), once, over the
    pieces read back: a lazy server counts them (:func:`held_bytes`) without walking the zone itself."""
    known: dict[int, int] = {}
    alive: list = []  # what was numbered stays alive, so that no other object takes its id()
    kinds: list[tuple[str, int, int]] = []  # ("obj", length, members) or ("join", parts, 0)
    body = io.BytesIO()

    def number(obj) -> None:
        if id(obj) in known:  # numbered twice, the numbers would part from the unpickler's list
            raise ValueError(f"{type(obj).__name__} pickled twice")
        known[id(obj)] = len(known)
        alive.append(obj)

    def piece(obj, members=()) -> None:
        start = body.tell()
        _Refs(body, known).dump(obj)
        kinds.append(("obj", body.tell() - start, len(members)))
        number(obj)
        for member in members:
            number(member)

    state = index.__getstate__()
    (names := _Globals()).dump((zone, state))
    piece(named := tuple(names.found.values()), named)
    for group in (zone.tools, zone.children):
        for start in range(0, len(group), TOOLS_A_PIECE):
            part = tuple(group[start:start + TOOLS_A_PIECE])
            piece(part, part)
    scout = _Bulky(known)
    scout.dump((zone, state))

    splitting: set[int] = set()

    def split(container) -> None:  # what it holds of the others first: the outer refer to them
        splitting.add(id(container))
        for inner in _held(container, scout.found, set()):
            if id(inner) not in known and id(inner) not in splitting:
                split(inner)
        parts = _parts(container, known)
        piece(_shell(container))
        for part in parts:
            piece(part)
        kinds.append(("join", len(parts), 0))
        number(container)

    for container in reversed(scout.found.values()):
        if id(container) not in known:
            split(container)
    piece((zone, state))
    return _laid_out(kinds, body.getvalue())


def _no_turn() -> None:
    """No turn for another thread: a loading process has no event loop to give the lock to."""


def _laid_out(kinds: list[tuple[str, int, int]], pieces: bytes) -> bytes:
    """The header (the *kinds* of the *pieces* and the bytes they hold read back) and the pieces: what
    the zone and its index's state hold read back (postings packed) walked once here, not by the server."""
    held = footprint(*_unpickled(kinds, memoryview(pieces), _no_turn))
    head = pickle.dumps((kinds, held), protocol=pickle.HIGHEST_PROTOCOL)
    return len(head).to_bytes(8, "little") + head + pieces


class _TupleShell:
    """Where a tuple pickled in parts is to be joined (a tuple has no empty shell of its own: ``()`` is
    one object, which two tuples would share, and their numbers with it)."""


def _shell(container):
    """*container* without its items (a list's or dictionary's subclass keeps its attributes)."""
    if type(container) is tuple:
        return _TupleShell()
    shell = copy.copy(container)
    shell.clear()
    return shell


def _held(container, found: dict[int, object], seen: set[int]):
    """The containers of *found* that *container* holds, directly or through lists, tuples and
    dictionaries not in *found* (a container held by two others is then pickled before both)."""
    for value in (container.values() if isinstance(container, dict) else container):
        if not _splittable(value) or id(value) in seen:
            continue
        seen.add(id(value))
        if id(value) in found:
            yield value
        else:
            yield from _held(value, found, seen)


def _parts(container, known: dict[int, int]) -> list:
    """*container*'s items in lists (a dictionary's: dictionaries) of about :data:`ITEMS_A_PIECE`
    items, each counted with the items of a list or dictionary in it not pickled already (a posting
    list pickled packed, with its pairs)."""
    items = list(container.items()) if isinstance(container, dict) else list(container)
    parts, start, weight = [], 0, 0
    for i, item in enumerate(items):
        value = item[1] if isinstance(container, dict) else item
        sized = isinstance(value, (dict, list, tuple)) or hasattr(value, "packed")  # a posting list read back
        weight += 1 + (len(value) if sized and id(value) not in known else 0)
        if weight >= ITEMS_A_PIECE or i == len(items) - 1:
            part = items[start:i + 1]
            parts.append(dict(part) if isinstance(container, dict) else part)
            start, weight = i + 1, 0
    return parts


def _header(data) -> tuple[list[tuple[str, int, int]], int]:
    """The header of what :func:`pickle_in_pieces` pickled: the pieces' kinds, the bytes held read back."""
    size = int.from_bytes(data[:8], "little")
    header = pickle.loads(memoryview(data)[8:8 + size])
    if not (isinstance(header, tuple) and len(header) == 2 and isinstance(header[0], list) and isinstance(header[1], int)):
        raise ValueError("not a pickled zone and index")
    return header


def piece_kinds(data) -> list[tuple[str, int, int]]:
    """The pieces of what :func:`pickle_in_pieces` pickled, from its header: each piece's kind, its
    length (or the parts it joins) and the members it numbers."""
    return _header(data)[0]


def unpickle_pieces(data) -> tuple[Zone, ZoneIndex]:
    """What :func:`pickle_in_pieces` pickled (bytes, or a buffer): the zone and its index."""
    view = memoryview(data)
    # the interpreter's lock to whoever waits for it (the event loop) between pieces
    zone, state = _unpickled(piece_kinds(view), view[8 + int.from_bytes(view[:8], "little"):], Turns())
    index = ZoneIndex.__new__(ZoneIndex)
    index.__setstate__(state)
    return zone, index


def _unpickled(kinds: list[tuple[str, int, int]], view: memoryview, turns: Callable[[], None]) -> tuple[Zone, dict]:
    """The zone and its index's state (:meth:`ZoneIndex.__getstate__`) pickled as the pieces *kinds*
    says, laid one after the other in *view*."""
    at, objects = 0, []
    for kind, length, members in kinds:
        turns()
        if kind == "obj":
            obj = _Unrefs(view[at:at + length], objects).load()
            at += length
            objects.append(obj)
            objects.extend(obj if members else ())
        else:  # "join": a shell and its *length* parts, one container again
            objects.append(_joined(objects, len(objects) - length - 1, length, turns))
    last = objects[-1] if objects else None
    if not (isinstance(last, tuple) and len(last) == 2 and isinstance(last[0], Zone) and isinstance(last[1], dict)):
        raise ValueError("not a pickled zone and index")
    return last


def _joined(objects: list, at: int, parts: int, turns: Callable[[], None]):
    """The shell at ``objects[at]`` filled with the *parts* after it, each part let go of once added
    (freed one at a time, not all at the end, which held the lock 10 ms for a 10,000-tool leaf)."""
    shell = objects[at]
    if isinstance(shell, _TupleShell):
        joined = tuple(item for part in objects[at + 1:at + 1 + parts] for item in part)
        objects[at + 1:at + 1 + parts] = [None] * parts
        return joined
    add = shell.update if isinstance(shell, dict) else shell.extend
    for i in range(at + 1, at + 1 + parts):
        add(objects[i])
        objects[i] = None
        turns()
    return shell


def unsafe_directory(path: str | os.PathLike) -> str | None:
    """Why *path* may not hold snapshots (not a directory, owned by another user, writable by others),
    None when it may."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot use it: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return _unsafe(st)


def _unsafe(st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not this server's user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by its group or by others"
    return None


def _snapshot_name(data: bytes, limits: ZoneLimits) -> str:
    h = hashlib.sha256(code_digest().encode())
    h.update(repr(limits).encode())
    h.update(data)
    return h.hexdigest()[:40] + ".pickle"


def open_trusted(path: Path):
    """The snapshot (or leaf map) at *path* opened for reading, when it is one this server may trust (a
    regular file of its own user that nobody else may write to); None otherwise (not there: nothing said)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    fh = os.fdopen(fd, "rb")
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode) or _unsafe(st) is not None:
        log.warning("%s: not read (%s)", path, _unsafe(st) or "not a regular file")
        fh.close()
        return None
    return fh


def _read_snapshot(path: Path) -> bytes | None:
    fh = open_trusted(path)
    if fh is None:
        return None
    with fh:
        return fh.read()  # the interpreter's lock let go while the file is read


def _write_snapshot(path: Path, blob: bytes) -> bool:
    """Keep *blob* at *path*; False when it cannot be (a full disk: the zone is served all the same)."""
    try:
        write_atomically(path, blob, mode=0o600, durable=False)
    except OSError as exc:
        log.warning("%s: snapshot not written (%s)", path, exc.strerror)
        return False
    return True


def map_path(snapshots: str | os.PathLike, path: str, stamp, limits: ZoneLimits) -> Path:
    """Where the leaf map (:mod:`.mapped`) of zone file *path* in version *stamp* is kept."""
    return Path(snapshots) / map_name(code_digest(), limits, path, stamp)


def keep_map(snapshots: str | os.PathLike, path: str, stamp, limits: ZoneLimits, index: ZoneIndex | None) -> bool:
    """Whether the leaf map of zone file *path* in version *stamp* is kept in *snapshots*: made of
    *index* (:func:`~.mapped.map_bytes`) when it is not yet and *index* is given; a zone that has none
    (not a leaf ranked by BM25, or by BM25 and vectors) or a map that cannot be written: False, and the
    zone is loaded as before."""
    where = map_path(snapshots, path, stamp, limits)
    if where.exists():
        return True
    if index is None:
        return False
    try:
        data = map_bytes(index)
    except Exception:  # the zone is served all the same, loaded as before
        log.exception("%s: its leaf map cannot be made", path)
        return False
    return data is not None and _write_snapshot(where, data)


def fast_index(zone: Zone) -> ZoneIndex:
    """*zone* indexed, with what the fast path answers with made now rather than at its first query
    (each tool's pieces, the names that ask for a search): by a loading process, or a build making
    leaf maps. When the zone holds what they cannot encode, none: the full path answers for it."""
    index = ZoneIndex(zone)
    try:
        index.packed_tools, index.packed_routes = tool_pieces(index), routes_of(index)
    except ValueError:
        index.packed_tools = index.packed_routes = None
    return index


def prepare(path: str, limits: ZoneLimits, snapshots: str | None,
            spool: str) -> tuple[tuple[int, int, int], str, bool, bool] | None:
    """Read, check and index the zone file at *path*: the stamp of the file read, the file holding
    the zone and its index pickled in pieces (:func:`pickle_in_pieces`), whether that file is a
    snapshot (else a file of *spool*, for the caller to remove once read) and whether it was one
    already (read back, not made); or None when the caller should do it
    itself (an index that cannot be pickled). Raises :class:`ZoneFileError` for a file that cannot be
    served. What a loading process runs; from *snapshots* (a directory checked by
    :func:`unsafe_directory`) when it holds this file's index. The pieces go through a file, not the
    pipe to the server: a file is read without the interpreter's lock, a pipe's bytes copied with it."""
    data, st = read_zone_file(path, limits)
    stamp = stat_stamp(st)
    saved = Path(snapshots) / _snapshot_name(data, limits) if snapshots else None
    if saved is not None and (found := open_trusted(saved)) is not None:
        with found:
            if not keep_map(snapshots, path, stamp, limits, None):  # a file touched since: its map made again
                keep_map(snapshots, path, stamp, limits, unpickle_pieces(found.read())[1])
        return stamp, str(saved), True, True
    check_utf8(data, path)
    zone = parse_zone(data, path, limits)
    index = fast_index(zone)
    index.published_rr()  # made here, not by the serving process when the parent first asks
    try:
        blob = pickle_in_pieces(zone, index)
    except (TypeError, AttributeError, pickle.PicklingError):  # an llm scorer's client and its thread
        index.close()
        return None
    if saved is not None and _write_snapshot(saved, blob):
        keep_map(snapshots, path, stamp, limits, index)
        return stamp, str(saved), True, False
    fd, spooled = tempfile.mkstemp(dir=spool, suffix=".pickle")
    with os.fdopen(fd, "wb") as fh:
        fh.write(blob)
    return stamp, spooled, False, False


#: how much less a loading process is given the processor than its server (``nice``) where it cannot
#: run only when nothing else would (``SCHED_IDLE``, Linux): on a machine with few cores, parsing must
#: not take the core the event loop answers on
NICENESS = 10


def _start_loading_process() -> None:
    """A loading process ignores Ctrl-C and SIGHUP (its server's), dies with its server, and runs only
    when the processor has nothing else to do (``SCHED_IDLE``: the server, woken by a query, takes the
    core from it at once; a niced process, :data:`NICENESS`, kept it up to a few milliseconds)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(NICENESS)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ZoneLoader:
    """Loads zone files in *processes* processes of its own (started when first needed, started
    again if one dies), keeping indexes in *snapshots* when that directory may hold them."""

    def __init__(self, processes: int = 1, snapshots: str | os.PathLike | None = None) -> None:
        if processes < 1:
            raise ValueError(f"load processes must be at least 1, not {processes}")
        self.processes = processes
        self.snapshots: str | None = None
        if snapshots is not None:
            why = unsafe_directory(snapshots)
            if why is None:
                self.snapshots = os.fspath(snapshots)
            else:
                log.warning("%s: snapshots not used (%s)", snapshots, why)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        #: where loading processes leave what they made when it is kept in no snapshot (removed once read)
        self._spool: tempfile.TemporaryDirectory | None = None
        #: loads done in a loading process, of which read back from snapshots, and loads it left to
        #: the caller (llm scorers, spoiled snapshots, a process lost)
        self.loaded = self.from_snapshots = self.declined = 0

    def _executor(self) -> tuple[ProcessPoolExecutor, str]:
        with self._lock:
            if self._spool is None:
                self._spool = tempfile.TemporaryDirectory(prefix="tooldns-load-", ignore_cleanup_errors=True)
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=get_context("forkserver"),
                                                 initializer=_start_loading_process)
            return self._pool, self._spool.name

    def load(self, path: str, limits: ZoneLimits | None) -> Loaded | None:
        """The zone file at *path* loaded in a loading process; None when the caller is to load it
        itself (an index that cannot be pickled, a loading process lost or failing). Raises
        :class:`ZoneFileError` when the file cannot be served. Blocks: call it off the event loop.
        A file whose snapshot is kept is read back here, without asking the process (the file read
        and hashed with the interpreter's lock let go)."""
        limits = limits or ZoneLimits()
        if self.snapshots is not None:
            found = self._read_back(path, limits)
            if found is not None:
                return found
        pool, spool = self._executor()
        try:
            made = pool.submit(prepare, path, limits, self.snapshots, spool).result()
        except BrokenProcessPool:  # a loading process killed: the next load starts new ones
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            log.warning("%s: a loading process died; loaded in the server", path)
            self.declined += 1
            return None
        except ZoneFileError:
            raise
        except Exception as exc:  # its spool not writable, say
            log.warning("%s: the loading process failed (%s); loaded in the server", path, exc)
            self.declined += 1
            return None
        if made is None:
            self.declined += 1
            return None
        stamp, where, kept, read_back = made
        try:
            if kept:
                pickled = _read_snapshot(Path(where))
            else:
                pickled = Path(where).read_bytes()  # the interpreter's lock let go while the file is read
                os.unlink(where)
            if pickled is None:
                raise ValueError("gone")
            zone, index = unpickle_pieces(pickled)
        except Exception as exc:  # a snapshot cut short or spoiled on the disk: loaded in the server
            what = "its snapshot" if kept else "what the loading process made"
            log.warning("%s: %s cannot be read (%s); loaded in the server", path, what, exc)
            self.declined += 1
            return None
        return self._handed(zone, index, stamp, pickled, read_back)

    def _handed(self, zone: Zone, index: ZoneIndex, stamp, pickled: bytes, read_back: bool) -> Loaded:
        """What a load gives the caller, counted (from a snapshot or made anew), with the bytes it holds."""
        self.loaded += 1
        self.from_snapshots += read_back
        return Loaded(zone, index, stamp, held_bytes(pickled))

    def _read_back(self, path: str, limits: ZoneLimits) -> Loaded | None:
        """Zone file *path* read back from its snapshot, in this thread: a round trip to the loading
        process saved (0.5 ms of a zone's first answer); None when it has none (or the file cannot be
        read: the loading process says why) or the snapshot cannot be read (the process then makes it)."""
        try:
            data, st = read_zone_file(path, limits)
        except (OSError, ZoneFileError):
            return None
        saved = Path(self.snapshots) / _snapshot_name(data, limits)
        pickled = _read_snapshot(saved)
        if pickled is None:
            return None
        try:
            zone, index = unpickle_pieces(pickled)
        except Exception as exc:  # cut short or spoiled on the disk: made again by the loading process
            log.warning("%s: its snapshot cannot be read (%s); made again", path, exc)
            try:
                os.unlink(saved)
            except OSError:
                pass
            return None
        stamp = stat_stamp(st)
        keep_map(self.snapshots, path, stamp, limits, index)  # made here when the file was touched since
        return self._handed(zone, index, stamp, pickled, True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            spool, self._spool = self._spool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if spool is not None:
            spool.cleanup()  # what a load under way leaves there is not read
