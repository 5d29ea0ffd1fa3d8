"""``tooldns mcp``: tool discovery for agents as one MCP server, over stdio or streamable HTTP.

An agent host loads two small tools instead of thousands of schemas (progressive disclosure):

* ``find_tools(intent, k?, service?, mode?)`` walks the ToolDNS tree with :class:`AsyncResolver`
  and returns the tools found, best first, each with what it takes to call it (DNS name, title,
  service, endpoint, description, parameters, score, zone, target and port);
* ``describe_tool(name)`` returns the full metadata of one tool: the TXT record at its DNS name
  (:mod:`.describe`), with its SRV target and port.

Resolution errors (root unreachable, intent rejected, nothing found, not a tool's name) come back
as MCP tool errors (``isError`` results) with a clear text; the server keeps serving. Built on the
official ``mcp`` SDK (the ``mcp`` extra, ``pip install 'tooldns[mcp]'``); importing
:mod:`resolver_client` does not load it.

    tooldns mcp --root 127.0.0.1:5300                         stdio, as agent hosts launch it
    tooldns mcp --root 127.0.0.1:5300 --transport streamable-http --port 8000    http://127.0.0.1:8000/mcp

:class:`ToolFinder` is the part without MCP (plain dataclasses in, :class:`ResolverError` out);
:func:`make_server` puts the two tools on an ``MCPServer``; :func:`main` is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from typing import Literal

from tooldns.protocol import names

from .cli import ECHO, at_least_one, clipped, port_arg, timeout_arg, unmet_text, unmet_trust
from .describe import Parameter, ToolInfo, adescribe, tool_name
from .exceptions import NoServersReachable, ResolverError
from .mcp_http import SESSION_IDLE, SESSIONS_PER_CLIENT, SessionsPerClient, read_token
from .modes import DEFAULT_MODE, MODES, check_mode
from .resolver import MAX_WALKS, AsyncResolver, parse_server, seconds
from .results import Resolution, Tool

try:
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
except ModuleNotFoundError as exc:  # the mcp extra is not installed: main() says so
    if (exc.name or "").split(".")[0] != "mcp":
        raise
    _MISSING: str | None = exc.name
else:
    _MISSING = None

ModeName = Literal["get_one", "get_important", "get_all"]
ServiceName = Literal["any", "mcp", "a2a", "http", "skill"]
#: tools whose details (full TXT record) are looked up at once, over every find_tools call together (a
#: gateway's hundred calls at once hold at most this many lookups' sockets, beside the resolver's walks)
DETAIL_LOOKUPS = 16

INSTRUCTIONS = """\
ToolDNS finds tools for a task among thousands: HTTP APIs, MCP servers, A2A agents and skills, \
ranked for what you ask by a DNS tree. Before saying you cannot do something, call find_tools with \
the task in plain words; then call the tool it returns at its endpoint. Call describe_tool for the \
full record of one tool."""

FIND_TOOLS = """\
Find tools that can do a task (HTTP APIs, MCP servers, A2A agents, skills), best first.
Call it whenever you need a capability you do not have. Say the task in plain words ("historical \
weather for Hong Kong", "send a Slack message"). Each tool comes with what you need to call it: \
endpoint, service, description, parameters, and its `name` for describe_tool.
mode: "get_one" the single best tool (fastest); "get_important" the best few (default); \
"get_all" every relevant tool, for planning a job of many steps.
service: only "http", "mcp", "a2a" or "skill" tools (default any). k: branches searched per level \
(1-255); leave it out, the mode picks it."""

DESCRIBE_TOOL = """\
Full record of one tool find_tools returned: whole description, every parameter (name, type, \
required, description), endpoint, host and port, and the raw metadata.
Call it when find_tools' result is not enough to call the tool. Pass `name` exactly as find_tools \
gave it, a DNS name like "hko-climate._http._tcp.hko.weather.tools."."""


@dataclass
class FoundTool:
    """One tool find_tools returns: enough to call it."""

    name: str  # its DNS name, for describe_tool
    title: str
    service: str
    endpoint: str
    description: str
    parameters: list[Parameter]
    score: float | None
    zone: str
    target: str
    port: int


@dataclass
class Found:
    """What find_tools returns."""

    intent: str
    mode: str
    service: str
    tools: list[FoundTool]
    #: zones that did not answer, limits hit, tools whose details could not be had
    warnings: list[str] = field(default_factory=list)


class ToolFinder:
    """find_tools and describe_tool without MCP: the operator's settings (``tooldns mcp``'s options)
    around an :class:`AsyncResolver`, and the name servers walks met, so that a tool's details are
    asked of its own zone's servers rather than by walking down again."""

    def __init__(self, resolver: AsyncResolver, *, k: int | tuple[int, ...] | None = None, leaf_k: int | None = None,
                 service: str = names.ANY_SERVICE, mode: str = DEFAULT_MODE, trust: list[str] | None = None,
                 exclude: list[str] | None = None) -> None:
        self.resolver = resolver
        self.k, self.leaf_k, self.trust, self.exclude = k, leaf_k, trust, exclude
        self.service = _check_service(service)
        self.mode = check_mode(mode)
        #: zone -> its name servers, as the last walks met them
        self.servers: dict[str, list[tuple[str, int]]] = {}
        self._lookups: asyncio.Semaphore | None = None  # DETAIL_LOOKUPS turns, made in the server's event loop

    async def find(self, intent: str, k: int | None = None, service: str | None = None,
                   mode: str | None = None) -> Found:
        """The tools for *intent* with their details; ResolverError when none (or the walk failed)."""
        mode = check_mode(mode or self.mode)
        service = _check_service(service or self.service)
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 255):
            raise ResolverError(f"k must be a whole number from 1 to 255, not {k!r}")
        res = await self.resolver.resolve(intent, k=k if k is not None else self.k, service=service, trust=self.trust,
                                          exclude=self.exclude, leaf_k=self.leaf_k, mode=mode)
        self._learn(res)
        tools = res.matched().tools  # all zero: no word matched
        if not tools:
            raise ResolverError(_nothing_found(intent, service, mode, res))
        warnings = list(res.errors)
        warnings += [f"trust {entry}: {unmet_text(res)}" for entry in unmet_trust(res, self.trust)]
        if self._lookups is None:
            self._lookups = asyncio.Semaphore(DETAIL_LOOKUPS)
        found = await asyncio.gather(*(self._found(t, self._lookups, warnings) for t in tools))
        return Found(intent, mode, service, list(found), warnings)

    async def describe(self, name: str) -> ToolInfo:
        """The full record of tool *name* (its DNS name)."""
        r = self.resolver
        return await adescribe(name, r.root, root_zone=r.root_zone, timeout=r.timeout, hints=self.servers)

    async def _found(self, tool: Tool, limit: asyncio.Semaphore, warnings: list[str]) -> FoundTool:
        """*tool* with the whole description and the parameters of its TXT record (what the walk's
        answer carried, and a warning, when that record cannot be had)."""
        name = tool_name(tool)
        info = None
        if name:
            try:
                async with limit:
                    info = await self.describe(name)
            except ResolverError as exc:
                warnings.append(f"details of {name}: {exc}")
        return FoundTool(name=name, title=tool.name, service=tool.service, endpoint=tool.endpoint,
                         description=info.description if info else tool.description,
                         parameters=info.parameters if info else [], score=tool.score, zone=tool.zone,
                         target=tool.target, port=tool.port)

    def _learn(self, res: Resolution) -> None:
        """Remember which server answered for each zone of the walk."""
        if len(self.servers) > 4096:  # a long-running server walking ever new trees: start afresh
            self.servers.clear()
        for hop in res.trace:
            if hop.rcode == "NOERROR":
                host, _, port = hop.server.rpartition(":")
                self.servers[hop.zone] = [(host, int(port))]


def _check_service(service: str) -> str:
    service = str(service).lower()
    if service not in names.SERVICES:
        raise ResolverError(f"unknown service {service!r}: choose one of {', '.join(sorted(names.SERVICES))}")
    return service


def _nothing_found(intent: str, service: str, mode: str, res: Resolution) -> str:
    text = f"no tools found for {clipped(intent, ECHO)!r} (service {service}, mode {mode})"
    if res.errors:
        return f"{text}; the walk met errors: {'; '.join(res.errors[:3])}"
    tips = ["describe the task in other words"]
    if service != names.ANY_SERVICE:
        tips.append("try service 'any'")
    if mode != "get_all":
        tips.append("try mode 'get_all'")
    return f"{text}: {', '.join(tips)}"


def make_server(finder: ToolFinder, log_level: str = "WARNING", token: str | None = None) -> "MCPServer":
    """An MCP server offering ``find_tools`` and ``describe_tool`` backed by *finder*; over HTTP, with
    *token*, every request must carry ``Authorization: Bearer <token>`` (the SDK answers 401 otherwise)."""
    auth = {}
    if token is not None:
        from mcp.server.auth.settings import AuthSettings

        from .mcp_http import StaticToken

        # the SDK's bearer-token check; no OAuth server: the issuer is never published (no resource URL)
        auth = {"auth": AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None),
                "token_verifier": StaticToken(token)}
    app = MCPServer("tooldns", title="ToolDNS tool discovery", instructions=INSTRUCTIONS, version=_version(),
                    log_level=log_level, **auth)
    hints = ToolAnnotations(read_only_hint=True, open_world_hint=True)

    @app.tool(description=FIND_TOOLS, annotations=hints)
    async def find_tools(intent: str, k: int | None = None, service: ServiceName | None = None,
                         mode: ModeName | None = None) -> Found:
        try:
            return await finder.find(intent, k, service, mode)
        except ResolverError as exc:
            raise _tool_error(exc) from exc

    @app.tool(description=DESCRIBE_TOOL, annotations=hints)
    async def describe_tool(name: str) -> ToolInfo:
        try:
            return await finder.describe(name)
        except ResolverError as exc:
            raise _tool_error(exc) from exc

    return app


def _tool_error(exc: ResolverError) -> "ToolError":
    """The MCP tool error (an ``isError`` result, its text for the model) for a resolution error."""
    if isinstance(exc, NoServersReachable):
        return ToolError(f"cannot reach the ToolDNS tree: {exc}")
    return ToolError(str(exc))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tooldns")
    except PackageNotFoundError:
        return ""


def _parser() -> argparse.ArgumentParser:
    from .cli import add_beam_flags, add_published_walk_flag  # as tooldns-resolve has them

    p = argparse.ArgumentParser(prog="tooldns mcp", description="Tool discovery for agents as an MCP server: "
                                "find_tools and describe_tool, backed by a ToolDNS tree.")
    p.add_argument("--root", default="127.0.0.1:5300", help="root name server HOST:PORT (default 127.0.0.1:5300)")
    p.add_argument("--root-zone", default="tools.", help="zone the walk starts at (default tools.)")
    p.add_argument("--mode", default=DEFAULT_MODE, choices=MODES, help="search mode when find_tools names none "
                   f"(default {DEFAULT_MODE})")
    p.add_argument("--k", default=None, help="children asked for at each step when find_tools gives no k, 1-255, or "
                   "one per depth: 5,3,2 (default: the tree's published K, else the mode's)")
    p.add_argument("--leaf-k", type=int, default=None, help="tools asked of each leaf (default: the tree's published "
                   "leaf K, else the mode's)")
    p.add_argument("--best-leaf-k", type=int, default=None,
                   help="tools asked of the leaf on the best path, over TCP past 6 (default: the tree's published "
                        "one, else --leaf-k; 10 for hybrid trees, docs/building.md)")
    add_beam_flags(p)
    add_published_walk_flag(p)
    p.add_argument("--service", default=names.ANY_SERVICE, help="service when find_tools names none: "
                   f"{', '.join(sorted(names.SERVICES))} (default any)")
    p.add_argument("--trust", action="append",
                   help="organisations to trust (comma-separated labels); others are skipped")
    p.add_argument("--exclude", action="append", help="zones or organisations to skip (comma-separated)")
    p.add_argument("--timeout", type=timeout_arg, default=1.0, help="seconds to wait for each DNS reply (default 1)")
    p.add_argument("--max-walks", type=at_least_one, default=MAX_WALKS, metavar="N",
                   help=f"find_tools walks run at once, over every session; the others wait for a turn (default "
                        f"{MAX_WALKS}; docs/mcp.md, \"Many calls at once\")")
    p.add_argument("--embed", metavar="MODEL", help="embed intents and send their vectors (e5, minilm, "
                   "minilm-static, static:PATH, local:PATH, openai:MODEL, hash), for trees built with tooldns "
                   "build --embed (default: the model the tree's published walk names, when it is installed here)")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio",
                   help="stdio (what desktop agent hosts launch; the default) or streamable-http")
    p.add_argument("--host", default="127.0.0.1", help="address to serve HTTP on (default 127.0.0.1)")
    p.add_argument("--port", type=port_arg, default=8000, help="port to serve HTTP on (default 8000)")
    p.add_argument("--path", default="/mcp", help="HTTP path of the MCP endpoint (default /mcp)")
    p.add_argument("--max-sessions-per-client", type=at_least_one, default=SESSIONS_PER_CLIENT, metavar="N",
                   help=f"HTTP: MCP sessions one client address (IPv6: its /64) holds at once; one more is answered "
                        f"429 (default {SESSIONS_PER_CLIENT})")
    p.add_argument("--session-idle", type=_idle_arg, default=SESSION_IDLE, metavar="SECONDS",
                   help=f"HTTP: a session without a request for this long is closed (default {SESSION_IDLE:g})")
    p.add_argument("--token-file", metavar="FILE", help="HTTP: require Authorization: Bearer <the first line of "
                   "FILE> of every request (401 without it)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every tool call and error on stderr")
    return p



def _idle_arg(text: str) -> float:
    try:
        return seconds(text, "the session idle timeout")
    except ResolverError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _finder(args, p: argparse.ArgumentParser) -> ToolFinder:
    from .cli import _embedder, _split, check_walk_args, parse_ks, walk_beam  # as tooldns-resolve handles them

    ks = parse_ks(args, p)
    check_walk_args(args, p)
    resolver = AsyncResolver(root=parse_server(args.root), root_zone=args.root_zone, timeout=args.timeout,
                             embedder=_embedder(args.embed), best_leaf_k=args.best_leaf_k, beam=walk_beam(args),
                             pages=args.pages, published_walk=not args.no_published_walk, max_walks=args.max_walks)
    return ToolFinder(resolver, k=ks if ks is None or len(ks) > 1 else ks[0], leaf_k=args.leaf_k,
                      service=args.service, mode=args.mode, trust=_split(args.trust), exclude=_split(args.exclude))


def main(argv: list[str] | None = None) -> int:
    """``tooldns mcp``. Exit status: 0 stopped, 2 bad usage, 3 the mcp extra is missing."""
    if _MISSING is not None:
        print(f"tooldns mcp: the MCP server needs {_MISSING!r}, which is not installed; install the mcp extra: "
              "pip install 'tooldns[mcp]'", file=sys.stderr)
        return 3
    p = _parser()
    args = p.parse_args(argv)
    try:
        finder = _finder(args, p)
    except ResolverError as exc:
        p.error(str(exc))
    token = None
    if args.token_file is not None:
        if args.transport == "stdio":
            p.error("--token-file is for --transport streamable-http (over stdio the host that starts the server "
                    "is its only client)")
        try:
            token = read_token(args.token_file)
        except (OSError, ValueError) as exc:
            p.error(f"--token-file: {exc}")
    level = "INFO" if args.verbose else "WARNING"
    app = make_server(finder, level, token)
    try:
        if args.transport == "stdio":
            app.run("stdio")
        else:  # stdio stays silent (its standard output is the protocol); a server says where it listens
            print(f"tooldns mcp: serving MCP (streamable HTTP) at http://{args.host}:{args.port}{args.path}, tools "
                  f"found through {args.root}; at most {args.max_sessions_per_client} sessions a client, closed "
                  f"after {args.session_idle:g} s idle{'; bearer token required' if token else ''}; Ctrl-C stops",
                  file=sys.stderr, flush=True)
            _serve_http(app, args, level)
    except KeyboardInterrupt:
        pass
    return 0


def _serve_http(app: "MCPServer", args, level: str) -> None:
    """Serve *app* over streamable HTTP as the SDK's ``run`` does, behind :class:`.mcp_http.SessionsPerClient`."""
    import uvicorn  # the mcp SDK's own HTTP server (its dependency)

    asgi = app.streamable_http_app(streamable_http_path=args.path, session_idle_timeout=args.session_idle,
                                   host=args.host)
    bounded = SessionsPerClient(asgi, limit=args.max_sessions_per_client, idle=args.session_idle)
    # proxy_headers off: uvicorn would otherwise take a loopback client's X-Forwarded-For as its address,
    # and a flood from 127.0.0.1 could name a new address with each session
    server = uvicorn.Server(uvicorn.Config(bounded, host=args.host, port=args.port, log_level=level.lower(),
                                           proxy_headers=False))
    asyncio.run(server.serve())


if __name__ == "__main__":
    sys.exit(main())
