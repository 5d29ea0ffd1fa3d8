"""Prometheus metrics of a running tree, per zone, named after CoreDNS's where they mean the same.

``tooldns serve zones/ --metrics 127.0.0.1:9153`` (``Tree(..., metrics=("127.0.0.1", 9153))``)
serves them over HTTP with ``prometheus_client``; ``docs/operations.md`` lists every metric.

Counting costs the serving thread almost nothing: each server's :class:`ServerRecorder` (a
:meth:`DNSServer.observe <tooldns.serving.server.DNSServer.observe>` observer) adds one to a plain
list per (zone, transport, type, rcode, cached) and to a bucket of each histogram, without a lock
(each answering thread has lists of its own); the :class:`TreeMetrics` collector turns those into
metric families only when Prometheus scrapes. Everything else (the servers' socket counters, rate limiting, the zones'
reloads and serials, the scorers' model calls, tokens and fallbacks) is read at scrape time from
the counters the tree keeps anyway.

The zone of a query is the zone that answered it (:class:`tooldns.serving.observe.ZoneOf`); the
``server`` label is the address it arrived on, as CoreDNS's ``dns://ADDR:PORT``. Type labels are
bounded (unusual types count as ``other``), so no query can make series without end.

    >>> metrics = TreeMetrics(tree)                  # before tree.start(): Tree does this itself
    >>> server.observe(metrics.recorder(server))
    >>> metrics.serve("127.0.0.1", 9153)
    ('127.0.0.1', 9153)
"""

from __future__ import annotations

import ipaddress
import platform
import threading
from threading import get_ident

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .. import __version__
from .multizone import MultiZoneResolver
from .observe import MEMO_SIZE, ZoneOf, qtype_of, question_end, rcode_name, rcode_of, type_name

#: CoreDNS's port for its ``prometheus`` plugin
DEFAULT_PORT = 9153
DEFAULT_ADDRESS = "127.0.0.1"
#: upper bounds of the request duration buckets, in seconds: 1 us doubled up to 8.4 s (a cached reply
#: takes a microsecond or two in the server, an intent search tens, a model's ranking up to its budget;
#: CoreDNS's start at 0.25 ms, too coarse here). Powers of two, so that a query's bucket is one
#: ``int.bit_length`` away, not a search
DURATION_BUCKETS = tuple(1e-6 * 2 ** b for b in range(24))
#: upper bounds of the reply size buckets, in bytes: 32 doubled up to 64 KiB (512: the most a client
#: without EDNS takes over UDP; 1232, the most this server sends over UDP, falls in 1024-2048)
SIZE_BUCKETS = tuple(32 * 2 ** b for b in range(12))

# a cell: count, nanoseconds summed, bytes summed, then a slot per duration bucket and per size
# bucket, with room for any bit length (the slots past the last bucket are +Inf's)
_DURATION_AT = 3
_SIZE_AT = _DURATION_AT + 64
_CELL = _SIZE_AT + 32


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``ADDR:PORT``, ``ADDR``, ``:PORT`` or ``[V6]:PORT`` as (address, port); ValueError saying
    what is wrong. A missing address is :data:`DEFAULT_ADDRESS`, a missing port *default_port*."""
    text = text.strip()
    host, port_text = text, None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"not ADDR:PORT: {text!r}")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    host = host or DEFAULT_ADDRESS
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError(f"not an IP address: {host!r} (in {text!r})") from None
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"not a port number: {port_text!r} (in {text!r})")
    return host, int(port_text)


def _server_label(server) -> str:
    address = f"[{server.address}]" if ":" in server.address else server.address
    return f"dns://{address}:{server.port}"


class ServerRecorder:
    """Counts of one server's queries in plain lists, one per (zone, type, transport, rcode, cached,
    thread): :attr:`record` is what the server calls after each query, on its event loop or, for
    zones whose scorer may block, on a pool thread; each thread adds to lists of its own, so no
    lock is needed."""

    def __init__(self, server) -> None:
        self.server = server
        self.zone_of = ZoneOf(server.resolver)
        #: ((zone, type), udp, rcode, cached, thread) -> [count, ns, bytes, duration buckets..., size buckets...]
        self.cells: dict[tuple, list] = {}
        #: question name and type bytes -> (zone, type label)
        self.memo: dict[bytes, tuple[str, str]] = {}
        self.record = self._recorder()

    def _recorder(self):
        """The observer: a closure over plain locals, since it runs once per query."""
        cells, memo, what_of = self.cells, self.memo, self._what

        def record(data: bytes, wire: bytes | None, udp: bool, client, ns: int, cached: bool) -> None:
            if wire is None:  # nothing sent (a response, an unreadable message): the server's "dropped"
                return
            # the name ends at its first zero octet unless a label holds one: then the memo has no such key
            end = data.find(b"\x00", 12) + 1
            what = memo.get(data[12:end + 2])
            if what is None:
                what = what_of(data, end)
            rcode = wire[3] & 0x0F
            if not rcode and not (wire[7] or wire[9]):  # nothing answered nor referred: perhaps BADVERS
                rcode = rcode_of(wire)
            key = (what, udp, rcode, cached, get_ident())
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = [0] * _CELL
            size = len(wire)
            cell[0] += 1
            cell[1] += ns
            cell[2] += size
            cell[_DURATION_AT + ((ns - 1) // 1000).bit_length()] += 1  # the bucket of 1 us x 2**b at or above ns
            cell[_SIZE_AT + ((size - 1) >> 5).bit_length()] += 1  # of 32 bytes x 2**b

        return record

    def _what(self, data: bytes, first_zero: int) -> tuple[str, str]:
        """(zone, type label) of a query, read properly, and remembered under its name and type's bytes
        when its name ends at the first zero octet: any query with the same bytes up to there is read
        the same."""
        end = question_end(data)
        what = (self.zone_of(data, end), type_name(qtype_of(data, end)))
        if end and end == first_zero:
            if len(self.memo) >= MEMO_SIZE:
                self.memo.clear()
            self.memo[data[12:end + 2]] = what
        return what

    def snapshot(self) -> list[tuple[tuple, list]]:
        """The cells as they are now (copies: each is read whole, between two updates)."""
        return [(key, list(cell)) for key, cell in list(self.cells.items())]


class _ScorerTotals:
    """A zone's scorers' counters, summed over every index the zone has had: a reload replaces the
    scorers (and their counts), so what the replaced ones counted is carried over."""

    def __init__(self, store) -> None:
        self.store = store
        self.index = store.index
        self.carried: dict[str, int] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _counts(index) -> dict[str, int]:
        out: dict[str, int] = {}
        for scorer in index.scorers():
            for key, value in scorer.counters().items():
                out[key] = out.get(key, 0) + value
        return out

    def totals(self) -> dict[str, int]:
        with self.lock:
            current = self.store.index
            if current is not self.index:  # called by the store after a swap, or a scrape that sees one
                for key, value in self._counts(self.index).items():
                    self.carried[key] = self.carried.get(key, 0) + value
                self.index = current
            out = dict(self.carried)
        for key, value in self._counts(current).items():
            out[key] = out.get(key, 0) + value
        return out

    def renew(self) -> None:
        self.totals()  # lets the replaced index go, its counts carried


class TreeMetrics(Collector):
    """The Prometheus collector of a :class:`tooldns.serving.tree.Tree`: give each server
    :meth:`recorder`, then :meth:`serve` (or read :attr:`registry`); :meth:`close` when done.

    *query_log* (a :class:`tooldns.serving.querylog.QueryLog`) adds its lines written and dropped.
    """

    def __init__(self, tree, query_log=None) -> None:
        self.tree = tree
        self.query_log = query_log
        self.recorders: list[ServerRecorder] = []
        self.scorers = {store.index.origin: _ScorerTotals(store) for store in tree.stores}
        for store in tree.stores:
            store.listeners.append(self.scorers[store.index.origin].renew)
        self.registry = CollectorRegistry()
        self.registry.register(self)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._httpd = None
        self._thread: threading.Thread | None = None
        #: (address, port) metrics are served on, once :meth:`serve` runs
        self.address: tuple[str, int] | None = None

    def recorder(self, server):
        """The observer to give *server* (:meth:`DNSServer.observe`)."""
        rec = ServerRecorder(server)
        self.recorders.append(rec)
        return rec.record

    def serve(self, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT) -> tuple[str, int]:
        """Serve ``/metrics`` over HTTP on *address* and *port* (0: a free one) in a thread; the
        address and port served on. OSError when it cannot bind."""
        try:
            self._httpd, self._thread = start_http_server(port, address, registry=self.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {address}:{port}: {exc.strerror}") from exc
        self.address = (address, self._httpd.server_port)
        return self.address

    def close(self) -> None:
        """Stop serving and stop hearing of reloads."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        for totals in self.scorers.values():
            if totals.renew in totals.store.listeners:
                totals.store.listeners.remove(totals.renew)

    # -- at scrape time --
    def collect(self):
        yield from self._queries()
        yield from self._servers()
        yield from self._zones()
        if self.tree.lazy is not None:
            yield from self._lazy(self.tree.lazy)
        if self.query_log is not None:
            yield from self._query_log()
        info = GaugeMetricFamily("tooldns_build_info", "The version of ToolDNS serving (always 1).",
                                 labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info

    def _queries(self):
        requests = CounterMetricFamily("tooldns_dns_requests", "Queries answered, by the zone that answered, "
                                       "transport and question type.", labels=["server", "zone", "proto", "type"])
        responses = CounterMetricFamily("tooldns_dns_responses", "Replies sent, by zone and rcode.",
                                        labels=["server", "zone", "rcode"])
        hits = CounterMetricFamily("tooldns_cache_hits", "Replies sent from the packet cache, by zone.",
                                   labels=["server", "zone"])
        durations: dict[tuple, list] = {}
        sizes: dict[tuple, list] = {}
        by_request: dict[tuple, int] = {}
        by_rcode: dict[tuple, int] = {}
        by_hit: dict[tuple, int] = {}
        for rec in list(self.recorders):
            server = _server_label(rec.server)
            by_hit.update({(server, z): 0 for z in _zones_of(rec)})
            for ((zone, qtype), udp, rcode, cached, _), cell in rec.snapshot():
                proto = "udp" if udp else "tcp"
                _add(by_request, (server, zone, proto, qtype), cell[0])
                _add(by_rcode, (server, zone, rcode_name(rcode)), cell[0])
                if cached:
                    by_hit[(server, zone)] += cell[0]
                _merge(durations, (server, zone, qtype), cell[_DURATION_AT:_SIZE_AT], cell[1] / 1e9)
                _merge(sizes, (server, zone, proto), cell[_SIZE_AT:], cell[2])
        for labels, n in by_request.items():
            requests.add_metric(labels, n)
        for labels, n in by_rcode.items():
            responses.add_metric(labels, n)
        for labels, n in by_hit.items():
            hits.add_metric(labels, n)
        duration = HistogramMetricFamily("tooldns_dns_request_duration_seconds", "Seconds from a query's bytes to "
                                         "its reply's, in the server (sockets not included).",
                                         labels=["server", "zone", "type"])
        for labels, (buckets, total) in durations.items():
            duration.add_metric(list(labels), _cumulative(DURATION_BUCKETS, buckets), total)
        size = HistogramMetricFamily("tooldns_dns_response_size_bytes", "Size of the replies sent, in bytes.",
                                     labels=["server", "zone", "proto"])
        for labels, (buckets, total) in sizes.items():
            size.add_metric(list(labels), _cumulative(SIZE_BUCKETS, buckets), total)
        return [requests, responses, hits, duration, size]

    def _servers(self):
        """The socket counters each server keeps (``server.stats``) and its cache and TCP gauges."""
        def family(name, doc, kind=CounterMetricFamily, labels=("server",)):
            return kind(name, doc, labels=list(labels))

        out = {
            "udp": family("tooldns_server_udp_queries", "UDP datagrams received."),
            "tcp": family("tooldns_server_tcp_queries", "Queries received over TCP."),
            "dropped": family("tooldns_server_dropped_queries", "Messages given no reply: responses, "
                              "messages whose header cannot be read."),
            "truncated": family("tooldns_dns_truncated_responses", "Replies sent truncated (TC) over UDP: "
                                "the client retries over TCP."),
            "tcp_refused": family("tooldns_tcp_connections_refused", "TCP connections closed at once: over "
                                  "max_tcp_per_client, or every slot busy."),
            "tcp_evicted": family("tooldns_tcp_connections_evicted", "Idle TCP connections closed to make room."),
        }
        limited = CounterMetricFamily("tooldns_dns_rate_limited_responses", "UDP replies held back by response rate "
                                      "limiting: dropped, or slipped (sent truncated); the zone is the one whose "
                                      "rate_limit setting applies (the topmost served there).",
                                      labels=["server", "zone", "action"])
        entries = family("tooldns_cache_entries", "Replies held in the packet cache.", GaugeMetricFamily)
        cache_bytes = family("tooldns_cache_size_bytes", "Bytes held in the packet cache.", GaugeMetricFamily)
        connections = family("tooldns_tcp_connections", "TCP connections open.", GaugeMetricFamily)
        kernel_drops = family("tooldns_server_udp_kernel_drops", "UDP datagrams the kernel dropped before the "
                              "server read them (its receive buffer full: --rcvbuf), from /proc/net/udp.")
        rcvbuf = family("tooldns_server_udp_receive_buffer_bytes", "The UDP socket's receive buffer as the "
                        "kernel reports it (twice what it grants, its bookkeeping included).", GaugeMetricFamily)
        for rec in list(self.recorders):
            server, stats = rec.server, dict(rec.server.stats)
            label = _server_label(server)
            for key, metric in out.items():
                metric.add_metric([label], stats.get(key, 0))
            limited.add_metric([label, rec.zone_of.top, "drop"], stats.get("rate_limited", 0) - stats.get("slipped", 0))
            limited.add_metric([label, rec.zone_of.top, "slip"], stats.get("slipped", 0))
            entries.add_metric([label], len(server._cache))
            cache_bytes.add_metric([label], server._cache_bytes)
            connections.add_metric([label], len(server._conns))
            drops = server.udp_drops()
            if drops is not None:  # not Linux, or the socket closed: no sample rather than a wrong one
                kernel_drops.add_metric([label], drops)
            if server.rcvbuf_effective is not None:
                rcvbuf.add_metric([label], server.rcvbuf_effective)
        return [*out.values(), limited, entries, cache_bytes, connections, kernel_drops, rcvbuf]

    def _zones(self):
        reloads = CounterMetricFamily("tooldns_zone_reloads", "Edits of the zone file loaded and served.",
                                      labels=["zone"])
        failures = CounterMetricFamily("tooldns_zone_reload_failures", "Edits of the zone file refused (the last "
                                       "good version kept serving).", labels=["zone"])
        failing = GaugeMetricFamily("tooldns_zone_reload_failing", "1 while the zone file on disk is refused and "
                                    "an older version serves, else 0.", labels=["zone"])
        serial = GaugeMetricFamily("tooldns_zone_serial", "SOA serial of the version served.", labels=["zone"])
        tools = GaugeMetricFamily("tooldns_zone_tools", "Tools the zone holds.", labels=["zone"])
        children = GaugeMetricFamily("tooldns_zone_children", "Child zones the zone delegates to.", labels=["zone"])
        scorer: dict[str, CounterMetricFamily] = {}
        for store in list(self.tree.stores):
            zone = store.index.zone
            origin = zone.origin
            reloads.add_metric([origin], store.reloads)
            failures.add_metric([origin], store.reload_errors)
            failing.add_metric([origin], 1 if store.last_error else 0)
            serial.add_metric([origin], zone.soa.serial)
            tools.add_metric([origin], len(zone.tools))
            children.add_metric([origin], len(zone.children))
            for key, value in self.scorers[origin].totals().items():
                metric = scorer.get(key)
                if metric is None:
                    metric = scorer[key] = CounterMetricFamily(
                        f"tooldns_scorer_{key}", _SCORER_DOCS.get(key, f"The scorers' {key.replace('_', ' ')}."),
                        labels=["zone"])
                metric.add_metric([origin], value)
        return [reloads, failures, failing, serial, tools, children, *scorer.values()]

    @staticmethod
    def _lazy(lazy):
        """A lazy tree's zones loaded when first asked for (:mod:`.lazy`): how many and how much they hold."""
        loaded = GaugeMetricFamily("tooldns_lazy_zones_loaded", "Zones loaded now (--lazy), the top one not counted.")
        loaded.add_metric([], len(lazy.loaded))
        held = GaugeMetricFamily("tooldns_lazy_loaded_bytes", "Bytes the zones loaded now hold, as counted against "
                                 "--max-loaded-memory (the objects each zone's index holds).")
        held.add_metric([], lazy.held)
        bound = GaugeMetricFamily("tooldns_lazy_loaded_bytes_max", "--max-loaded-memory (0: no bound in bytes).")
        bound.add_metric([], lazy.max_memory)
        loads = CounterMetricFamily("tooldns_lazy_loads", "Zones loaded since the start (again after a drop too).")
        loads.add_metric([], lazy.loads)
        drops = CounterMetricFamily("tooldns_lazy_drops", "Zones dropped, the least recently asked, past "
                                    "--max-loaded or --max-loaded-memory.")
        drops.add_metric([], lazy.drops)
        mapped = GaugeMetricFamily("tooldns_lazy_mapped", "Leaves not loaded answered from their maps now "
                                   "(their files mapped into memory).")
        mapped.add_metric([], len(lazy.maps))
        mapped_bytes = GaugeMetricFamily("tooldns_lazy_mapped_bytes", "Bytes of the leaf maps open now, bounded "
                                         "by --max-loaded-memory apart from the zones loaded.")
        mapped_bytes.add_metric([], lazy.mapped_bytes)
        return [loaded, held, bound, loads, drops, mapped, mapped_bytes]

    def _query_log(self):
        log = self.query_log
        written = CounterMetricFamily("tooldns_querylog_lines", "Lines written to the query log.")
        written.add_metric([], log.written)
        dropped = CounterMetricFamily("tooldns_querylog_dropped", "Query log lines lost: the writer fell behind "
                                      "or the file could not be written.")
        dropped.add_metric([], log.dropped)
        return [written, dropped]


_SCORER_DOCS = {
    "calls": "Calls the zone's scorers made to their model (the LLM scorer's chat completions).",
    "prompt_tokens": "Prompt tokens the model reported (LLM scorer).",
    "completion_tokens": "Completion tokens the model reported (LLM scorer).",
    "fallbacks": "Rankings BM25 gave because the model could not (down, slow, garbled): a fallback.",
    "errors": "Model calls that failed (timeout, HTTP error, unreadable answer).",
    "cache_hits": "Rankings the LLM scorer answered from its own cache of (intent, K).",
    "probes": "Health probes sent to a model marked down.",
    "recoveries": "Times a model marked down answered a probe again.",
}


def _zones_of(rec: ServerRecorder) -> list[str]:
    """The zones a server answers for, so that each has its cache-hit series from the start."""
    resolver = rec.server.resolver
    return list(resolver.members) if isinstance(resolver, MultiZoneResolver) else [rec.zone_of.top]


def _add(into: dict, key: tuple, n: int) -> None:
    into[key] = into.get(key, 0) + n


def _merge(into: dict, key: tuple, buckets: list, total: float) -> None:
    held = into.get(key)
    if held is None:
        into[key] = [list(buckets), total]
    else:
        held[0] = [a + b for a, b in zip(held[0], buckets)]
        held[1] += total


def _cumulative(bounds: tuple, buckets: list) -> list[tuple[str, int]]:
    """Prometheus's buckets (cumulative, +Inf last) from a cell's slots, those past *bounds* being +Inf's."""
    out, running = [], 0
    for bound, n in zip(bounds, buckets):
        running += n
        out.append((floatToGoString(bound), running))
    out.append(("+Inf", running + sum(buckets[len(bounds):])))
    return out
