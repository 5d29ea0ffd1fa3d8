"""The MCP server's HTTP bounds without a server: whom sessions are counted against, and which requests
are counted before they are served (``resolver_client.mcp_http``). Over real sockets: tests/test_mcp.py."""

from __future__ import annotations

import asyncio
import json

from resolver_client.mcp_http import SessionsPerClient, client_key


def test_sessions_are_counted_per_ipv4_address_and_ipv6_slash_64():
    key = lambda host: client_key({"client": (host, 40000)})  # noqa: E731
    assert key("192.0.2.7") == "192.0.2.7" != key("192.0.2.8")
    assert key("2001:db8:1:2::1") == key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64" != key("2001:db8:1:3::1")
    assert key("::ffff:192.0.2.7") == "192.0.2.7"  # an IPv4 client on a dual-stack socket: its IPv4 address
    assert client_key({}) == ""


def test_only_initialize_requests_wait_for_a_place_and_each_session_opened_counts():
    """Two sessions a client: a third initialize is refused 429 before the app sees it; a request that opens
    none (a sessionless call) is served however many sessions the client holds."""
    opened = iter(f"s{i}" for i in range(10))

    async def app(scope, receive, send):
        body = json.loads((await receive())["body"])
        headers = [(b"mcp-session-id", next(opened).encode())] if body.get("method") == "initialize" else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    bounded = SessionsPerClient(app, limit=2, idle=300)

    async def call(body: bytes, host: str = "192.0.2.7") -> int:
        scope = {"type": "http", "method": "POST", "headers": [], "client": (host, 1)}
        sent = []

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        await bounded(scope, receive, send)
        return sent[0]["status"]

    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).encode()
    call_tool = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}).encode()

    async def script():
        return ([await call(initialize) for _ in range(3)], [await call(call_tool) for _ in range(5)],
                await call(initialize, host="192.0.2.99"))

    firsts, calls, other = asyncio.run(script())
    assert firsts == [200, 200, 429] and calls == [200] * 5 and other == 200
    assert bounded.refused == 1 and {c: len(s) for c, s in bounded.clients.items()} == {"192.0.2.7": 2, "192.0.2.99": 1}
    # sessions idle past the timeout are forgotten, those of clients that never come back included
    for session in bounded.sessions.values():
        session.last -= 1000
    bounded._swept -= 1000
    assert asyncio.run(call(initialize, host="198.51.100.1")) == 200
    assert {c: len(s) for c, s in bounded.clients.items()} == {"198.51.100.1": 1} and len(bounded.sessions) == 1
