"""Unbound, a validating recursive resolver nobody here wrote, iterating the signed shipped tree.

A copy of the shipped zones is signed (``tooldns dnssec keygen``'s library function) and served on port
53 of its glue addresses, as delegations on the Internet are reached; Unbound is given the root zone's
key as its trust anchor and a stub for ``tools.`` (docs/dnssec.md, "Behind a recursive resolver"). What
a resolver without the intent option can ask it answers, validated (AD set): the root's SOA, a leaf's
SRV records, a tool's own SRV record, a DS at each level, and a name that does not exist (a denial
proven by a signed NSEC). Given another key as anchor, Unbound refuses the same answers as bogus
(SERVFAIL).

Skipped when Unbound is not installed (``apt-get install unbound``) or port 53 cannot be bound on
loopback (not root, and ``net.ipv4.ip_unprivileged_port_start`` above 53)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tooldns.dnssec.keys import generate, load_keys
from tooldns.dnssec.manage import keygen_tree
from tooldns.serving.tree import TreeThread

from conftest import WAIT_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet, wait_until

UNBOUND = shutil.which("unbound") or shutil.which("unbound", path="/usr/sbin:/usr/local/sbin")  # sbin: off some PATHs
HKO = "hko.weather.tools."


def _port_53_free(address: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((address, 53))
        return True
    except OSError:
        return False


pytestmark = [pytest.mark.integration,  # Unbound in a child process, the tree on loopback port 53
              pytest.mark.skipif(UNBOUND is None, reason="Unbound is not installed (apt-get install unbound)"),
              pytest.mark.skipif(not _port_53_free("127.0.0.1") and not _port_53_free("127.250.250.250"),
                                 reason="port 53 cannot be bound on loopback here (not root)")]

CONFIG = """\
server:
  interface: {address}
  port: {port}
  do-ip6: no
  do-not-query-localhost: no
  username: ""
  chroot: ""
  directory: "{directory}"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 1
  val-log-level: 2
  trust-anchor-file: "{anchor}"
  module-config: "validator iterator"
remote-control:
  control-enable: no
stub-zone:
  name: "tools."
  stub-addr: {root}@53
"""


class Unbound:
    """``unbound -d`` in a child process, on *address*:*port*, trusting *anchor* (a DNSKEY line) for
    ``tools.``, whose servers it finds through a stub at *root* (port 53)."""

    def __init__(self, directory: Path, address: str, root: str, anchor: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "anchor").write_text(anchor + "\n", encoding="utf-8")
        self.address, self.port = address, free_port(address)
        conf = directory / "unbound.conf"
        conf.write_text(CONFIG.format(address=address, port=self.port, directory=directory,
                                      anchor=directory / "anchor", root=root), encoding="utf-8")
        checkconf = Path(UNBOUND).with_name("unbound-checkconf")  # shipped beside it by Debian's package
        if checkconf.exists():
            check = subprocess.run([str(checkconf), str(conf)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
        self.log = directory / "unbound.log"
        self.proc = subprocess.Popen([UNBOUND, "-d", "-c", str(conf)], stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        assert wait_until(self._up), self.log.read_text(errors="replace")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"unbound exited: {self.log.read_text(errors='replace')}")
        try:  # a name outside tools. is answered at once (REFUSED or SERVFAIL: no root hints reach)
            dns.query.udp(dns.message.make_query("tools.", "NS"), self.address, port=self.port, timeout=0.5)
            return True
        except (dns.exception.Timeout, OSError):
            return False

    def ask(self, name: str, rdtype: str) -> dns.message.Message:
        query = dns.message.make_query(name, rdtype, want_dnssec=True)  # RD set, as a stub asks
        return dns.query.udp(query, self.address, port=self.port, timeout=WAIT_TIMEOUT)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def signed_tree(tmp_path_factory, integration):
    """The signed shipped zones served on port 53 of their glue addresses (a fresh 127.A.B subnet)."""
    subnet = fresh_subnet()
    if not _port_53_free(f"{subnet}.1"):
        pytest.skip("port 53 cannot be bound on loopback here")
    zdir = copy_tree(ZONES, tmp_path_factory.mktemp("zones"), subnet)
    keygen_tree(zdir)
    tree = TreeThread(zdir, 53).start()
    yield subnet, zdir
    tree.stop()


def _secure(msg: dns.message.Message) -> bool:
    return msg.rcode() == dns.rcode.NOERROR and bool(msg.flags & dns.flags.AD)


def _records(msg: dns.message.Message, rdtype: str) -> list:
    return [r for rrset in msg.answer if rrset.rdtype == dns.rdatatype.from_text(rdtype) for r in rrset]


def test_unbound_validates_names_srv_ds_and_denial_down_the_tree(signed_tree, tmp_path):
    subnet, zdir = signed_tree
    anchor = load_keys(zdir / "keys", "tools.")[0].dnskey_text()
    unbound = Unbound(tmp_path / "unbound", f"{subnet}.250", f"{subnet}.1", anchor)
    try:
        soa = unbound.ask("tools.", "SOA")
        assert _secure(soa) and len(_records(soa, "SOA")) == 1, soa
        leaf = unbound.ask(f"_http._tcp.{HKO}", "SRV")  # a leaf's tools, as a plain DNS client asks
        assert _secure(leaf) and _records(leaf, "SRV"), leaf
        tool = unbound.ask(f"hko-climate._http._tcp.{HKO}", "SRV")
        assert _secure(tool) and len(_records(tool, "SRV")) == 1, tool
        for child in ("weather.tools.", HKO):  # a DS at each level, from the parent
            ds = unbound.ask(child, "DS")
            assert _secure(ds) and _records(ds, "DS"), ds
        denial = unbound.ask("no-such-zone.tools.", "A")  # compact denial: NODATA proven by a signed NSEC
        assert _secure(denial) and not denial.answer, denial
        tool_denied = unbound.ask(f"no-such-tool._http._tcp.{HKO}", "SRV")
        assert _secure(tool_denied) and not _records(tool_denied, "SRV"), tool_denied
    finally:
        unbound.stop()


def test_unbound_refuses_the_tree_as_bogus_under_another_anchor(signed_tree, tmp_path):
    subnet, _ = signed_tree
    stranger = generate("tools.").dnskey_text()  # a key the tree was never signed with
    unbound = Unbound(tmp_path / "unbound", f"{subnet}.251", f"{subnet}.1", stranger)
    try:
        for name, rdtype in [("tools.", "SOA"), (f"hko-climate._http._tcp.{HKO}", "SRV")]:
            reply = unbound.ask(name, rdtype)
            assert reply.rcode() == dns.rcode.SERVFAIL and not reply.answer, reply
    finally:
        unbound.stop()
