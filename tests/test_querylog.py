"""The query log (``tooldns serve --query-log FILE``): one JSON object per query answered, the intent's
text only when asked, never in the way of serving (a file that cannot be written, a rotated one)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

import dns.message
import dns.query
import dns.rcode
import pytest

from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, fresh_subnet, start_tree, wait_until
from test_metrics import INTENT, intent_query, udp
from tooldns.protocol.summary import SUMMARY_LABEL
from tooldns.serving.querylog import QueryLog, question_text

FIELDS = {"time", "client", "proto", "zone", "name", "type", "k", "rcode", "results", "duration_us", "cached"}


class _Server:  # what a recorder reads of its server: the zone served
    class resolver:
        class source:
            class index:
                origin = "tools."


def lines_of(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def asked(path) -> list[dict]:
    """The lines of the queries a test sent: not the SOA polls, NOTIFYs and summary fetches with which
    parents keep their children's summaries fresh."""
    return [line for line in lines_of(path) if line["type"] != "SOA" and not line["name"].startswith(SUMMARY_LABEL)]


@pytest.mark.integration
def test_one_json_line_per_query_without_intents(demo_dir, tmp_path):
    log = tmp_path / "queries.jsonl"
    tree = start_tree(demo_dir, query_log=str(log))
    try:
        root = tree.root()
        leaf = (tree.tree.addresses["history.weather.tools."][0], root[1])
        assert udp(intent_query("tools.", k=3), root).rcode() == dns.rcode.NOERROR
        assert udp(intent_query("tools.", k=3), root).rcode() == dns.rcode.NOERROR  # from the packet cache
        assert dns.query.tcp(intent_query("history.weather.tools.", k=2), leaf[0], port=leaf[1],
                             timeout=REPLY_TIMEOUT).rcode() == dns.rcode.NOERROR
        assert udp(dns.message.make_query("nothing-here.tools.", "TXT"), root).rcode() == dns.rcode.NXDOMAIN
        assert udp(intent_query("tools.", option=b"\x00\x00\x09\x03abc"), root).rcode() == dns.rcode.FORMERR
    finally:
        tree.stop()  # writes what is pending
    lines = asked(log)
    assert [set(line) for line in lines] == [FIELDS] * 5  # no intent: it was not asked for
    first, cached, leaf_line, nx, formerr = lines
    assert first == {**first, "client": "127.0.0.1", "proto": "udp", "zone": "tools.", "name": "_any._tcp._tools.",
                     "type": "SRV", "k": 3, "rcode": "NOERROR", "cached": False}
    assert first["results"] >= 1 and first["duration_us"] >= 0 and first["time"].endswith("Z")
    assert cached["cached"] is True and cached["results"] == first["results"]
    assert leaf_line == {**leaf_line, "proto": "tcp", "zone": "history.weather.tools.", "k": 2, "results": 2}
    assert nx == {**nx, "name": "nothing-here.tools.", "type": "TXT", "k": None, "rcode": "NXDOMAIN", "results": 0}
    assert formerr == {**formerr, "rcode": "FORMERR", "k": None, "zone": "tools."}
    assert INTENT not in log.read_text(encoding="utf-8")


@pytest.mark.integration
def test_intents_only_when_asked(demo_dir, tmp_path):
    log = tmp_path / "queries.jsonl"
    tree = start_tree(demo_dir, query_log=str(log), log_intents=True)
    try:
        udp(intent_query("tools.", "天气 in Hong Kong \"quoted\"\nnext line", 2), tree.root())
        udp(dns.message.make_query("tools.", "NS"), tree.root())
    finally:
        tree.stop()
    lines = asked(log)
    assert lines[0]["intent"] == "天气 in Hong Kong \"quoted\"\nnext line" and lines[0]["k"] == 2
    assert lines[1]["intent"] is None and lines[1]["type"] == "NS"
    assert all(line.count("\n") == 0 for line in log.read_text(encoding="utf-8").splitlines())


@pytest.mark.integration
def test_a_log_that_cannot_be_written_does_not_stop_serving(demo_dir, caplog):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    tree = start_tree(demo_dir, query_log="/dev/full", metrics=("127.0.0.1", 0))  # every write: ENOSPC
    try:
        root = tree.root()
        for _ in range(5):
            assert udp(dns.message.make_query("tools.", "SOA"), root).rcode() == dns.rcode.NOERROR
        qlog = tree.tree.query_log
        assert wait_until(lambda: qlog.dropped >= 5)
        assert qlog.written == 0
        where = tree.tree.metrics_address
        from test_metrics import scrape, value

        assert value(scrape(where), "tooldns_querylog_dropped_total") >= 5
        assert udp(intent_query("tools."), root).rcode() == dns.rcode.NOERROR  # still serving
    finally:
        tree.stop()
    assert "cannot write" in caplog.text and "serving goes on" in caplog.text


def test_a_rotated_log_is_followed(tmp_path):
    log = tmp_path / "queries.jsonl"
    qlog = QueryLog(str(log), interval=0.05)

    record = qlog.recorder(_Server)
    query, reply = dns.message.make_query("tools.", "SOA"), None
    reply = dns.message.make_response(query)
    record(query.to_wire(), reply.to_wire(), True, ("192.0.2.1", 5353), 12_000, False)
    assert wait_until(lambda: log.exists() and log.read_text(encoding="utf-8").count("\n") == 1)
    log.rename(tmp_path / "queries.jsonl.1")  # what logrotate does
    record(query.to_wire(), reply.to_wire(), False, ("192.0.2.2", 5353), 3_000, True)
    qlog.close()
    rotated, fresh = lines_of(tmp_path / "queries.jsonl.1"), lines_of(log)
    assert [line["client"] for line in rotated] == ["192.0.2.1"] and [line["client"] for line in fresh] == ["192.0.2.2"]
    assert fresh[0]["duration_us"] == 3 and fresh[0]["proto"] == "tcp" and fresh[0]["cached"] is True


def test_a_full_queue_drops_lines_instead_of_waiting(tmp_path):
    qlog = QueryLog(str(tmp_path / "q.jsonl"), max_pending=3, interval=60)  # the writer sleeps for a minute

    record = qlog.recorder(_Server)
    query = dns.message.make_query("tools.", "SOA")
    wire = dns.message.make_response(query).to_wire()
    for _ in range(10):
        record(query.to_wire(), wire, True, ("192.0.2.1", 53), 1000, False)
    assert qlog.dropped == 7
    qlog.close()
    assert qlog.written == 3 and len(lines_of(tmp_path / "q.jsonl")) == 3


def test_question_text_escapes_odd_octets():
    wire = dns.message.make_query(dns.name.Name([b"a.b", b"\x00\xff", b"tools", b""]), "A").to_wire()
    from tooldns.serving.observe import question_end

    assert question_text(wire, question_end(wire)) == "a\\046b.\\000\\255.tools."


@pytest.mark.integration
def test_an_unwritable_path_is_a_clear_error(tmp_path):
    directory = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    proc = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(directory), "--port", "0", "--query-log",
                           str(tmp_path / "no" / "such" / "dir" / "q.jsonl")],
                          capture_output=True, text=True, cwd=ROOT, timeout=WAIT_TIMEOUT)
    assert proc.returncode == 3 and "cannot open the query log" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.integration
def test_serve_logs_to_stderr_and_serves_metrics(tmp_path):
    """``tooldns serve --metrics 127.0.0.1:0 --query-log - --log-intents``, one process."""
    from test_metrics import scrape, value
    from test_workers import serve, stop

    directory = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    proc, out = serve(str(directory), "--port", "0", "--metrics", "127.0.0.1:0", "--query-log", "-", "--log-intents")
    try:
        metrics_port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", out).group(1))
        assert "query log: standard error, with intents" in out
        root = re.search(r"--root ([\d.]+):(\d+)", out)
        where = (root.group(1), int(root.group(2)))
        assert udp(intent_query("tools."), where).rcode() == dns.rcode.NOERROR
        assert value(scrape(("127.0.0.1", metrics_port)), "tooldns_dns_requests_total", zone="tools.", type="SRV") == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=REPLY_TIMEOUT) as r:
            assert "tooldns_querylog_lines_total" in r.read().decode()
    finally:
        code, out, err = stop(proc)
    assert code == 0
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(line["intent"] == INTENT and line["zone"] == "tools." for line in logged)


def test_line_separators_in_an_intent_are_escaped(tmp_path):
    """U+0085 and U+2028 end a line for Python's splitlines, U+009B starts a terminal's escape: an
    intent holding them must stay on its one line, and read back as it was sent."""
    log = tmp_path / "q.jsonl"
    qlog = QueryLog(str(log), intents=True, interval=60)

    record = qlog.recorder(_Server)
    intent = "weather\u0085{\"forged\": 1}\u2028next\u2029\u009b31m red\u202e"
    query = intent_query("tools.", intent, 2)
    record(query.to_wire(), dns.message.make_response(query).to_wire(), True, ("192.0.2.1", 53), 1000, False)
    qlog.close()
    text = log.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 1 and not any(c in text for c in "\u0085\u2028\u2029\u009b\u202e")
    assert lines_of(log)[0]["intent"] == intent
