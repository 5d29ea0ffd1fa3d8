"""The query log: one JSON object per line for each query a tree answers, written off the serving thread.

``tooldns serve zones/ --query-log queries.jsonl`` (``-``: standard error) writes, for each reply
sent::

    {"time": "2025-06-01T12:00:00.123Z", "client": "127.0.0.1", "proto": "udp", "zone": "weather.tools.",
     "name": "_any._tcp._weather.tools.", "type": "SRV", "k": 3, "rcode": "NOERROR", "results": 2,
     "duration_us": 48, "cached": false}

``k`` is the K of the query's intent option (null without one); ``results`` the children referred
to or the records answered (:func:`tooldns.serving.observe.results_of`); ``duration_us`` the
microseconds the server took (sockets not included). The intent's text is private to the agent
that sent it: it is logged (``"intent"``) only with ``--log-intents`` (``intents=True``).

Serving never waits on the log. A query costs the serving thread one append to a queue of at
most *max_pending* entries (the query and reply bytes, read later); a thread reads, formats and
writes them every *interval* seconds in one ``write`` per batch of whole lines on a file opened
for appending, so that several processes (``--workers``) may share one file without mixing lines.
When the writer falls behind or the file cannot be written (disk full, gone), lines are dropped and
counted (:attr:`QueryLog.dropped`, a warning at most once a minute), never the server. A file moved
away (log rotation) is followed: the next batch goes to a new file at the path.

    >>> qlog = QueryLog("queries.jsonl")          # OSError when it cannot be opened
    >>> server.observe(qlog.recorder(server))     # Tree does this for each of its servers
    >>> qlog.close()                              # writes what is pending
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import deque
from datetime import datetime, timezone

from ..exceptions import IntentError
from ..protocol.intent import INTENT_OPTION_CODE, decode_intent
from .observe import ZoneOf, qtype_of, question_end, rcode_name, rcode_of, results_of, type_name
from .wire import parse_request, read_plain_query

log = logging.getLogger(__name__)

#: entries waiting for the writer; more are dropped (and counted)
MAX_PENDING = 8192
#: seconds between the writer's batches
INTERVAL = 0.1
#: messages (query and reply) larger than this are read on arrival rather than kept whole, so that
#: the pending queue holds at most MAX_PENDING times this many bytes
MAX_KEPT_BYTES = 4096
_WARN_EVERY = 60.0
#: what JSON may carry raw but a reader of lines must not see raw: C1 controls (U+0085 ends a line
#: for Python's ``str.splitlines``, U+009B starts a terminal's escape sequence), DEL, the Unicode line
#: and paragraph separators and bidirectional overrides; written as ``\uXXXX`` escapes instead
_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def question_text(data: bytes, end: int) -> str | None:
    """The question's name as text (``\\DDD`` escapes for octets that are not printable ASCII, as
    in zone files), None when it cannot be read."""
    if not end:
        return None
    labels, pos = [], 12
    while pos < end - 1:
        length = data[pos]
        raw = data[pos + 1:pos + 1 + length]
        labels.append("".join(chr(b) if 0x21 <= b <= 0x7E and b not in b".\\" else f"\\{b:03d}" for b in raw))
        pos += length + 1
    return ".".join(labels) + "." if labels else "."


def _intent(data: bytes):
    """The query's intent option, decoded; None without one or when it is malformed (the reply says why)."""
    query = read_plain_query(data)
    if query is not None:
        options = query.option_data(INTENT_OPTION_CODE)
    else:  # queries off the fast path (class CH, other records): the strict parser's reading
        try:
            options = parse_request(data).options(INTENT_OPTION_CODE)
        except Exception:  # MalformedRequest and worse: a reply was sent all the same; the line says less
            options = []
    if len(options) != 1:
        return None
    try:
        return decode_intent(options[0])
    except IntentError:
        return None


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class QueryLog:
    """JSON lines of the queries answered, to *path* (``-``: standard error); *intents*: include the
    intent's text. OSError when *path* cannot be opened for appending."""

    def __init__(self, path: str, intents: bool = False, *, max_pending: int = MAX_PENDING,
                 interval: float = INTERVAL) -> None:
        self.path = os.fspath(path)
        self.intents = intents
        self.max_pending = max_pending
        self.interval = interval
        #: lines written
        self.written = 0
        self._overflowed = 0  # lines lost to a full queue (serving threads, under _overflow_lock)
        self._failed = 0  # lines lost to the file (the writer thread)
        self._overflow_lock = threading.Lock()
        self._fd = self._open()
        self._pending: deque = deque()
        self._lock = threading.Lock()  # the writer's: file descriptor and counters
        self._closing = threading.Event()
        self._last_warning = -_WARN_EVERY
        self._overflow_seen = 0
        self._thread = threading.Thread(target=self._run, name="tooldns-querylog", daemon=True)
        self._thread.start()

    def _open(self) -> int:
        if self.path == "-":
            return 2
        try:
            return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o640)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open the query log {self.path}: {exc.strerror}") from exc

    def recorder(self, server):
        """The observer to give *server* (:meth:`DNSServer.observe`): it queues each query it sees."""
        zone_of = ZoneOf(server.resolver)
        pending, limit = self._pending, self.max_pending

        def record(data: bytes, wire: bytes | None, udp: bool, client, ns: int, cached: bool) -> None:
            if wire is None:
                return
            if len(pending) >= limit:
                with self._overflow_lock:  # serving threads: the event loop's and a pool's
                    self._overflowed += 1
                return
            entry = (time.time(), data, wire, udp, client, ns, cached, zone_of)
            if len(data) + len(wire) > MAX_KEPT_BYTES:
                entry = self._line(entry)  # large messages read now: the queue keeps the line only
            pending.append(entry)

        return record

    # -- the writer thread --
    def _line(self, entry) -> str:
        when, data, wire, udp, client, ns, cached, zone_of = entry
        end = question_end(data)
        qtype = qtype_of(data, end)
        intent = _intent(data)
        record = {
            "time": _stamp(when),
            "client": client[0] if client else None,
            "proto": "udp" if udp else "tcp",
            "zone": zone_of(data, end),
            "name": question_text(data, end),
            "type": type_name(qtype, other=f"TYPE{qtype}") if qtype is not None else None,
            "k": intent.k if intent is not None else None,
            "rcode": rcode_name(rcode_of(wire)),
            "results": results_of(wire),
            "duration_us": round(ns / 1000),
            "cached": cached,
        }
        if self.intents:
            record["intent"] = intent.text if intent is not None else None
        # these characters can only stand inside JSON strings, where an escape means the same
        return _UNSAFE.sub(_escaped, json.dumps(record, ensure_ascii=False, separators=(", ", ": ")))

    def _run(self) -> None:
        while not self._closing.wait(self.interval):
            self._flush()
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        lines = []
        for _ in range(len(pending)):
            entry = pending.popleft()
            try:
                lines.append(entry if isinstance(entry, str) else self._line(entry))
            except Exception:  # one odd message never costs the others their lines
                log.exception("query log: cannot format a line")
                self._failed += 1
        if lines:
            self._write(lines)
        if self._overflowed != self._overflow_seen:
            self._overflow_seen = self._overflowed
            self._warn(f"the writer fell behind ({self.max_pending} lines pending)")

    def _write(self, lines: list[str]) -> None:
        with self._lock:
            try:
                self._follow()
                # one write of whole lines: appends from several processes never interleave within it
                view = memoryview(("\n".join(lines) + "\n").encode("utf-8"))
                while view:
                    view = view[os.write(self._fd, view):]
                self.written += len(lines)
            except OSError as exc:
                self._failed += len(lines)
                self._warn(f"cannot write ({exc.strerror or exc})")

    def _warn(self, why: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            log.warning("query log %s: %s; %d lines dropped so far, serving goes on", self.path, why, self.dropped)

    def _follow(self) -> None:
        """Reopen the file when it was moved or deleted since it was opened (log rotation)."""
        if self._fd == 2:
            return
        try:
            same = os.path.samestat(os.stat(self.path), os.fstat(self._fd))
        except OSError:
            same = False
        if not same:
            fd = self._open()
            os.close(self._fd)
            self._fd = fd

    @property
    def dropped(self) -> int:
        """Lines lost: the writer fell behind, or the file could not be written."""
        return self._overflowed + self._failed

    def close(self) -> None:
        """Write what is pending and close the file."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._thread.join(10)
        with self._lock:
            if self._fd != 2:
                os.close(self._fd)
