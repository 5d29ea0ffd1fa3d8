"""``tooldns mcp`` end to end: a tree on loopback, the MCP server as a subprocess, the SDK's own client.

Over stdio (what desktop agent hosts launch; the SDK's ``stdio_client`` and ``ClientSession`` with
the initialize handshake) and over streamable HTTP (the SDK's ``Client``). Skipped where the
``mcp`` extra is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # the MCP server as a subprocess, servers on loopback

pytest.importorskip("mcp")

from mcp import Client, ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, free_port, fresh_subnet, wait_until  # noqa: E402

HKO_CLIMATE = "hko-climate._http._tcp.hko.weather.tools."
#: `tooldns mcp ...` as the console script runs it (tooldns.cli:main)
TOOLDNS = [sys.executable, "-c", "import sys; from tooldns.cli import main; sys.exit(main())"]


def _server_args(root: tuple[str, int], *extra: str) -> list[str]:
    return [*TOOLDNS[1:], "mcp", "--root", f"{root[0]}:{root[1]}", "--timeout", str(REPLY_TIMEOUT), *extra]


async def _over_stdio(root: tuple[str, int], errlog, script):
    """Launch `tooldns mcp` over stdio, initialize a session and hand it to *script*."""
    params = StdioServerParameters(command=sys.executable, args=_server_args(root))
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=WAIT_TIMEOUT) as session:
            await session.initialize()
            return await script(session)


def _text(result) -> str:
    return " ".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def test_stdio_lists_finds_and_describes(demo_tree, tmp_path):
    async def script(session: ClientSession):
        listed = await session.list_tools()
        found = await session.call_tool("find_tools", {"intent": "historical weather Hong Kong"})
        one = await session.call_tool("find_tools", {"intent": "historical weather Hong Kong", "mode": "get_one"})
        described = await session.call_tool("describe_tool", {"name": HKO_CLIMATE})
        return listed, found, one, described

    with open(tmp_path / "stderr.txt", "w") as errlog:
        listed, found, one, described = asyncio.run(_over_stdio(demo_tree.root(), errlog, script))

    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {"find_tools", "describe_tool"}
    assert "describe_tool" in tools["find_tools"].description and "find_tools" in tools["describe_tool"].description
    assert tools["find_tools"].input_schema["required"] == ["intent"]
    assert set(tools["find_tools"].input_schema["properties"]) == {"intent", "k", "service", "mode"}

    assert not found.is_error, _text(found)
    data = found.structured_content
    assert data["mode"] == "get_important" and len(data["tools"]) > 1
    best = data["tools"][0]
    assert best["name"] == HKO_CLIMATE and best["title"] == "HKO Historical Climate Data"
    assert best["zone"] == "hko.weather.tools." and best["service"] == "http" and best["score"] > 0
    assert best["endpoint"].startswith("https://data.weather.gov.hk/")
    assert {"name": "station", "type": "string", "required": True, "description": "Station code, e.g. HKO"} \
        in best["parameters"]
    assert HKO_CLIMATE in _text(found)  # the same result as text, for hosts that show only that

    assert not one.is_error and [t["name"] for t in one.structured_content["tools"]] == [HKO_CLIMATE]

    assert not described.is_error, _text(described)
    info = described.structured_content
    assert info["title"] == "HKO Historical Climate Data"
    assert (info["target"], info["port"]) == ("data.weather.gov.hk.", 443)
    assert [(p["name"], p["required"]) for p in info["parameters"]] == [("station", True), ("year", False)]
    assert info["metadata"]["param"].splitlines() == ["station:string:required:Station code, e.g. HKO",
                                                      "year:integer:optional:Year"]
    assert info["description"].startswith("Hong Kong Observatory historical climate records") \
        and len(info["description"].encode()) > 120  # whole, not the ranked answer's 120 bytes


def test_errors_are_tool_errors_and_the_server_keeps_serving(demo_tree, tmp_path):
    calls = [
        ("find_tools", {"intent": "weather\x01forecast"}),           # the intent is rejected
        ("find_tools", {"intent": "historical weather", "service": "skill"}),   # nothing found
        ("find_tools", {"intent": "historical weather", "k": 0}),
        ("describe_tool", {"name": "nothere._http._tcp.hko.weather.tools."}),
        ("describe_tool", {"name": "HKO Historical Climate Data"}),  # a title, not a DNS name
        ("find_tools", {"intent": "send a slack message", "service": "mcp"}),  # still serving
    ]

    async def script(session: ClientSession):
        return [await session.call_tool(name, args) for name, args in calls]

    with open(tmp_path / "stderr.txt", "w") as errlog:
        results = asyncio.run(_over_stdio(demo_tree.root(), errlog, script))

    rejected, nothing, bad_k, no_tool, title, ok = results
    assert all(r.is_error for r in results[:-1])
    assert "control character U+0001" in _text(rejected)
    assert "no tools found for 'historical weather' (service skill" in _text(nothing)
    assert "try service 'any'" in _text(nothing)
    assert "k must be a whole number from 1 to 255" in _text(bad_k)
    assert "no tool named nothere._http._tcp.hko.weather.tools." in _text(no_tool)
    assert "not a DNS name" in _text(title) and "as find_tools returns it" in _text(title)
    assert not ok.is_error and ok.structured_content["tools"][0]["service"] == "mcp"


def test_root_unreachable_is_a_tool_error(tmp_path):
    address = fresh_subnet() + ".1"
    dead = (address, free_port(address))  # nothing listens there

    async def script(session: ClientSession):
        found = await session.call_tool("find_tools", {"intent": "historical weather Hong Kong"})
        described = await session.call_tool("describe_tool", {"name": HKO_CLIMATE})
        listed = await session.list_tools()
        return found, described, listed

    with open(tmp_path / "stderr.txt", "w") as errlog:
        found, described, listed = asyncio.run(_over_stdio(dead, errlog, script))
    assert found.is_error and "cannot reach the ToolDNS tree" in _text(found)
    assert f"{dead[0]}:{dead[1]}" in _text(found) and "root name server" in _text(found)
    assert described.is_error and "no name server of tools. answered" in _text(described)
    assert len(listed.tools) == 2


def test_streamable_http(demo_tree, tmp_path):
    port = free_port("127.0.0.1")
    root = demo_tree.root()
    with open(tmp_path / "stderr.txt", "w") as errlog:
        proc = subprocess.Popen([sys.executable, *_server_args(root, "--transport", "streamable-http",
                                                               "--port", str(port))],
                                stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
        try:
            assert wait_until(lambda: _listening("127.0.0.1", port) or proc.poll() is not None), "server did not start"
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()

            async def script():
                async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=WAIT_TIMEOUT) as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                    return names, await client.call_tool("find_tools", {"intent": "historical weather Hong Kong",
                                                                        "mode": "get_one"})

            names, found = asyncio.run(script())
        finally:
            proc.terminate()
            proc.wait(WAIT_TIMEOUT)
    assert names == {"find_tools", "describe_tool"}
    assert not found.is_error and [t["name"] for t in found.structured_content["tools"]] == [HKO_CLIMATE]
    assert f"serving MCP (streamable HTTP) at http://127.0.0.1:{port}/mcp" in (tmp_path / "stderr.txt").read_text()


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_without_the_mcp_extra_it_says_what_to_install():
    code = ("import sys; sys.modules['mcp'] = None\n"
            "from resolver_client.mcp_server import main; sys.exit(main(['--root', '127.0.0.1:5300']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_TIMEOUT)
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
    assert "pip install 'tooldns[mcp]'" in out.stderr


def test_bad_options_are_usage_errors():
    for args, says in ((["--k", "0"], "--k and --leaf-k must be from 1 to 255"), (["--root", "host:port"], "bad port"),
                       (["--service", "ftp"], "unknown service 'ftp'"), (["--port", "70000"], "from 0 to 65535"),
                       (["--best-leaf-k", "0"], "--best-leaf-k must be from 1 to 255"),
                       (["--beam", "0"], "--beam must be at least 1"),
                       (["--beam", "3", "--no-beam"], "--beam and --no-beam do not go together"),
                       (["--max-walks", "0"], "at least 1, not '0'"),
                       (["--max-sessions-per-client", "0"], "at least 1, not '0'"),
                       (["--session-idle", "0"], "the session idle timeout must be a number of seconds above 0")):
        out = subprocess.run([*TOOLDNS, "mcp", *args], capture_output=True, text=True, timeout=WAIT_TIMEOUT)
        assert out.returncode == 2 and says in out.stderr, out.stderr


def test_reachable_without_the_server_extra():
    """An agent builder installs the resolver and the mcp extra only: `tooldns mcp` still runs."""
    code = ("import sys; sys.modules['dnslib'] = None\n"
            "from tooldns.cli import main; sys.exit(main(['mcp', '--help']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_TIMEOUT)
    assert out.returncode == 0 and "usage: tooldns mcp" in out.stdout and "--transport" in out.stdout, out.stderr


_INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "0"}}}).encode()


def _initialize(port: int, source: str = "127.0.0.1", token: str | None = None) -> tuple[int, str | None]:
    """One ``initialize`` POST from *source*: its HTTP status and the session ID it was given."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_TIMEOUT, source_address=(source, 0))
    try:
        conn.request("POST", "/mcp", body=_INITIALIZE, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("mcp-session-id")
    finally:
        conn.close()


def _delete(port: int, sid: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_TIMEOUT)
    try:
        conn.request("DELETE", "/mcp", headers={"mcp-session-id": sid})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@contextlib.contextmanager
def _http_server(root: tuple[str, int], tmp_path, *extra: str):
    """`tooldns mcp --transport streamable-http` on a free port of 127.0.0.1, with *extra* arguments; yields the port."""
    port = free_port("127.0.0.1")
    with open(tmp_path / "stderr.txt", "w") as errlog:
        proc = subprocess.Popen([sys.executable, *_server_args(root, "--transport", "streamable-http",
                                                               "--port", str(port), *extra)],
                                stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
        try:
            assert wait_until(lambda: _listening("127.0.0.1", port) or proc.poll() is not None), "server did not start"
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            yield port
        finally:
            proc.terminate()
            proc.wait(WAIT_TIMEOUT)


def test_sessions_are_bounded_per_client_address(tmp_path):
    """One address holding its share of sessions is answered 429 for one more; another address is served, and a
    session closed (DELETE) or idle past --session-idle frees its place (issue 42, item 6)."""
    with _http_server(("127.0.0.1", 9), tmp_path, "--max-sessions-per-client", "3", "--session-idle", "0.5") as port:
        opened = [_initialize(port) for _ in range(3)]
        assert [status for status, _ in opened] == [200] * 3 and all(sid for _, sid in opened)
        assert _initialize(port)[0] == 429
        assert _initialize(port, source="127.0.0.2")[0] == 200
        assert _delete(port, opened[0][1]) == 200
        assert _initialize(port)[0] == 200
        # every session of 127.0.0.1 idle: each is closed within a generous bound, and the address served again
        assert wait_until(lambda: _initialize(port)[0] == 200)


def test_a_token_file_makes_http_require_the_bearer_token(demo_tree, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with _http_server(demo_tree.root(), tmp_path, "--token-file", str(token_file)) as port:
        assert _initialize(port)[0] == 401
        assert _initialize(port, token="wrong")[0] == 401
        status, sid = _initialize(port, token="s3cret-token")
        assert status == 200 and sid
    out = subprocess.run([*TOOLDNS, "mcp", "--token-file", str(token_file)], capture_output=True, text=True,
                         timeout=WAIT_TIMEOUT)
    assert out.returncode == 2 and "--token-file is for --transport streamable-http" in out.stderr, out.stderr
    (tmp_path / "empty").write_text("\n")
    out = subprocess.run([*TOOLDNS, "mcp", "--transport", "streamable-http", "--token-file", str(tmp_path / "empty")],
                         capture_output=True, text=True, timeout=WAIT_TIMEOUT)
    assert out.returncode == 2 and "holds no token" in out.stderr, out.stderr


def test_many_calls_at_once_of_one_client_are_not_counted_as_sessions(demo_tree, tmp_path):
    """The bound counts sessions, not requests: a client's 20 find_tools calls at once, over fewer sessions
    than its share (the SDK's client may send them without a session ID), are all answered."""
    with _http_server(demo_tree.root(), tmp_path, "--max-sessions-per-client", "2") as port:
        async def script():
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=WAIT_TIMEOUT) as client:
                return await asyncio.gather(*(client.call_tool("find_tools", {"intent": f"weather {i}"})
                                              for i in range(20)), return_exceptions=True)

        results = asyncio.run(script())
    assert all(not isinstance(r, Exception) and not r.is_error for r in results), results[:3]


def test_find_tools_warns_of_a_trusted_organisation_the_walk_never_met(demo_tree):
    """``tooldns mcp --trust nosuchorg`` was taken silently (issue 42): the result's warnings now say that
    no zone of that name was met, and which organisations were."""
    from resolver_client.mcp_server import ToolFinder
    from resolver_client.resolver import AsyncResolver

    finder = ToolFinder(AsyncResolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False),
                        trust=["hko", "nosuchorg"])
    found = asyncio.run(finder.find("typhoon warning"))
    assert found.tools
    assert "trust nosuchorg: no zone of that name was met on the walk (organisations met: hko)" in found.warnings
    assert not any(w.startswith("trust hko") for w in found.warnings)
