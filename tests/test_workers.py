"""Serving from several processes: ``tooldns serve --workers N`` (SO_REUSEPORT), and one zone's name
servers in processes of their own (``--only``, ``--listen``), one of them killed mid-way."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dnslib import DNSRecord

from resolver_client import Resolver

from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet, wait_until

pytestmark = pytest.mark.integration  # tooldns serve processes


def serve(*args: str) -> tuple[subprocess.Popen, str]:
    """``tooldns serve ARGS`` in a process of its own, once it serves; its output so far."""
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C" in line:
            return proc, "".join(lines)
    proc.wait(WAIT_TIMEOUT)
    raise AssertionError("tooldns serve did not start:\n" + "".join(lines) + proc.stderr.read())


def stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=WAIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


def stats(address: str, port: int) -> dict[str, str]:
    """``dig CH TXT stats.tooldns.`` from a new socket (a new source port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(bytes(DNSRecord.question("stats.tooldns.", "TXT", "CH").pack()), (address, port))
        reply = DNSRecord.parse(sock.recv(4096))
    return dict(s.decode().split("=", 1) for s in reply.rr[0].rdata.data)


def children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


def resolves(root: tuple[str, int], intent: str = "historical weather Hong Kong") -> bool:
    with Resolver(root=root, timeout=REPLY_TIMEOUT, cache=False) as r:
        res = r.resolve(intent, k=3)
    return bool(res.tools) and res.tools[0].zone.endswith(".weather.tools.")


@pytest.fixture
def zonedir(tmp_path) -> tuple[Path, str]:
    subnet = fresh_subnet()
    return copy_tree(ZONES, tmp_path / "zones", subnet), subnet


def test_workers_share_the_addresses_and_a_dead_one_is_replaced(zonedir):
    directory, subnet = zonedir
    port = free_port(f"{subnet}.1")
    proc, out = serve(str(directory), "--port", str(port), "--workers", "2", "--no-rate-limit")
    try:
        pids = [int(p) for p in re.search(r"worker processes \(pids ([\d ]+)\)", out).group(1).split()]
        helpers = children(proc.pid) - set(pids)  # multiprocessing's resource tracker
        assert len(pids) == 2 and set(pids) <= children(proc.pid) and len(helpers) <= 1
        # the kernel spreads source ports over the two sockets; each process counts its own queries
        seen = [int(stats(f"{subnet}.1", port)["queries"]) for _ in range(64)]
        assert len(set(seen)) < len(seen), "one process answered every query"
        assert resolves((f"{subnet}.1", port))
        killed = pids[0]
        os.kill(killed, signal.SIGKILL)
        assert wait_until(lambda: len(children(proc.pid) - helpers) == 2 and killed not in children(proc.pid))
        assert wait_until(lambda: all(resolves((f"{subnet}.1", port)) for _ in range(3)))
    finally:
        code, out, err = stop(proc)
    assert code == 0 and "stopped" in out and "starting it again" in err
    assert "Traceback" not in err


def test_workers_need_a_fixed_port(zonedir):
    proc = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(zonedir[0]), "--port", "0",
                           "--workers", "2"], capture_output=True, text=True, cwd=ROOT, timeout=WAIT_TIMEOUT)
    assert proc.returncode == 2 and "--workers needs a fixed --port" in proc.stderr


def test_workers_sign_with_the_keys_and_validity_they_are_given(zonedir, tmp_path):
    """--keys (a directory other than ZONEDIR/keys) and --signature-validity reach every worker."""
    import dns.message
    import dns.query
    import dns.rdatatype

    from tooldns.dnssec.manage import keygen_tree

    directory, subnet = zonedir
    keygen_tree(directory, keydir=tmp_path / "elsewhere")
    port = free_port(f"{subnet}.1")
    proc, _ = serve(str(directory), "--port", str(port), "--workers", "2", "--no-rate-limit",
                    "--keys", str(tmp_path / "elsewhere"), "--signature-validity", "2")
    try:
        for _ in range(8):  # each query from a new source port: the kernel spreads them over the workers
            query = dns.message.make_query("tools.", "SOA", want_dnssec=True, flags=0)
            reply = dns.query.udp(query, f"{subnet}.1", port=port, timeout=REPLY_TIMEOUT)
            (sig,) = [rd for r in reply.answer if r.rdtype == dns.rdatatype.RRSIG for rd in r]
            assert abs(sig.expiration - sig.inception - (2 * 86400 + 3600)) <= 1  # 2 days, an hour's slack before
    finally:
        code, _, err = stop(proc)
    assert code == 0 and "Traceback" not in err


def _second_name_server(directory: Path, subnet: str) -> str:
    """Give weather.tools. a second name server, ns2 on subnet.26, in its file and in the glue."""
    second = f"{subnet}.26"
    own = directory / "weather.tools.yaml"
    own.write_text(own.read_text(encoding="utf-8").replace(
        f"- name: ns1.weather.tools.\n  address: {subnet}.2\n",
        f"- name: ns1.weather.tools.\n  address: {subnet}.2\n- name: ns2.weather.tools.\n  address: {second}\n"),
        encoding="utf-8")
    parent = directory / "tools.yaml"
    parent.write_text(parent.read_text(encoding="utf-8").replace(
        f"  - name: ns1.weather.tools.\n    address: {subnet}.2\n",
        f"  - name: ns1.weather.tools.\n    address: {subnet}.2\n  - name: ns2.weather.tools.\n    address: {second}\n"),
        encoding="utf-8")
    assert second in own.read_text(encoding="utf-8") and second in parent.read_text(encoding="utf-8")
    return second


def test_a_name_server_killed_mid_way_loses_no_resolution(zonedir):
    """weather.tools.'s two name servers run in two processes (--only, --listen), the rest of the tree
    in a third; the first name server is killed after 10 of 30 resolutions: all 30 find their tools."""
    directory, subnet = zonedir
    second = _second_name_server(directory, subnet)
    port = free_port(f"{subnet}.1")
    others = ",".join(sorted(p.name[:-len("yaml")] for p in directory.glob("*.yaml") if p.name != "weather.tools.yaml"))
    procs = []
    try:
        procs.append(serve(str(directory), "--port", str(port), "--only", others)[0])
        weather = ["--port", str(port), "--only", "weather.tools.", "--answer-cache", "0"]  # every query counted
        first, out = serve(str(directory), *weather, "--listen", f"{subnet}.2")
        procs.append(first)
        assert f"weather.tools.                   {subnet}.2 " in out and "1 zones on 1 addresses" in out
        procs.append(serve(str(directory), *weather, "--listen", second)[0])
        found = []
        for i in range(30):
            if i == 10:
                first.kill()
                first.wait(WAIT_TIMEOUT)
            found.append(resolves((f"{subnet}.1", port), ["historical weather Hong Kong", "typhoon warning"][i % 2]))
        assert all(found), found
        assert int(stats(second, port)["queries"]) >= 20  # the second answered once the first was gone
    finally:
        for proc in procs:
            stop(proc)


def soa_serial(address: str, port: int, zone: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(bytes(DNSRecord.question(zone, "SOA").pack()), (address, port))
        return DNSRecord.parse(sock.recv(4096)).rr[0].rdata.times[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_with_watch_interval_0_an_edit_is_served_on_sighup_and_not_before(zonedir, workers):
    """``--watch-interval 0``: the files are not looked at on a timer (a server of many zones that stats
    none of them while idle); SIGHUP makes it look, as BIND and NSD reload, passed on to every worker."""
    directory, subnet = zonedir
    port = free_port(f"{subnet}.1")
    proc, _ = serve(str(directory), "--port", str(port), "--workers", str(workers), "--watch-interval", "0",
                    "--no-rate-limit")
    leaf = directory / "history.weather.tools.yaml"
    address = re.search(r"address: (\S+)", leaf.read_text()).group(1)
    try:
        before = soa_serial(address, port, "history.weather.tools.")
        leaf.write_text(leaf.read_text().replace("serial: 2026113001", "serial: 2026113050"))
        # three rounds of the default watcher pass: nothing looks at the file
        assert not wait_until(lambda: soa_serial(address, port, "history.weather.tools.") != before, timeout=1.5)
        proc.send_signal(signal.SIGHUP)
        # every worker looked (each query from a new source port: the kernel spreads them over the workers)
        assert wait_until(lambda: all(soa_serial(address, port, "history.weather.tools.") >= 2026113050
                                      for _ in range(8)))
    finally:
        code, _, err = stop(proc)
    assert code == 0 and "Traceback" not in err, err[-4000:]


def test_watch_interval_must_be_a_number_of_seconds(zonedir):
    for bad in ("-1", "soon", "inf"):
        proc = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(zonedir[0]), "--watch-interval", bad],
                              capture_output=True, text=True, cwd=ROOT, timeout=WAIT_TIMEOUT)
        assert proc.returncode == 2 and "--watch-interval: must be a number of seconds, 0 or more" in proc.stderr
