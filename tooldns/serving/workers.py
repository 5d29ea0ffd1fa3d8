"""Several processes serving one tree on the same addresses and port, so that queries spread over cores.

One event loop answers on one core. :class:`Workers` starts N processes (multiprocessing's
``spawn``: a worker inherits nothing but its arguments), each running the whole :class:`Tree` with
its sockets bound with SO_REUSEPORT; the kernel spreads UDP queries (by the client's address and
port) and TCP connections over them. The parent only supervises: it waits until every worker has
bound its sockets (or reports the first that cannot), starts again a worker that dies, and on
:meth:`Workers.stop` stops them all and sums their counters.

Each worker keeps its own answer cache, rate-limit accounts and TCP slots: a client prefix whose
queries spread over N workers may get up to N times the zones' rate. Each reloads edited zone
files itself. Each serves its own metrics (``metrics=(address, port)``): worker i on port + i, to
be scraped as N targets and summed (``docs/operations.md``); all append to one query log.

    >>> workers = Workers("zones", 5300, 4, rate_limit=0).start()
    >>> workers.wait()        # until SIGINT or SIGTERM
    >>> counters = workers.stop()
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection, wait

from ..exceptions import ServeError, ToolDNSError
from ..scoring.hybrid import one_blas_thread
from .gcpolicy import freeze_tree
from .tree import Tree

log = logging.getLogger(__name__)

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the supervising process dies, however it dies (elsewhere: nothing)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(index: int, zonedir: str, port: int, options: dict, log_level: int, conn: Connection) -> None:
    """A worker process: serve the tree until SIGTERM; tell the parent ready, error or the counters."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the tree is up: then it means "look at the files"
    _die_with_parent()
    logging.basicConfig(level=log_level, format=f"[worker {index}] {_LOG_FORMAT}")
    one_blas_thread()
    asyncio.run(_serve(zonedir, port, options, conn, index))


async def _serve(zonedir: str, port: int, options: dict, conn: Connection, index: int = 0) -> None:
    if options.get("metrics") is not None:  # one metrics port per worker: the counters are the worker's
        address, metrics_port = options["metrics"]
        options = {**options, "metrics": (address, metrics_port + index)}
    try:
        tree = Tree(zonedir, port, reuse_port=True, **options)
        freeze_tree(tree)
        await tree.start()
    except (OSError, ToolDNSError, ValueError) as exc:
        conn.send(("error", str(exc)))
        return
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, tree.look)
    conn.send(("ready", os.getpid()))
    await stop.wait()
    counters = tree.counters()
    await tree.stop()
    try:
        conn.send(("counters", counters))
    except OSError:  # the parent is gone (killed): nobody to tell
        pass


def _add(total: dict[str, dict[str, int]], counters: dict[str, dict[str, int]]) -> None:
    for origin, values in counters.items():
        into = total.setdefault(origin, {})
        for key, value in values.items():
            into[key] = into.get(key, 0) + value


class Workers:
    """*count* worker processes serving the tree of *zonedir* on *port* (not 0: they must agree).

    *tree_options* go to each worker's :class:`Tree` (``only``, ``listen``, ``answer_cache``,
    ``signing`` (a :class:`~tooldns.dnssec.signer.Signing`: ``--keys``, ``--signature-validity``) and
    the servers' options); they must pickle.
    """

    def __init__(self, zonedir, port: int, count: int, *, log_level: int = logging.WARNING, **tree_options) -> None:
        if count < 1:
            raise ValueError(f"workers must be at least 1, not {count}")
        if port == 0:
            raise ValueError("workers need a fixed port: port 0 would give each worker a port of its own")
        self.zonedir, self.port, self.count = os.fspath(zonedir), port, count
        self.options = tree_options
        self.log_level = log_level
        self._context = multiprocessing.get_context("spawn")
        self._procs: list = [None] * count
        self._conns: list[Connection | None] = [None] * count
        self._stopping = False
        self.restarts = 0
        #: counters of workers that have stopped, summed per zone
        self.counters: dict[str, dict[str, int]] = {}

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None and p.is_alive()]

    def _spawn(self, index: int) -> None:
        reader, writer = self._context.Pipe(duplex=False)
        proc = self._context.Process(target=_worker, name=f"tooldns-worker-{index}", daemon=True,
                                     args=(index, self.zonedir, self.port, self.options, self.log_level, writer))
        proc.start()
        writer.close()
        self._procs[index], self._conns[index] = proc, reader

    def _await_ready(self, index: int) -> None:
        """Wait until worker *index* has bound its sockets; ServeError if it cannot."""
        proc, conn = self._procs[index], self._conns[index]
        wait([conn, proc.sentinel])
        try:
            message = conn.recv() if conn.poll() else None
        except EOFError:
            message = None
        if message is None:
            proc.join(1.0)
            message = ("error", f"exited with status {proc.exitcode} before serving")
        if message[0] != "ready":
            raise ServeError(f"worker {index}: {message[1]}")

    def start(self) -> "Workers":
        """Start every worker and wait until all serve; on a failure stop the others and raise ServeError."""
        try:
            for index in range(self.count):
                self._spawn(index)
            for index in range(self.count):
                self._await_ready(index)
        except BaseException:
            self.stop()
            raise
        return self

    def check(self) -> None:
        """Start again every worker that has died (each at most once a second)."""
        for index, proc in enumerate(self._procs):
            if self._stopping or proc is None or proc.is_alive():
                continue
            log.warning("worker %d (pid %d) exited with status %s; starting it again", index, proc.pid, proc.exitcode)
            self._conns[index].close()
            time.sleep(1.0)
            self._spawn(index)
            self.restarts += 1
            try:
                self._await_ready(index)
            except ServeError as exc:
                log.error("%s", exc)

    def wait(self) -> None:
        """Supervise until SIGINT or SIGTERM (main thread only); pass SIGHUP on to every worker."""
        stop = []
        previous = {sig: signal.signal(sig, lambda *_: stop.append(True)) for sig in (signal.SIGINT, signal.SIGTERM)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: self.send_signal(signal.SIGHUP))
        try:
            while not stop:
                sentinels = [p.sentinel for p in self._procs if p is not None]
                wait(sentinels, timeout=0.5)
                if not stop:
                    self.check()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def send_signal(self, sig: int) -> None:
        """Send *sig* to every live worker (SIGHUP: look at the zone files now)."""
        for proc in self._procs:
            if proc is not None and proc.is_alive():
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:  # died since: check() starts it again
                    pass

    def stop(self, timeout: float = 10.0) -> dict[str, dict[str, int]]:
        """Stop every worker (SIGTERM, then SIGKILL after *timeout* seconds); their counters, summed."""
        self._stopping = True
        live = [(p, c) for p, c in zip(self._procs, self._conns) if p is not None and p.is_alive()]
        for proc, _ in live:
            proc.terminate()
        deadline = time.monotonic() + timeout
        for proc, conn in live:
            if conn.poll(max(0.0, deadline - time.monotonic())):
                try:
                    kind, value = conn.recv()
                except EOFError:
                    kind, value = "gone", None
                if kind == "counters":
                    _add(self.counters, value)
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            if conn is not None:
                conn.close()
        return self.counters
