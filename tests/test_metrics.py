"""Prometheus metrics over HTTP (``tooldns serve --metrics``), scraped and parsed with prometheus_client,
after real DNS queries over loopback; the byte readers behind them; ``--version``."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import urllib.request

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import tooldns
from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet, start_tree, wait_until
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.metrics import DURATION_BUCKETS, parse_address
from tooldns.serving.observe import ZoneOf, qtype_of, question_end, rcode_of, results_of

INTENT = "historical weather Hong Kong"


def intent_query(zone: str, intent: str = INTENT, k: int = 3, option: bytes | None = None) -> dns.message.Message:
    data = option if option is not None else encode_intent(intent, k)
    return dns.message.make_query(f"_any._tcp._{zone}", "SRV", use_edns=0, flags=0,
                                  options=[dns.edns.GenericOption(INTENT_OPTION_CODE, data)])


def udp(query: dns.message.Message, where: tuple[str, int]) -> dns.message.Message:
    return dns.query.udp(query, where[0], port=where[1], timeout=REPLY_TIMEOUT)


def scrape(where: tuple[str, int]) -> list:
    with urllib.request.urlopen(f"http://{where[0]}:{where[1]}/metrics", timeout=REPLY_TIMEOUT) as reply:
        assert reply.status == 200
        return list(text_string_to_metric_families(reply.read().decode("utf-8")))


def value(families, name: str, **labels) -> float:
    """The sum of the samples called *name* whose labels include *labels*."""
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def server_of(tree, origin: str) -> str:
    address = tree.tree.addresses[origin][0]
    return f"dns://{address}:{tree.tree.port}"


@pytest.fixture
def metrics_tree(demo_dir, integration):
    tree = start_tree(demo_dir, metrics=("127.0.0.1", 0))
    yield tree
    tree.stop()


def test_queries_counted_per_zone_rcode_and_type(metrics_tree):
    tree = metrics_tree.tree
    root = metrics_tree.root()
    weather = (tree.addresses["weather.tools."][0], tree.port)
    assert udp(intent_query("tools."), root).rcode() == dns.rcode.NOERROR
    assert udp(intent_query("tools."), root).rcode() == dns.rcode.NOERROR  # the same bytes: the packet cache
    assert dns.query.tcp(intent_query("tools."), root[0], port=root[1], timeout=REPLY_TIMEOUT).answer == []
    assert udp(intent_query("weather.tools."), weather).rcode() == dns.rcode.NOERROR
    assert udp(dns.message.make_query("nothing-here.tools.", "A"), root).rcode() == dns.rcode.NXDOMAIN
    bad = intent_query("tools.", option=b"\x00\x00\x09\x03abc")  # the length says 9 bytes, 3 follow
    assert udp(bad, root).rcode() == dns.rcode.FORMERR
    families = scrape(tree.metrics_address)

    at_root = server_of(metrics_tree, "tools.")
    srv = dict(zone="tools.", server=at_root, type="SRV")
    assert value(families, "tooldns_dns_requests_total", proto="udp", **srv) == 3  # two intents, one malformed
    assert value(families, "tooldns_dns_requests_total", proto="tcp", **srv) == 1
    assert value(families, "tooldns_dns_requests_total", zone="tools.", type="A") == 1
    assert value(families, "tooldns_dns_requests_total", zone="weather.tools.", type="SRV",
                 server=server_of(metrics_tree, "weather.tools.")) == 1
    assert value(families, "tooldns_dns_responses_total", zone="tools.", rcode="NXDOMAIN") == 1
    assert value(families, "tooldns_dns_responses_total", zone="tools.", rcode="FORMERR") == 1
    assert value(families, "tooldns_dns_responses_total", zone="weather.tools.", rcode="NXDOMAIN") == 0
    assert value(families, "tooldns_cache_hits_total", zone="tools.", server=at_root) == 1
    assert value(families, "tooldns_cache_entries", server=at_root) >= 1

    # histograms: one observation per reply, cumulative buckets ending in +Inf
    count = value(families, "tooldns_dns_request_duration_seconds_count", **srv)
    assert count == 4
    buckets = [s for f in families for s in f.samples if s.name == "tooldns_dns_request_duration_seconds_bucket"
               and s.labels["zone"] == "tools." and s.labels["type"] == "SRV"]
    assert len(buckets) == len(DURATION_BUCKETS) + 1 and buckets[-1].labels["le"] == "+Inf"
    assert [b.value for b in buckets] == sorted(b.value for b in buckets) and buckets[-1].value == count
    assert 0 < value(families, "tooldns_dns_request_duration_seconds_sum", **srv) < WAIT_TIMEOUT
    sizes = value(families, "tooldns_dns_response_size_bytes_count", zone="tools.", proto="udp")
    assert sizes == 4  # three SRV and the A query
    assert value(families, "tooldns_dns_response_size_bytes_sum", zone="tools.", proto="udp") > 4 * 12

    # what the servers and zones count anyway, and what this is
    stats = tree.sockets[root[0]].stats
    assert value(families, "tooldns_server_udp_queries_total", server=at_root) == stats["udp"] >= 4
    assert value(families, "tooldns_server_tcp_queries_total", server=at_root) == stats["tcp"] >= 1
    store = next(s for s in tree.stores if s.index.origin == "weather.tools.")
    # the serial served: the file's, raised when the zone learns a child's summary (serials only grow)
    assert store.file_zone.soa.serial <= value(families, "tooldns_zone_serial", zone="weather.tools.") <= store.serial
    assert value(families, "tooldns_zone_tools", zone="history.weather.tools.") > 0
    assert value(families, "tooldns_build_info", version=tooldns.__version__) == 1
    assert value(families, "process_open_fds") > 0  # prometheus_client's process collector


def test_reloads_and_reload_errors(metrics_tree, demo_dir):
    where = metrics_tree.tree.metrics_address
    path = demo_dir / "weather.tools.yaml"
    zone = yaml.safe_load(path.read_text(encoding="utf-8"))
    zone["soa"]["serial"] += 1
    path.write_text(yaml.safe_dump(zone, allow_unicode=True), encoding="utf-8")
    assert wait_until(lambda: value(scrape(where), "tooldns_zone_reloads_total", zone="weather.tools.") == 1)
    assert value(scrape(where), "tooldns_zone_serial", zone="weather.tools.") >= zone["soa"]["serial"]
    path.write_text("origin: weather.tools.\nsoa: {serial: not-a-number}\n", encoding="utf-8")
    assert wait_until(lambda: value(scrape(where), "tooldns_zone_reload_failures_total", zone="weather.tools.") == 1)
    families = scrape(where)
    assert value(families, "tooldns_zone_reload_failing", zone="weather.tools.") == 1
    assert value(families, "tooldns_zone_reload_failing", zone="tools.") == 0
    assert value(families, "tooldns_zone_reloads_total", zone="weather.tools.") == 1  # the last good one serves
    assert value(families, "tooldns_zone_serial", zone="weather.tools.") >= zone["soa"]["serial"]


@pytest.mark.integration
def test_one_server_many_zones_counts_each_zone(demo_dir):
    """--listen puts every zone on one address: each query counts for the zone that answered it."""
    address = re.search(r"address: (127\.\d+\.\d+)\.\d+", (demo_dir / "tools.yaml").read_text()).group(1) + ".1"
    tree = start_tree(demo_dir, metrics=("127.0.0.1", 0), listen=[address])
    try:
        where, server = tree.root(), f"dns://{address}:{tree.tree.port}"
        for zone in ("tools.", "weather.tools.", "history.weather.tools."):
            assert udp(intent_query(zone, k=2), where).rcode() == dns.rcode.NOERROR
        before = scrape(tree.tree.metrics_address)
        assert udp(intent_query("history.weather.tools.", k=2), where).rcode() == dns.rcode.NOERROR  # cached
        after = scrape(tree.tree.metrics_address)
        for zone, n in (("tools.", 1), ("weather.tools.", 1), ("history.weather.tools.", 2)):
            assert value(after, "tooldns_dns_requests_total", server=server, zone=zone, type="SRV") == n

        def hits(families, zone):
            return value(families, "tooldns_cache_hits_total", server=server, zone=zone)

        assert hits(after, "history.weather.tools.") - hits(before, "history.weather.tools.") == 1
        assert hits(after, "weather.tools.") == hits(before, "weather.tools.")
        assert any(s.labels["zone"] == "maps.tools." for f in after for s in f.samples
                   if s.name == "tooldns_cache_hits_total")  # every zone of the server has its series
    finally:
        tree.stop()


def test_a_lazy_tree_says_how_many_zones_it_holds_and_how_many_bytes(demo_dir):
    """``--lazy``: zones loaded, the bytes they hold as counted against ``--max-loaded-memory``, the bound,
    loads and drops; a bound small enough that zones are dropped."""
    address = re.search(r"address: (127\.\d+\.\d+)\.\d+", (demo_dir / "tools.yaml").read_text()).group(1) + ".1"
    tree = start_tree(demo_dir, metrics=("127.0.0.1", 0), listen=[address], lazy=True, max_memory=150_000)
    try:
        where, lazy = tree.root(), tree.tree.lazy
        for zone in ("weather.tools.", "history.weather.tools.", "maps.tools.", "finance.tools.", "code.tools."):
            assert udp(intent_query(zone, k=2), where).rcode() == dns.rcode.NOERROR
        with lazy._lock:  # no load half done while the figures are read and compared
            got = scrape(tree.tree.metrics_address)
            loaded, held, loads, drops, mapped = len(lazy.loaded), lazy.held, lazy.loads, lazy.drops, len(lazy.maps)
        assert value(got, "tooldns_lazy_zones_loaded") == loaded >= 1
        assert value(got, "tooldns_lazy_loaded_bytes") == held > 0
        assert value(got, "tooldns_lazy_loaded_bytes_max") == 150_000
        assert value(got, "tooldns_lazy_loads_total") == loads >= 5
        assert value(got, "tooldns_lazy_drops_total") == drops == loads - loaded > 0
        assert value(got, "tooldns_lazy_mapped") == mapped
        assert value(got, "tooldns_lazy_mapped_bytes") == lazy.mapped_bytes
    finally:
        tree.stop()


@pytest.mark.integration
def test_rate_limited_responses(demo_dir):
    tree = start_tree(demo_dir, metrics=("127.0.0.1", 0), rate_limit=1)
    try:
        root = tree.root()
        query = dns.message.make_query("tools.", "SOA")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _ in range(20):  # far over one a second: most are dropped or slipped
                sock.sendto(query.to_wire(), root)
        stats = tree.tree.sockets[root[0]].stats
        assert wait_until(lambda: stats["udp"] == 20)

        def counted_alike() -> bool:
            # a datagram is counted in "udp" before the limiter counts it "rate_limited", then "slipped": a
            # scrape may fall between, so scrape and stats are read afresh until they agree
            families = scrape(tree.tree.metrics_address)
            dropped = value(families, "tooldns_dns_rate_limited_responses_total", zone="tools.", action="drop")
            slipped = value(families, "tooldns_dns_rate_limited_responses_total", zone="tools.", action="slip")
            return dropped + slipped == stats["rate_limited"] > 0 and slipped == stats["slipped"]

        assert wait_until(counted_alike), dict(stats)
    finally:
        tree.stop()


@pytest.mark.integration
def test_llm_calls_tokens_and_fallbacks_survive_a_reload(tmp_path):
    from fake_openai import FakeLLM

    fake = FakeLLM()
    directory = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    path = directory / "tools.yaml"
    root_zone = yaml.safe_load(path.read_text(encoding="utf-8"))
    root_zone["settings"] = {"scorer": "llm", "scorer_options": {"model": "fake", "base_url": fake.base_url,
                                                                 "api_key": "t", "budget_ms": WAIT_TIMEOUT * 1000,
                                                                 "probe_interval": 60}}
    path.write_text(yaml.safe_dump(root_zone, allow_unicode=True), encoding="utf-8")
    tree = start_tree(directory, metrics=("127.0.0.1", 0))
    try:
        where, root = tree.tree.metrics_address, tree.root()
        assert udp(intent_query("tools.", "weather forecast"), root).rcode() == dns.rcode.NOERROR
        assert udp(intent_query("tools.", "stock quotes"), root).rcode() == dns.rcode.NOERROR
        families = scrape(where)
        assert value(families, "tooldns_scorer_calls_total", zone="tools.") == 2
        assert value(families, "tooldns_scorer_prompt_tokens_total", zone="tools.") == fake.prompt_tokens > 0
        assert value(families, "tooldns_scorer_completion_tokens_total", zone="tools.") == fake.completion_tokens > 0
        assert value(families, "tooldns_scorer_fallbacks_total", zone="tools.") == 0
        # the pool thread's answers are counted like the event loop's; nothing is cached for an LLM zone
        assert value(families, "tooldns_dns_requests_total", zone="tools.", type="SRV") == 2
        assert value(families, "tooldns_cache_hits_total", zone="tools.") == 0
        fake.mode = "500"
        assert udp(intent_query("tools.", "send a message"), root).rcode() == dns.rcode.NOERROR
        assert value(scrape(where), "tooldns_scorer_fallbacks_total", zone="tools.") == 1
        root_zone["soa"]["serial"] += 1  # a reload: new scorers, whose counts start at 0
        path.write_text(yaml.safe_dump(root_zone, allow_unicode=True), encoding="utf-8")
        assert wait_until(lambda: value(scrape(where), "tooldns_zone_reloads_total", zone="tools.") == 1)
        families = scrape(where)
        assert value(families, "tooldns_scorer_calls_total", zone="tools.") >= 2  # carried over
        assert value(families, "tooldns_scorer_fallbacks_total", zone="tools.") == 1
        assert value(families, "tooldns_scorer_prompt_tokens_total", zone="tools.") == fake.prompt_tokens
    finally:
        tree.stop()
        fake.close()


@pytest.mark.integration
def test_a_busy_metrics_port_is_a_clear_error(demo_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="cannot serve metrics on 127.0.0.1"):
            start_tree(demo_dir, metrics=("127.0.0.1", taken.getsockname()[1]))


# -- the command line --
def _free_port_pair() -> int:
    """A TCP port P on 127.0.0.1 with P + 1 free too."""
    for _ in range(100):
        port = free_port("127.0.0.1")
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports in a row")


@pytest.mark.integration
def test_serve_with_workers_each_serves_its_metrics(tmp_path):
    """``--workers 2 --metrics``: worker i on PORT+i; the two endpoints' counts sum to the queries sent,
    and both workers append whole lines to one query log."""
    from test_workers import serve, stop

    subnet = fresh_subnet()
    directory = copy_tree(ZONES, tmp_path / "zones", subnet)
    port, metrics_port, log = free_port(f"{subnet}.1"), _free_port_pair(), tmp_path / "queries.jsonl"
    proc, out = serve(str(directory), "--port", str(port), "--workers", "2", "--no-rate-limit",
                      "--metrics", f"127.0.0.1:{metrics_port}", "--query-log", str(log))
    sent = 40
    try:
        assert (f"metrics on http://127.0.0.1:{metrics_port}/metrics to http://127.0.0.1:{metrics_port + 1}/metrics"
                in out)
        query = dns.message.make_query("tools.", "SOA")
        for _ in range(sent):  # a new socket, a new source port each: the kernel spreads them over both
            assert udp(query, (f"{subnet}.1", port)).rcode() == dns.rcode.NOERROR
        counts = [value(scrape(("127.0.0.1", metrics_port + i)), "tooldns_dns_requests_total", zone="tools.",
                        type="SOA") for i in range(2)]
        assert sum(counts) == sent
    finally:
        code, out, err = stop(proc)
    assert code == 0 and "Traceback" not in err
    import json

    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert sum(1 for line in lines if line["zone"] == "tools." and line["type"] == "SOA") == sent


@pytest.mark.integration
def test_serve_metrics_flag_errors(tmp_path):
    directory = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    for args, message in ((["--metrics", "nowhere:99"], "not an IP address"),
                          (["--metrics", "127.0.0.1:99999"], "not a port number"),
                          (["--port", "5300", "--workers", "2", "--metrics", "127.0.0.1:0"], "fixed --metrics port")):
        proc = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(directory), *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=WAIT_TIMEOUT)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


@pytest.mark.integration
@pytest.mark.parametrize("command", [["-m", "tooldns.cli"], ["-m", "resolver_client"]])
def test_version_flags(command):
    proc = subprocess.run([sys.executable, *command, "--version"], capture_output=True, text=True, cwd=ROOT,
                          timeout=WAIT_TIMEOUT)
    assert proc.returncode == 0
    assert proc.stdout.split() == [("tooldns" if "tooldns.cli" in command else "tooldns-resolve"), tooldns.__version__]
    assert tooldns.__version__[0].isdigit()


# -- reading queries and replies from bytes --
def test_parse_address():
    assert parse_address("") == ("127.0.0.1", 9153)
    assert parse_address(":9200") == ("127.0.0.1", 9200)
    assert parse_address("0.0.0.0") == ("0.0.0.0", 9153)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("localhost:9153", "127.0.0.1:x", "[::1", "1.2.3.4:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_byte_readers_agree_with_dnspython(demo_tree):
    root = demo_tree.root()
    query = intent_query("tools.", k=3)
    data = query.to_wire()
    end = question_end(data)
    assert end and qtype_of(data, end) == 33 and data[12:end] == query.question[0].name.to_wire()
    referral = udp(query, root)
    assert rcode_of(referral.to_wire()) == 0
    assert results_of(referral.to_wire()) == len({rr.name for rr in referral.authority})  # children referred to
    leaf = (demo_tree.tree.addresses["history.weather.tools."][0], root[1])
    answer = udp(intent_query("history.weather.tools.", k=2), leaf)
    assert results_of(answer.to_wire()) == 2  # two SRV, the CNAME not counted
    nx = udp(dns.message.make_query("nothing-here.tools.", "A"), root)
    assert rcode_of(nx.to_wire()) == 3 and results_of(nx.to_wire()) == 0
    badvers = dns.message.make_query("tools.", "SOA", use_edns=1)  # EDNS version 1: BADVERS (16)
    reply = udp(badvers, root)
    assert reply.rcode() == dns.rcode.BADVERS and rcode_of(reply.to_wire()) == 16
    assert question_end(b"\x00" * 12) == 0 and question_end(data[:14]) == 0
    assert question_end(data[:12] + b"\xc0\x0c" + data[end:]) == 0  # a compression pointer: unreadable


def test_zone_of_a_server_of_several_zones(demo_dir):
    from tooldns.serving.multizone import MultiZoneResolver
    from tooldns.serving.resolver import ZoneResolver
    from tooldns.serving.tree import load_tree

    resolver = MultiZoneResolver([ZoneResolver(s) for s in load_tree(demo_dir)])
    zone_of = ZoneOf(resolver)
    for name, zone in (("_any._tcp._weather.tools.", "weather.tools."), ("_any._tcp.weather.tools.", "weather.tools."),
                       ("ns1.history.weather.tools.", "history.weather.tools."), ("elsewhere.example.", "tools.")):
        data = dns.message.make_query(name, "SRV").to_wire()
        assert zone_of(data, question_end(data)) == zone
        assert zone_of(data, question_end(data)) == zone  # remembered
    assert zone_of(struct.pack("!6H", 1, 0, 0, 0, 0, 0), 0) == "tools."


@pytest.mark.integration
def test_udp_receive_buffer_is_raised_by_default(demo_dir):
    """Before, each server kept the system's default receive buffer (208 KiB here): a burst of 1 kB
    queries past about 200 was dropped by the kernel. Now it asks for DEFAULT_RCVBUF, forced where
    allowed, else capped at net.core.rmem_max (the kernel reports twice what it grants)."""
    from tooldns.serving.sockbuf import DEFAULT_RCVBUF

    rmem_max = int(open("/proc/sys/net/core/rmem_max").read())
    tree = start_tree(demo_dir)
    try:
        for server in tree.tree.sockets.values():
            assert server.rcvbuf_effective >= min(DEFAULT_RCVBUF, rmem_max)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as plain:
                assert server.rcvbuf_effective > plain.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    finally:
        tree.stop()


@pytest.mark.integration
def test_kernel_drops_of_a_burst_are_counted(demo_dir):
    """A burst sent while the server's event loop is busy overflows a small receive buffer: the
    datagrams the kernel drops never reach the server, and only /proc/net/udp tells of them."""
    import threading

    tree = start_tree(demo_dir, metrics=("127.0.0.1", 0), rcvbuf=4096, rate_limit=0)
    busy, release = threading.Event(), threading.Event()
    try:
        root = tree.root()
        server = tree.tree.sockets[root[0]]
        assert server.udp_drops() == 0 and value(scrape(tree.tree.metrics_address),
                                                 "tooldns_server_udp_kernel_drops_total") == 0
        tree.loop.call_soon_threadsafe(lambda: (busy.set(), release.wait(WAIT_TIMEOUT)))  # the loop reads nothing
        assert busy.wait(WAIT_TIMEOUT)
        query = intent_query("tools.").to_wire()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _ in range(500):
                sock.sendto(query, root)
        release.set()
        assert wait_until(lambda: server.stats["udp"] + (server.udp_drops() or 0) >= 500)
        drops = server.udp_drops()
        assert drops > 0
        families = scrape(tree.tree.metrics_address)
        assert value(families, "tooldns_server_udp_kernel_drops_total", server=f"dns://{root[0]}:{root[1]}") == drops
        assert value(families, "tooldns_server_udp_receive_buffer_bytes") > 0
    finally:
        release.set()
        tree.stop()


def test_rcvbuf_falls_back_to_the_capped_option_where_forcing_is_not_allowed():
    """Without CAP_NET_ADMIN, SO_RCVBUFFORCE fails: SO_RCVBUF is asked instead (capped at rmem_max)."""
    from tooldns.serving.sockbuf import SO_RCVBUFFORCE, raise_rcvbuf

    class Unprivileged:  # a real socket that refuses to be forced, as for a user without the capability
        def __init__(self, sock):
            self.sock, self.asked = sock, []

        def setsockopt(self, level, option, value):
            self.asked.append(option)
            if option == SO_RCVBUFFORCE:
                raise PermissionError(1, "Operation not permitted")
            self.sock.setsockopt(level, option, value)

        def getsockopt(self, level, option):
            return self.sock.getsockopt(level, option)

    rmem_max = int(open("/proc/sys/net/core/rmem_max").read())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        wrapped = Unprivileged(sock)
        assert raise_rcvbuf(wrapped, 8 * rmem_max) == 2 * rmem_max  # the kernel's cap, doubled as it reports
        assert wrapped.asked == [SO_RCVBUFFORCE, socket.SO_RCVBUF]
