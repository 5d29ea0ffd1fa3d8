"""The picture of a resolution (resolver_client.walkpage, tooldns-resolve --html): built from real
walks over loopback servers, parsed with html.parser, and rendered by headless Chromium where it
is installed."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from resolver_client import Hop, Referral, Resolution, Resolver, Stats, Tool
from resolver_client.cli import main as resolve_main
from resolver_client.walkpage import tree, walk_page, walks, write_walk_page

from conftest import REPLY_TIMEOUT, start_tree

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
#: how long Chromium may take to start and render on a loaded machine (it normally takes a second or two)
BROWSER_TIMEOUT = 180
EVIL = "<script>document.title='pwned'</script>"


class Page(HTMLParser):
    """What a test needs of the page: tags seen, the zone of each tree node and its parent node,
    the class of each node's <li>, and the text of elements by class."""

    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text_by_class: dict[str, list[str]] = {}
        self.parent: dict[str, str | None] = {}  # zone -> zone of the enclosing tree node
        self.state: dict[str, str] = {}  # zone -> class of its <li>
        self._stack: list[tuple[str, str]] = []  # (tag, class) of the open elements
        self._li: list[tuple[str, list]] = []  # open tree <li>: (class, [its zone])
        self._capture: list[tuple[str, int, list[str]]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag in self.VOID:
            return
        cls = attrs.get("class") or ""
        self._stack.append((tag, cls))
        if tag == "li" and any(t == "ul" and "tree" in c.split() for t, c in self._stack[:-1]):
            self._li.append((cls, []))
        for name in cls.split():
            self._capture.append((name, len(self._stack), []))

    def handle_endtag(self, tag):
        if tag in self.VOID or not self._stack:
            return
        depth = len(self._stack)
        for name, at, parts in [c for c in self._capture if c[1] == depth]:
            text = " ".join("".join(parts).split())
            self.text_by_class.setdefault(name, []).append(text)
            if name == "zone" and self._li and not self._li[-1][1]:
                cls, zone = self._li[-1]
                zone.append(text)
                self.state[text] = cls
                outer = [z[0] for _, z in self._li[:-1] if z]
                self.parent[text] = outer[-1] if outer else None
        self._capture = [c for c in self._capture if c[1] != depth]
        tag_open, _ = self._stack.pop()
        if tag_open == "li" and self._li and tag == "li":
            self._li.pop()

    def handle_data(self, data):
        for _, _, parts in self._capture:
            parts.append(data)

    def texts(self, cls: str) -> list[str]:
        return self.text_by_class.get(cls, [])


def check_self_contained(page: Page) -> None:
    """No script, nothing fetched: the page reads from disk as it is."""
    names = {tag for tag, _ in page.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed"}
    assert all(not (set(attrs) & {"src", "href", "action"}) for _, attrs in page.tags)
    assert not any(name.startswith("on") for _, attrs in page.tags for name in attrs)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]


def resolve(tree_thread, intent: str, **kwargs) -> Resolution:
    with Resolver(root=tree_thread.root(), timeout=REPLY_TIMEOUT) as r:
        return r.resolve(intent, **kwargs)


def test_page_shows_the_zones_walked_the_tools_and_their_scores(demo_tree):
    res = resolve(demo_tree, "historical weather Hong Kong")
    assert res.tools
    text = walk_page(res)
    page = Page(text)
    check_self_contained(page)
    walked = {h.zone for h in res.trace}
    assert walked <= set(page.parent), (walked, page.parent)
    # the tree nests each zone under the zone that proposed it
    assert page.parent["tools."] is None
    for hop in res.trace:
        for ref in hop.referrals:
            if ref.zone != hop.zone:
                assert page.parent[ref.zone] == hop.zone
    hops = page.texts("hopno")
    assert sorted(int(h.split()[1]) for h in hops) == list(range(1, len(res.trace) + 1))
    # every tool returned, with its score and its place in the list, in the tree and in the table
    returned = page.texts("ret")
    for i, tool in enumerate(res.tools, 1):
        assert tool.name in page.texts("tname")
        assert f"#{i}" in returned
        assert f"{tool.score:.3f}" in text
    # the referrals' ranks and scores as the parent zone gave them
    for ref in (r for h in res.trace for r in h.referrals if r.zone != h.zone):
        assert f"score {ref.score:.3f}" in page.texts("score")
        assert f"rank {ref.rank}" in page.texts("rank")
    assert all(ms.endswith("ms") for ms in page.texts("ms"))


def test_branches_not_followed_show_why(demo_tree):
    res = resolve(demo_tree, "weather forecast alerts", k=5, trust=["hko"], exclude=["history"])
    skipped = {r.zone: r.why_not for h in res.trace for r in h.referrals if not r.followed}
    assert skipped, [h.referrals for h in res.trace]
    page = Page(walk_page(res))
    statuses = page.texts("status")
    for zone, why in skipped.items():
        assert page.state[zone] == "not-followed"
        assert f"not followed: {why}" in statuses
    followed = {r.zone for h in res.trace for r in h.referrals if r.followed and r.zone != h.zone}
    assert all(page.state[z] == "followed" for z in followed)


def test_a_split_intent_pictures_each_walk(demo_tree):
    res = resolve(demo_tree, "check the weather and send a slack message", split=True)
    segments = walks(res.trace)
    assert len(segments) == 3
    page = Page(walk_page(res))
    headings = page.texts("walk-title")
    assert len(headings) == 3 and "whole intent" in headings[0] and "send a slack message" in headings[2]
    # every hop once, in the tree of its own walk (a tree lists them zone by zone)
    assert sorted(page.texts("hopno")) == sorted(f"hop {n}" for n in range(1, len(res.trace) + 1))
    assert page.texts("zone").count("tools.") == 3


@pytest.fixture
def evil_tree(demo_dir, integration):
    """The demo tree with markup in a tool's name, as a hostile zone might serve (the resolver already
    cuts markup out of descriptions: :func:`tooldns.protocol.hygiene.neutralise`)."""
    f = demo_dir / "hko.weather.tools.yaml"
    text = f.read_text(encoding="utf-8")
    text = text.replace("name: HKO Current Weather Report", f'name: "HKO {EVIL} <b>Current</b> Weather Report"', 1)
    assert text.count(EVIL) == 1
    f.write_text(text, encoding="utf-8")
    tree_thread = start_tree(demo_dir)
    yield tree_thread
    tree_thread.stop()


def test_text_from_servers_is_shown_not_run(evil_tree):
    res = resolve(evil_tree, "current weather report Hong Kong observatory", trust=["hko"])
    tool = next(t for t in res.tools if "Current" in t.name)
    assert EVIL in tool.name  # it came through the walk as the zone sent it
    text = walk_page(res)
    assert "<script" not in text and "<b>Current" not in text
    page = Page(text)
    check_self_contained(page)
    assert f"HKO {EVIL} <b>Current</b> Weather Report" in page.texts("tname")  # shown, as text


def test_cli_writes_the_page_alongside_json(demo_tree, tmp_path, capsys):
    out = tmp_path / "walk.html"
    address, port = demo_tree.root()
    args = ["send a slack message", "--root", f"{address}:{port}", "--timeout", str(REPLY_TIMEOUT)]
    assert resolve_main([*args, "--json", "--trace", "--html", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)  # stdout stays pure JSON
    page = Page(out.read_text(encoding="utf-8"))
    assert [t["title"] for t in data["tools"]] == page.texts("tname")
    assert {h["zone"] for h in data["trace"]} <= set(page.parent)
    assert resolve_main([*args, "--html", str(tmp_path / "no" / "such" / "dir" / "walk.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


# -- the tree, read back from hand-made traces (no servers) --
def hop(zone, qname=None, refs=(), tools=(), rcode="NOERROR", ms=1.0, note=""):
    return Hop("127.0.0.1:53", qname or f"_any._tcp._{zone}", "udp", rcode, ms, zone,
               referrals=[Referral(z, i, s, "functional", followed=f, why_not="" if f else "excluded")
                          for i, (z, s, f) in enumerate(refs, 1)],
               tools=list(tools), k=3, note=note)


def tool(name, zone, score, rank=1, description=""):
    return Tool(name, "http", "api.example.", 443, zone, score, rank, label=name.lower(),
                description=description, path=["tools.", zone])


def test_walks_and_tree_from_hops():
    hops = [hop("tools.", refs=[("a.tools.", 2.0, True), ("b.tools.", 1.0, False)]),
            hop("a.tools.", rcode="TimeoutError"), hop("a.tools.", tools=[tool("A", "a.tools.", 0.5)]),
            hop("tools.", refs=[("a.tools.", 2.0, True)]), hop("a.tools.", tools=[tool("A", "a.tools.", 0.5)])]
    segments = walks(hops)
    assert [[n for n, _ in s] for s in segments] == [[1, 2, 3], [4, 5]]
    root = tree(segments[0])
    assert root.zone == "tools." and [c.zone for c in root.children] == ["a.tools.", "b.tools."]
    a, b = root.children
    assert a.state == "followed" and [n for n, _ in a.hops] == [2, 3] and [t.name for t in a.tools] == ["A"]
    assert b.state == "not-followed" and b.referral.why_not == "excluded"
    # a zone none of the replies proposed hangs under its nearest ancestor walked
    orphan = tree([(1, hop("tools.", refs=[("a.tools.", 1.0, True)])), (2, hop("x.a.tools.", rcode="SERVFAIL"))])
    assert orphan.children[0].children[0].zone == "x.a.tools."
    assert orphan.children[0].children[0].state == "unreachable"


def test_page_of_a_resolution_without_tools_or_hops():
    empty = Resolution("nothing <here>", 3, "any", [], Stats(), [], ["a.tools.: no name server answered"])
    page = Page(walk_page(empty))
    check_self_contained(page)
    assert page.texts("kicker") == ["ToolDNS resolution"]
    assert "nothing <here>" in page.texts("intent")[0]


# -- rendered by a real browser --
def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def png_colours(data: bytes) -> int:
    """How many distinct byte values the image data holds (a blank page has a handful)."""
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", *args],
                          capture_output=True, timeout=BROWSER_TIMEOUT)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (CI installs Debian's chromium)")
def test_chromium_renders_the_page(demo_tree, tmp_path):
    html_file = tmp_path / "walk.html"
    address, port = demo_tree.root()
    assert resolve_main(["historical weather Hong Kong", "--root", f"{address}:{port}",
                         "--timeout", str(REPLY_TIMEOUT), "--html", str(html_file)]) == 0
    res = resolve(demo_tree, "historical weather Hong Kong")
    url = html_file.resolve().as_uri()
    shot = tmp_path / "walk.png"
    run = chromium(f"--screenshot={shot}", "--window-size=1280,1400", url, profile=tmp_path / "profile")
    assert shot.exists(), run.stderr.decode(errors="replace")[-2000:]
    data = shot.read_bytes()
    assert png_size(data) == (1280, 1400)
    assert len(data) > 20_000 and png_colours(data) > 100  # drawn, not a blank page
    dom = chromium("--dump-dom", url, profile=tmp_path / "profile").stdout.decode("utf-8")
    assert "<title>ToolDNS walk: historical weather Hong Kong</title>" in dom
    for t in res.tools:
        assert t.name in dom
    for zone in {h.zone for h in res.trace}:
        assert f'<span class="zone">{zone}</span>' in dom


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (CI installs Debian's chromium)")
def test_chromium_shows_a_script_in_a_description_as_text(tmp_path):
    res = Resolution("weather", 3, "any", [tool("Evil", "a.tools.", 0.9, description=EVIL)], Stats(queries=2),
                     [hop("tools.", refs=[("a.tools.", 1.0, True)]),
                      hop("a.tools.", tools=[tool("Evil", "a.tools.", 0.9, description=EVIL)], note=EVIL)])
    res.trace[0].referrals[0].summary = EVIL
    page = Page(walk_page(res))
    check_self_contained(page)
    assert page.texts("desc") == [EVIL] and page.texts("summary") == [EVIL] and EVIL in page.texts("note")
    html_file = tmp_path / "evil.html"
    write_walk_page(res, html_file)
    dom = chromium("--dump-dom", html_file.resolve().as_uri(), profile=tmp_path / "profile").stdout.decode("utf-8")
    assert "<title>ToolDNS walk: weather</title>" in dom  # the script did not run (it would retitle the page)
    assert "<script" not in dom
    assert re.search(r"&lt;script&gt;document\.title='pwned'&lt;/script&gt;", dom)
