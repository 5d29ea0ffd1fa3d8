"""The package layout holds: dependencies run one way, the client stands alone, functions stay short.

Folders, from the bottom up (each may import only those below it):

    tooldns.exceptions < tooldns.protocol < tooldns.chat < tooldns.scoring < tooldns.embedding
        < tooldns.zone < tooldns.dnssec < tooldns.serving < tooldns.fuzzpackets < tooldns.building < tooldns.commands
        < tooldns.cli

(``tooldns.embedding`` sits above ``tooldns.scoring`` because its hashing embedder uses the
tokenizer; argparse lives in the two top ones, the command line, and nowhere below), and ``resolver_client`` imports ``tooldns.protocol``, ``tooldns.embedding`` (when an
agent asks for vectors) and dnspython only, bar its MCP server (``resolver_client.mcp_server`` and
``mcp_http``, the ``mcp`` extra), which importing the library does not load. Imports are read from the source with :mod:`ast`
(function-level imports included), so a cycle hidden behind a late import is caught too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

LAYERS = ["tooldns.compiled", "tooldns.exceptions", "tooldns.protocol", "tooldns.chat", "tooldns.scoring", "tooldns.embedding",
          "tooldns.zone", "tooldns.dnssec", "tooldns.serving", "tooldns.fuzzpackets", "tooldns.building", "tooldns.commands",
          "tooldns.cli"]
HEAVY = ("dnslib", "yaml", "numpy", "sklearn", "openai")
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("tooldns", "resolver_client"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Every module *name* imports, absolute, as written in its source."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)  # `from . import names`
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(name, path) if m in modules and m != name} for name, path in modules.items()}


def _folder(module: str) -> str:
    if module.startswith("resolver_client"):
        return "resolver_client"
    return next((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), module)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt == node.rpartition(".")[0] or node == nxt.rpartition(".")[0]:
                continue  # a package and its own modules: Python's package import, not a cycle
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_folders_depend_one_way():
    wrong = []
    for module, imported in _graph().items():
        src = _folder(module)
        if src == "tooldns":
            continue  # the package face imports lazily from everything
        for target in imported:
            dst = _folder(target)
            if dst in (src, "tooldns"):
                continue
            if src == "resolver_client":
                ok = dst in ("tooldns.protocol", "tooldns.embedding")
            else:
                ok = dst in LAYERS and src in LAYERS and LAYERS.index(dst) < LAYERS.index(src)
            if not ok:
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_protocol_needs_only_the_standard_library_and_the_client_only_dnspython():
    modules = _modules()
    for name, path in modules.items():
        third_party = {m.split(".")[0] for m in _imports(name, path)} - set(sys.stdlib_module_names) - {
            "tooldns", "resolver_client", ""}
        if name.startswith("tooldns.protocol") or name == "tooldns.exceptions":
            assert not third_party, (name, third_party)
        if name.startswith("resolver_client"):
            mcp_side = name in ("resolver_client.mcp_server", "resolver_client.mcp_http")
            # the MCP server: the SDK and uvicorn, the HTTP server the SDK runs on (its dependency)
            assert third_party <= ({"dns", "mcp", "uvicorn"} if mcp_side else {"dns"}), (name, third_party)


@pytest.mark.integration
def test_importing_the_client_loads_nothing_of_the_server():
    code = "import json, sys, resolver_client; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    loaded = json.loads(out)
    assert "resolver_client.walk" in loaded and "dns.rdata" in loaded
    assert not [m for m in loaded if m.split(".")[0] in (*HEAVY, "mcp")]
    server_side = [m for m in loaded if m.startswith("tooldns") and _folder(m) not in ("tooldns", "tooldns.protocol",
                                                                                       "tooldns.exceptions",
                                                                                       "tooldns.compiled")]
    assert not server_side, server_side


@pytest.mark.integration
def test_the_resolver_cli_starts_without_what_only_some_calls_use():
    """asyncio (the async shell) and DNSSEC with cryptography (--validate) are loaded when used: with
    the version looked up at import, they were a third of every ``tooldns-resolve`` start."""
    code = "import json, sys, resolver_client.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    loaded = json.loads(out)
    assert "resolver_client.cli" in loaded and "resolver_client.validate" in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("asyncio", "cryptography") or m == "dns.dnssec"]


@pytest.mark.integration
def test_the_package_face_is_lazy_but_complete():
    code = ("import json, sys, tooldns; before = sorted(sys.modules); names = {n: type(getattr(tooldns, n)).__name__ "
            "for n in tooldns.__all__}; print(json.dumps([before, names]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    before, names = json.loads(out)
    assert not [m for m in before if m.split(".")[0] in HEAVY]
    assert {"TreeThread", "load_zone", "dump_zone", "build", "encode_intent", "make_scorer"} <= set(names)


@pytest.mark.integration
@pytest.mark.parametrize("package", HEAVY)
def test_the_server_cli_without_its_extra_says_what_to_install(package):
    """``pip install tooldns`` (no ``server`` extra) gives the client; ``tooldns`` then says what is missing."""
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            "from tooldns.cli import main; sys.exit(main(['check', 'zones']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if package in ("openai", "sklearn"):  # imported when first used: checking zones needs neither
        assert out.returncode == 0 and "ok" in out.stdout, out.stderr
        return
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert f"needs {package!r}" in out.stderr and "pip install 'tooldns[server]'" in out.stderr


def test_functions_are_short():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, long


def test_every_module_says_what_it_is_for():
    paths = list(_modules().values()) + sorted((ROOT / "scripts").rglob("*.py"))
    missing = [str(p.relative_to(ROOT)) for p in paths if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not missing, missing


def test_only_the_command_line_parses_a_command_line():
    """argparse is the CLI's (``tooldns.cli``, ``tooldns.commands``, ``resolver_client``'s own CLI and
    MCP server): library modules take plain arguments."""
    own = ("tooldns.cli", "tooldns.commands", "resolver_client.cli", "resolver_client.mcp_server")
    parsing = [name for name, path in _modules().items()
               if "argparse" in _imports(name, path) and not name.startswith(own)]
    assert not parsing, parsing
