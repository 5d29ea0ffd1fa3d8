"""Zone files read and indexed in another process, and indexes kept on disk to be read back in one go.

Parsing a zone file's YAML and indexing it are pure Python: in a thread of the serving process they
share the interpreter's lock with the event loop, which then answers late (a leaf of 100 tools:
about 28 ms of work, of which the loop gets its turns only every switch interval). A
:class:`ZoneLoader` does that work in a process of its own (``--load-processes``, 1 by default, for
the zones a lazy server loads) and hands back the index pickled: the serving process only
unpickles it, about 1 ms for a built leaf.

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
    >>> zone, index, stamp = loader.load("built/weather.tools.yaml", ZoneLimits())
"""

from __future__ import annotations

import hashlib
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

from ..exceptions import ZoneFileError
from ..zone.limits import ZoneLimits
from ..zone.model import Zone
from ..zone.zonefile import parse_zone, read_zone_file
from .index import ZoneIndex

log = logging.getLogger(__name__)

#: the name of the snapshot directory ``tooldns build`` makes beside the zone files it writes
SNAPSHOT_DIR = ".snapshots"
#: zone files larger than this are indexed in the loading thread, not pickled across (1 MiB:
#: about 1,200 tools; a built leaf holds 1 to 100)
MAX_PICKLED_BYTES = 2**20
#: bumped when what a snapshot holds changes shape beyond what the code digest sees
FORMAT = 1
#: the sources whose classes a snapshot holds: a change to any makes every snapshot stale
_PICKLED_SOURCES = ("zone", "scoring", "protocol", "serving/index.py", "serving/summaries.py", "embedding")


@dataclass(frozen=True)
class Loaded:
    """What a loading process gives back: the zone as its file says, its index, and the stamp of the
    file it read (:func:`~tooldns.serving.store.stat_stamp`)."""

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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the zone is served all the same, and read again next time
        tmp.unlink(missing_ok=True)
        log.warning("%s: snapshot not written (%s)", path, exc.strerror)


def prepare(path: str, limits: ZoneLimits, snapshots: str | None) -> tuple[tuple[int, int, int], bytes, bool] | None:
    """Read, check and index the zone file at *path*: the stamp of the file read, the pickled
    ``(zone, index)`` and whether they were read from a snapshot; or None when the caller should do it itself (a large file, an index that
    cannot be pickled). Raises :class:`ZoneFileError` for a file that cannot be served. What a
    loading process runs; from *snapshots* (a directory checked by :func:`unsafe_directory`) when it
    holds this file's index."""
    data, st = read_zone_file(path, limits)
    if len(data) > MAX_PICKLED_BYTES:
        return None
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    saved = Path(snapshots) / _snapshot_name(data, limits) if snapshots else None
    blob = _read_snapshot(saved) if saved is not None else None
    if blob is not None:
        return stamp, blob, True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZoneFileError(f"{path}:1: the file is not UTF-8 (byte {exc.start})") from None
    zone = parse_zone(text, path, limits)
    index = ZoneIndex(zone)
    index.published_rr()  # made here, not by the serving process when the parent first asks
    try:
        blob = pickle.dumps((zone, index), protocol=pickle.HIGHEST_PROTOCOL)
    except (TypeError, AttributeError, pickle.PicklingError):  # an llm scorer's client and its thread
        index.close()
        return None
    if saved is not None:
        _write_snapshot(saved, blob)
    return stamp, blob, False


def _start_loading_process() -> None:
    """A loading process ignores Ctrl-C and SIGHUP (its server's), and dies with its server."""
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
            zone, index = pickle.loads(pickled)
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
