"""Zone files read and indexed in another process, and indexes kept on disk to be read back in one go.

Parsing a zone file's YAML and indexing it are pure Python: in a thread of the serving process they
share the interpreter's lock with the event loop, which then answers late (a leaf of 100 tools:
about 28 ms of work, of which the loop gets its turns only every switch interval). A
:class:`ZoneLoader` does that work in a process of its own (``--load-processes``, 1 by default, for
the zones a lazy server loads) and hands back the index pickled: the serving process only
unpickles it, about 1 ms for a built leaf, in pieces of a few tenths of a millisecond, between which
the event loop gets the lock (:func:`pickle_in_pieces`).

With a snapshot directory (``--snapshots DIR``; a tree written by ``tooldns build`` has one,
``.snapshots/``, used when nothing else is said), the loading process also keeps each index it
made there, named by a digest of the file's bytes, of the code that reads them and of the limits:
a zone loaded again (dropped and asked again, the next start of the server) is read back whole,
unparsed, and answers in a few milliseconds even the first time it is met. An edited file has
another digest: its old snapshot is never used again (``rm -r DIR`` at any time frees the space).

A snapshot is code to :mod:`pickle`, as ``__pycache__`` is to Python: it is read only from a
directory the server's own user owns and nobody else may write to, and only when the snapshot file
is so too (as OpenSSH's StrictModes); otherwise the directory is not used, and the log says why.
Files larger than :data:`MAX_PICKLED_BYTES` are loaded as before, in the loading thread: their
index, unpickled in one call, would hold the interpreter longer than parsing them in a thread does.
An index that cannot be pickled (an ``llm`` scorer's) is made in the loading thread too.

    >>> loader = ZoneLoader(processes=1, snapshots="built/.snapshots")
    >>> loader.load("built/weather.tools.yaml", ZoneLimits()).index.origin   # None: load it yourself
    'weather.tools.'
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import signal
import stat
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from ..compiled import turn
from ..exceptions import ZoneFileError
from ..zone.limits import ZoneLimits
from ..zone.model import Zone
from ..zone.zonefile import check_utf8, parse_zone, read_zone_file, stat_stamp, write_atomically
from .index import ZoneIndex

log = logging.getLogger(__name__)

#: the name of the snapshot directory ``tooldns build`` makes beside the zone files it writes
SNAPSHOT_DIR = ".snapshots"
#: zone files larger than this are indexed in the loading thread, not pickled across (1 MiB:
#: about 1,200 tools; a built leaf holds 1 to 100)
MAX_PICKLED_BYTES = 2**20
#: bumped when what a snapshot holds changes shape beyond what the code digest sees
FORMAT = 2
#: tools (and children) pickled a piece, and postings terms a piece: each piece is unpickled in one
#: call of its own, which holds the interpreter's lock, about 0.1 to 0.3 ms
TOOLS_A_PIECE = 48
TERMS_A_PIECE = 600
#: the sources whose classes a snapshot holds: a change to any makes every snapshot stale
_PICKLED_SOURCES = ("zone", "scoring", "protocol", "serving/index.py", "serving/summaries.py", "embedding")


@dataclass(frozen=True)
class Loaded:
    """What a loading process gives back: the zone as its file says, its index, and the stamp of the
    file it read (:func:`~tooldns.zone.zonefile.stat_stamp`)."""

    zone: Zone
    index: ZoneIndex
    stamp: tuple[int, int, int]


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


class _Unrefs(pickle.Unpickler):
    """Unpickles a piece, each reference to an earlier piece's object by its number."""

    def __init__(self, data: bytes, objects: list) -> None:
        super().__init__(io.BytesIO(data))
        self.objects = objects

    def persistent_load(self, number: int):
        return self.objects[number]


def pickle_in_pieces(zone: Zone, index: ZoneIndex) -> bytes:
    """*zone* and *index* pickled as pieces, each unpickled by one call of its own
    (:func:`unpickle_pieces`): the tools a few dozen at a time, the zone, each lexical index's
    postings some hundred terms at a time, then the index; an object of an earlier piece is referred
    to by its number. Between pieces the unpickling thread can give the interpreter's lock to the
    event loop, which one call over the whole index (1.3 ms for a leaf of 160 tools) held."""
    known: dict[int, int] = {}
    alive: list = []  # what was numbered stays alive, so that no other object takes its id()
    pieces: list[tuple[str, bytes | int]] = []

    def number(obj) -> None:
        known[id(obj)] = len(known)
        alive.append(obj)

    def piece(obj, members=()) -> None:
        buf = io.BytesIO()
        _Refs(buf, known).dump(obj)
        pieces.append(("obj", buf.getvalue(), len(members)))
        number(obj)
        for member in members:
            number(member)

    for group in (zone.tools, zone.children):
        for start in range(0, len(group), TOOLS_A_PIECE):
            part = tuple(group[start:start + TOOLS_A_PIECE])
            piece(part, part)
    piece(zone)
    for postings in index.postings():
        items = list(postings.items())
        parts = [dict(items[i:i + TERMS_A_PIECE]) for i in range(0, len(items), TERMS_A_PIECE)] or [{}]
        for part in parts:
            piece(part)
        pieces.append(("join", len(parts), 0))
        number(postings)
    piece(index)
    return pickle.dumps(pieces, protocol=pickle.HIGHEST_PROTOCOL)


def unpickle_pieces(data: bytes) -> tuple[Zone, ZoneIndex]:
    """What :func:`pickle_in_pieces` pickled: the zone and its index."""
    objects: list = []
    zone = None
    for kind, payload, members in pickle.loads(data):
        turn()  # the interpreter's lock to whoever waits for it (the event loop) between pieces
        if kind == "obj":
            obj = _Unrefs(payload, objects).load()
            objects.append(obj)
            objects.extend(obj if members else ())
            if isinstance(obj, Zone):
                zone = obj
        else:  # "join": the last *payload* dictionaries, one postings dictionary again
            joined: dict = {}
            for part in objects[-payload:]:
                joined.update(part)
            objects.append(joined)
    if zone is None or not objects or not isinstance(objects[-1], ZoneIndex):
        raise ValueError("not a pickled zone and index")
    return zone, objects[-1]


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


def _read_snapshot(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or _unsafe(st) is not None:
            log.warning("%s: not read (%s)", path, _unsafe(st) or "not a regular file")
            return None
        return fh.read()


def _write_snapshot(path: Path, blob: bytes) -> None:
    try:
        write_atomically(path, blob, mode=0o600, durable=False)
    except OSError as exc:  # a full disk: the zone is served all the same, and read again next time
        log.warning("%s: snapshot not written (%s)", path, exc.strerror)


def prepare(path: str, limits: ZoneLimits, snapshots: str | None) -> tuple[tuple[int, int, int], bytes, bool] | None:
    """Read, check and index the zone file at *path*: the stamp of the file read, the zone and its
    index pickled in pieces (:func:`pickle_in_pieces`) and whether they were read from a snapshot; or
    None when the caller should do it itself (a large file, an index that cannot be pickled). Raises
    :class:`ZoneFileError` for a file that cannot be served. What a loading process runs; from
    *snapshots* (a directory checked by :func:`unsafe_directory`) when it holds this file's index."""
    data, st = read_zone_file(path, limits)
    if len(data) > MAX_PICKLED_BYTES:
        return None
    stamp = stat_stamp(st)
    saved = Path(snapshots) / _snapshot_name(data, limits) if snapshots else None
    blob = _read_snapshot(saved) if saved is not None else None
    if blob is not None:
        return stamp, blob, True
    check_utf8(data, path)
    zone = parse_zone(data, path, limits)
    index = ZoneIndex(zone)
    index.published_rr()  # made here, not by the serving process when the parent first asks
    try:
        blob = pickle_in_pieces(zone, index)
    except (TypeError, AttributeError, pickle.PicklingError):  # an llm scorer's client and its thread
        index.close()
        return None
    if saved is not None:
        _write_snapshot(saved, blob)
    return stamp, blob, False


#: how much less a loading process is given the processor than its server (``nice``): on a machine
#: with few cores, parsing must not take the core the event loop answers on
NICENESS = 10


def _start_loading_process() -> None:
    """A loading process ignores Ctrl-C and SIGHUP (its server's), dies with its server, and yields the
    processor to it (:data:`NICENESS`)."""
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
        #: loads done in a loading process, of which read back from snapshots, and loads it left to
        #: the caller (large files, llm scorers, spoiled snapshots, a process lost)
        self.loaded = self.from_snapshots = self.declined = 0

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=get_context("forkserver"),
                                                 initializer=_start_loading_process)
            return self._pool

    def load(self, path: str, limits: ZoneLimits | None) -> Loaded | None:
        """The zone file at *path* loaded in a loading process; None when the caller is to load it
        itself (a large file, an index that cannot be pickled, a loading process lost). Raises
        :class:`ZoneFileError` when the file cannot be served. Blocks: call it off the event loop."""
        pool = self._executor()
        try:
            blob = pool.submit(prepare, path, limits or ZoneLimits(), self.snapshots).result()
        except BrokenProcessPool:  # a loading process killed: the next load starts new ones
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            log.warning("%s: a loading process died; loaded in the server", path)
            self.declined += 1
            return None
        if blob is None:
            self.declined += 1
            return None
        stamp, pickled, from_snapshot = blob
        try:
            zone, index = unpickle_pieces(pickled)
        except Exception as exc:  # a snapshot cut short or spoiled on the disk: loaded in the server
            log.warning("%s: its snapshot cannot be read (%s); loaded in the server", path, exc)
            self.declined += 1
            return None
        self.loaded += 1
        self.from_snapshots += from_snapshot
        return Loaded(zone, index, stamp)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
