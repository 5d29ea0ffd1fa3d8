"""dnsdist in front of a tree (``deploy/dnsdist.conf``, ``docs/dnsdist.md``): every zone on dnsdist's
one address, two tooldns backends behind it; each intent gets its own, correct answer, a repeated
intent is a cache hit, intent-ranked records still reach clients with TTL 0, and a backend can die.

Skipped when dnsdist is not installed (``apt-get install dnsdist``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from resolver_client import Resolver
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.tree import TreeThread

from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet, wait_until

pytestmark = [pytest.mark.integration,  # dnsdist in front of servers on loopback
              pytest.mark.skipif(shutil.which("dnsdist") is None, reason="dnsdist is not installed (apt-get install dnsdist)")]

CONF = ROOT / "deploy" / "dnsdist.conf"


def configure(public: str, internal: str, backends: list[str]) -> str:
    """The shipped configuration with its settings replaced (rate limit off: the test is one client)."""
    text = CONF.read_text(encoding="utf-8")
    for pattern, value in [(r'local public = "[^"]*"', f'local public = "{public}"'),
                           (r'local internal = "[^"]*"', f'local internal = "{internal}"'),
                           (r"local backends = \{[^}]*\}", "local backends = {" + ", ".join(f'"{b}"' for b in backends) + "}"),
                           (r"local udp_queries_per_second = \d+", "local udp_queries_per_second = 0")]:
        text, n = re.subn(pattern, value, text)
        assert n == 1, pattern
    return text


def one_address(dst: Path, address: str) -> Path:
    """The shipped zones with every name server on *address* (dnsdist's): glue names it everywhere."""
    copy_tree(ZONES, dst, "127.0.0")
    for f in dst.glob("*.yaml"):
        f.write_text(re.sub(r"127\.0\.0\.\d+", address, f.read_text(encoding="utf-8")), encoding="utf-8")
    return dst


def ask(address: str, port: int, name: str, intent: str | None = None, k: int = 3, rdtype: str = "SRV",
        tcp: bool = False, options=None, timeout: float = REPLY_TIMEOUT) -> dns.message.Message:
    opts = list(options or []) + ([dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(intent, k))] if intent else [])
    query = dns.message.make_query(name, rdtype, use_edns=0, payload=1232, options=opts, flags=0)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, address, port=port, timeout=timeout)


def view(msg: dns.message.Message) -> tuple:
    """A reply less its ID and the ageing of TTLs (a cache lowers them): records with TTL 0 stay 0."""
    sections = [[(rrset.name, rrset.rdtype, rrset.ttl == 0, sorted(r.to_text() for r in rrset)) for rrset in section]
                for section in (msg.answer, msg.authority, msg.additional)]
    return msg.flags, msg.rcode(), msg.edns, [o.to_text() for o in msg.options], sections


@pytest.fixture(scope="module")
def stack(tmp_path_factory, integration):
    """dnsdist on subnet.1 (public) and subnet.4 (its cache stage) in front of two backends (TreeThreads
    on subnet.2 and subnet.3, answer caches off so that every query they get counts)."""
    subnet = fresh_subnet()
    zones = one_address(tmp_path_factory.mktemp("zones"), f"{subnet}.1")
    backend_port = free_port(f"{subnet}.1")
    # the first backend serves subnet.1 on its own port too: resolutions that bypass dnsdist follow the glue
    backends = [TreeThread(zones, backend_port, listen=listen, answer_cache=0, rate_limit_exempt=["127.0.0.0/8"],
                           watch_interval=3600).start() for listen in ([f"{subnet}.2", f"{subnet}.1"], [f"{subnet}.3"])]
    public, internal = (f"{subnet}.1", free_port(f"{subnet}.1")), (f"{subnet}.4", free_port(f"{subnet}.4"))
    assert public[1] != backend_port
    conf = tmp_path_factory.mktemp("dnsdist") / "dnsdist.conf"
    conf.write_text(configure(f"{public[0]}:{public[1]}", f"{internal[0]}:{internal[1]}",
                              [f"{subnet}.{n}:{backend_port}" for n in (2, 3)]), encoding="utf-8")
    log = (conf.parent / "dnsdist.log").open("w")
    proc = subprocess.Popen(["dnsdist", "--supervised", "--disable-syslog", "-C", str(conf)], stdout=log,
                            stderr=subprocess.STDOUT)

    def up() -> bool:
        try:
            return ask(*public, "tools.", rdtype="SOA").rcode() == dns.rcode.NOERROR
        except (dns.exception.Timeout, OSError):
            return proc.poll() is not None  # dnsdist failed: stop waiting, the assertion below says so

    try:
        assert wait_until(up) and proc.poll() is None, (conf.parent / "dnsdist.log").read_text()
        yield public, backends, (f"{subnet}.2", backend_port), conf.parent / "dnsdist.log"
    finally:
        proc.terminate()
        proc.wait(WAIT_TIMEOUT)
        log.close()
        for tree in backends:
            tree.stop()


def asked(backends, origin: str) -> int:
    """Queries the backends' servers of zone *origin* have answered."""
    return sum(tree.counters().get(origin, {}).get("queries", 0) for tree in backends)


def test_each_intent_gets_its_own_answer_and_a_repeat_is_a_cache_hit(stack):
    public, backends, direct, _ = stack
    cursor, intents = "_any._tcp._weather.tools.", ["historical weather records", "weather forecast for tomorrow",
                                                    "typhoon warning"]
    replies, before = {}, asked(backends, "weather.tools.")
    for round_ in range(2):
        for intent in intents:
            replies.setdefault(intent, []).append(ask(*public, cursor, intent))
        # the first round reached the backends once per intent, the second not at all
        assert asked(backends, "weather.tools.") - before == len(intents), round_
    first_ns = {intent: r[0].authority[0].name.to_text() for intent, r in replies.items()}
    assert first_ns["historical weather records"] == "history.weather.tools."
    assert first_ns["weather forecast for tomorrow"] == "forecast.weather.tools."
    assert first_ns["typhoon warning"] == "hko.weather.tools."
    for intent, (miss, hit) in replies.items():
        expected = view(ask(*direct, cursor, intent))  # what a backend answers, asked directly
        assert view(miss) == expected and view(hit) == expected, intent
        ranked = [rrset for rrset in miss.additional if rrset.rdtype == dns.rdatatype.TXT]
        assert ranked and all(rrset.ttl == 0 for rrset in hit.additional if rrset.rdtype == dns.rdatatype.TXT)


def test_answers_and_errors_pass_through_unchanged(stack):
    public, _, direct, _ = stack
    cases = [("_any._tcp._tools.", "bitcoin price", 2, "SRV", False),
             ("_any._tcp.hko.weather.tools.", "typhoon warning", 2, "SRV", False),  # a leaf's ranked tools
             ("_any._tcp._docs.productivity.tools.", "create and edit documents", 8, "SRV", True),
             ("hko-current._http._tcp.hko.weather.tools.", None, 3, "TXT", False),
             ("nope.weather.tools.", None, 3, "A", False)]
    for name, intent, k, rdtype, tcp in cases:
        assert view(ask(*public, name, intent, k, rdtype, tcp)) == view(ask(*direct, name, intent, k, rdtype, tcp)), name
    bad = [dns.edns.GenericOption(INTENT_OPTION_CODE, b"\x00\x00\x05\x03ab")]
    via, straight = ask(*public, "_any._tcp._tools.", options=bad), ask(*direct, "_any._tcp._tools.", options=bad)
    assert via.rcode() == dns.rcode.FORMERR and view(via) == view(straight)


def test_resolutions_through_dnsdist_find_what_the_backends_give(stack):
    public, _, direct, _ = stack
    for intent in ["historical weather Hong Kong", "send a slack message", "find papers about transformers",
                   "create and edit documents: pdf, docx, xlsx, pptx, notes and files"]:
        found = []
        for root in (public, direct):
            with Resolver(root=root, timeout=REPLY_TIMEOUT, cache=False) as r:
                res = r.resolve(intent, k=8 if intent.startswith("create") else 3)
            found.append([(t.name, t.zone, t.rank, t.score) for t in res.tools])
        assert found[0] and found[0] == found[1], intent


def test_a_dead_backend_leaves_the_other_to_answer(stack):
    public, backends, _, log = stack
    backends[0].stop()
    # dnsdist's health check (each second) finds it gone; until then a query may still be sent to it
    assert wait_until(lambda: re.search(rb"Marking downstream tooldns-1 \(.*\) as 'down'", log.read_bytes()))
    before, tries = asked(backends[1:], "weather.tools."), 0
    for n in range(5):  # new intents: none from the cache
        # dnsdist logs 'down' a moment before it stops choosing the backend, and does not retry UDP: a query
        # sent to the dead one goes unanswered. Each try waits 3 s (dnsdist gives a backend 2 s), then the
        # same intent is asked again
        for _ in range(10):
            tries += 1
            try:
                reply = ask(*public, "_any._tcp._weather.tools.", f"weather station {n}", timeout=3.0)
                break
            except dns.exception.Timeout:
                continue
        else:
            pytest.fail(f"weather station {n}: no answer in 10 tries")
        assert reply.authority
    # only the live backend can have answered: each intent at least once, and at most once per try (more than
    # once only when it answered past dnsdist's 2 s and the intent was asked again)
    assert 5 <= asked(backends[1:], "weather.tools.") - before <= tries
