"""``tooldns mcp`` over streamable HTTP: MCP sessions bounded per client, and an optional bearer token.

The ``mcp`` SDK's session manager bounds sessions over all clients together (10,000, each idle up to
30 minutes by default): one client opening that many locks every other client out. Here
:class:`SessionsPerClient`, an ASGI middleware in front of the SDK's app, counts the sessions each
client address holds (an IPv4 address, an IPv6 /64) and answers a client that asks for one more than
its share with HTTP 429 and a JSON-RPC error, before the SDK opens anything; the others are served.
Only ``initialize`` requests without a session ID are counted before they are served (the body is read
to tell); the sessionless requests of newer protocol versions open nothing and pass.
A session counts from the response that gives it its ID (``Mcp-Session-Id``) until the client deletes
it, the server answers 404 for it, or it has had no request in flight for the idle timeout, the rule
by which the SDK itself closes it (pass the SDK the same timeout).

:class:`StaticToken` is the SDK's own ``TokenVerifier`` for one shared secret: with it the SDK's
``RequireAuthMiddleware`` answers 401 to a request without ``Authorization: Bearer <token>`` and binds
each session to the credential that opened it.

    app = SessionsPerClient(mcp_server.streamable_http_app(session_idle_timeout=300), limit=16, idle=300)
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import time
from dataclasses import dataclass

#: sessions one client address may hold at once (``tooldns mcp --max-sessions-per-client``)
SESSIONS_PER_CLIENT = 16
#: seconds without a request in flight after which a session is closed (``--session-idle``; the SDK's is 1800)
SESSION_IDLE = 300.0
SESSION_HEADER = b"mcp-session-id"


def client_key(scope: dict) -> str:
    """Whom a request's sessions are counted against: its IPv4 address, or its IPv6 address's /64."""
    host = (scope.get("client") or ("", 0))[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket or a test client: one account per name
    if address.version == 6:
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


@dataclass
class _Session:
    client: str
    in_flight: int = 0
    last: float = 0.0  # monotonic time its last request ended


class SessionsPerClient:
    """ASGI middleware: at most *limit* MCP sessions per client (:func:`client_key`), each forgotten after
    *idle* seconds without a request in flight. Requests that name a session pass through."""

    def __init__(self, app, limit: int = SESSIONS_PER_CLIENT, idle: float = SESSION_IDLE) -> None:
        self.app, self.limit, self.idle = app, limit, idle
        self.sessions: dict[str, _Session] = {}
        self.clients: dict[str, set[str]] = {}  # client -> its session IDs
        self.opening: dict[str, int] = {}  # client -> its requests without a session ID being served
        self.refused = 0  # requests answered 429 (the count a test and the flood script read)
        self._swept = time.monotonic()  # when every client's idle sessions were last forgotten

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sid = dict(scope["headers"]).get(SESSION_HEADER, b"").decode("latin-1")
        if sid:
            await self._in_session(sid, scope, receive, send)
        else:
            await self._opening(scope, receive, send)

    async def _opening(self, scope, receive, send) -> None:
        receive, opens = await _peek_initialize(scope, receive)
        if not opens:  # a request that can open no session (a sessionless one of newer clients): not counted
            await self._watched(scope, receive, send, client_key(scope))
            return
        client = client_key(scope)
        if time.monotonic() - self._swept >= self.idle:  # clients that never came back: their sessions ended
            self._swept = time.monotonic()
            for other in list(self.clients):
                self._held(other)
        held, opening = self._held(client), self.opening.get(client, 0)
        if held + opening >= self.limit:
            self.refused += 1
            await _refuse(send, f"too many sessions from {client}: {held} open and {opening} being opened, of "
                          f"{self.limit}; close one (HTTP DELETE) or wait until one has been idle for {self.idle:g} s")
            return
        self.opening[client] = self.opening.get(client, 0) + 1
        try:
            await self._watched(scope, receive, send, client)
        finally:
            self.opening[client] -= 1
            if not self.opening[client]:
                del self.opening[client]

    async def _watched(self, scope, receive, send, client: str) -> None:
        """Serve a request without a session ID; count the session its response opens, if any."""
        given: list[tuple[int, str]] = []

        async def watch(message) -> None:
            if message["type"] == "http.response.start":
                sid = dict(message.get("headers") or []).get(SESSION_HEADER, b"").decode("latin-1")
                given.append((message["status"], sid))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if given and given[0][0] < 400 and given[0][1]:
                self.sessions[given[0][1]] = _Session(client, 0, time.monotonic())
                self.clients.setdefault(client, set()).add(given[0][1])

    async def _in_session(self, sid: str, scope, receive, send) -> None:
        session = self.sessions.get(sid)
        if session is None:
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def watch(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        session.in_flight += 1
        try:
            await self.app(scope, receive, watch)
        finally:
            session.in_flight -= 1
            session.last = time.monotonic()
            ended = status and ((scope["method"] == "DELETE" and status[0] < 400) or status[0] == 404)
            if ended and client_key(scope) == session.client:  # only its own client ends its count
                self._forget(sid)

    def _held(self, client: str) -> int:
        """The sessions *client* holds, those idle past the timeout forgotten first."""
        now = time.monotonic()
        for sid in list(self.clients.get(client, ())):
            session = self.sessions[sid]
            if not session.in_flight and now - session.last >= self.idle:
                self._forget(sid)
        return len(self.clients.get(client, ()))

    def _forget(self, sid: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is not None:
            ids = self.clients.get(session.client, set())
            ids.discard(sid)
            if not ids:
                self.clients.pop(session.client, None)


async def _peek_initialize(scope, receive, limit: int = 1 << 20):
    """Read a POST's body (up to *limit* bytes) to tell whether it is an ``initialize`` request, the one that
    opens a session; returns a ``receive`` that hands the app the body again, and the answer."""
    if scope.get("method") != "POST":
        return receive, False
    taken, body, more = [], b"", True
    while more and len(body) <= limit:
        message = await receive()
        taken.append(message)
        if message["type"] != "http.request":
            break
        body += message.get("body", b"")
        more = message.get("more_body", False)

    async def replay():
        return taken.pop(0) if taken else await receive()

    try:
        request = json.loads(body) if not more else None
    except ValueError:
        request = None
    requests = request if isinstance(request, list) else [request]
    # a body too large or not JSON is counted as opening one: the app refuses it, but it waits its turn
    opens = request is None or any(isinstance(r, dict) and r.get("method") == "initialize" for r in requests)
    return replay, opens


async def _refuse(send, text: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"10")]})
    await send({"type": "http.response.body", "body": body})


class StaticToken:
    """The SDK's ``TokenVerifier`` for one shared bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the token is empty")
        self.token = token

    async def verify_token(self, token: str):
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.encode(), self.token.encode()):
            return AccessToken(token=token, client_id="tooldns-token", scopes=[])
        return None


def read_token(path: str) -> str:
    """The token in file *path*: its first line, stripped. ValueError when the file has none."""
    with open(path, encoding="utf-8") as f:
        token = f.readline().strip()
    if not token:
        raise ValueError(f"{path} holds no token (its first line is empty)")
    return token
