"""The compiled modules (tooldns.compiled, setup.py): built from their source with the annotations
blanked out, each line and column where it was; run only when built from the source as it is now;
and answering, byte for byte, as the source does.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tooldns import compiled

from conftest import ROOT


def _setup_module():
    """setup.py, imported (it calls setup() only when run)."""
    spec = importlib.util.spec_from_file_location("tooldns_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


blank_annotations = _setup_module().blank_annotations


def _backend():
    """build_backend.py, the build backend pyproject.toml names, imported."""
    spec = importlib.util.spec_from_file_location("tooldns_build_backend", ROOT / "build_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("compile_, pure, compiles", [(None, None, False), ("0", None, False), ("1", None, True),
                                                      ("1", "1", False), ("yes", "0", True)])
def test_only_an_install_that_asks_compiles_and_only_it_fetches_cython(monkeypatch, compile_, pure, compiles):
    """A plain install (the quick start, an agent's client-only one) compiles nothing and its build needs
    no Cython; ``TOOLDNS_COMPILE=1`` asks for both, unless ``TOOLDNS_PURE`` says otherwise."""
    for name, value in ((compiled.COMPILE_VARIABLE, compile_), (compiled.PURE_VARIABLE, pure)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert compiled.compile_requested() is compiles
    assert _backend()._compiling() == (["Cython>=3.1"] if compiles else [])
    extensions = _setup_module().extensions()  # named, each from its source: Cython runs when they are built
    assert [(e.name, e.sources) for e in extensions] == ([(name, [name.replace(".", "/") + ".py"])
                                                           for name in compiled.MODULES] if compiles else [])

SNIPPET = textwrap.dedent('''\
    from typing import NamedTuple

    class Pair(NamedTuple):
        a: int
        b: "float | None" = None

    def f(x: list[tuple[int, float]], *rest: int, k: int = 3, **kw: dict[str,
          int]) -> dict[int, float]:
        total: float = 0.0
        seen: set[int]
        for i, w in x:  # the loop Cython typed as exact tuples
            total += w
        class Inner:
            field: int = 1
            def m(self) -> "Inner": return self
        return {k: total}

    async def g(y: bytes) -> None: return None
    TABLE: dict[str, int] = {"é": 1}
    ''')


def test_blanking_keeps_every_line_and_column_and_class_fields():
    out = blank_annotations(SNIPPET)
    assert out.count("\n") == SNIPPET.count("\n")
    for before, after in zip(SNIPPET.splitlines(), out.splitlines()):
        assert len(before.encode()) == len(after.encode()) or after.strip() == "pass"
    assert "a: int" in out and 'b: "float | None" = None' in out and "field: int = 1" in out  # fields stay
    assert "list[" not in out and "-> dict" not in out and "total: float" not in out and "TABLE: dict" not in out
    assert out.splitlines()[9].strip() == "pass"  # `seen: set[int]` declares nothing
    assert out.index("for i, w in x:") == SNIPPET.index("for i, w in x:")  # the same column, the same line
    tree = ast.parse(out)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert all(a.annotation is None for a in function.args.args) and function.returns is None
    namespace: dict = {}
    exec(compile(out, "snippet", "exec"), namespace)
    assert namespace["f"]([namespace["Pair"](1, 2.5)], k=7) == {7: 2.5}  # a NamedTuple where tuple was written


@pytest.mark.parametrize("name", compiled.MODULES)
def test_every_compiled_module_blanks_to_the_same_program(name):
    source = (ROOT / (name.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    out = blank_annotations(source)  # raises if the program changed
    assert out.count("\n") == source.count("\n")


def _twins(tmp_path, stamp: str | None):
    """A module's source and a stand-in for its extension (never loaded), with *stamp* beside it."""
    source = tmp_path / "wire.py"
    source.write_text("X = 1\n")
    extension = tmp_path / ("wire" + importlib.machinery.EXTENSION_SUFFIXES[0])
    extension.write_bytes(b"not loaded here")
    if stamp is not None:
        (tmp_path / (extension.name + compiled.STAMP_SUFFIX)).write_text(stamp + "\n")
    return source


def test_an_extension_built_from_this_source_is_left_to_python(tmp_path, monkeypatch):
    monkeypatch.delenv(compiled.PURE_VARIABLE, raising=False)
    source = _twins(tmp_path, None)
    (tmp_path / (f"wire{importlib.machinery.EXTENSION_SUFFIXES[0]}{compiled.STAMP_SUFFIX}")).write_text(
        compiled.source_digest(source))
    assert compiled.SourceFinder().find_spec("tooldns.serving.wire", [str(tmp_path)]) is None


@pytest.mark.parametrize("stamp", [None, "0" * 64])
def test_an_extension_of_other_source_gives_way_to_the_source_with_a_warning(tmp_path, monkeypatch, stamp):
    monkeypatch.delenv(compiled.PURE_VARIABLE, raising=False)
    source = _twins(tmp_path, stamp)
    with pytest.warns(RuntimeWarning, match="rebuild"):
        spec = compiled.SourceFinder().find_spec("tooldns.serving.wire", [str(tmp_path)])
    assert spec.origin == str(source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.X == 1


def test_tooldns_pure_runs_the_source_and_other_modules_are_not_touched(tmp_path, monkeypatch, recwarn):
    source = _twins(tmp_path, None)
    monkeypatch.setenv(compiled.PURE_VARIABLE, "1")
    assert compiled.SourceFinder().find_spec("tooldns.serving.wire", [str(tmp_path)]).origin == str(source)
    assert not recwarn.list  # asked for: no warning
    assert compiled.SourceFinder().find_spec("tooldns.cli", [str(tmp_path)]) is None
    monkeypatch.setenv(compiled.PURE_VARIABLE, "0")  # "0" asks for nothing
    with pytest.warns(RuntimeWarning):
        compiled.SourceFinder().find_spec("tooldns.serving.wire", [str(tmp_path)])


def test_what_runs_compiled_is_what_was_built_from_this_source():
    """Every module with a current build beside it runs compiled (unless TOOLDNS_PURE), every other
    from its source: a stale build never answers."""
    state = compiled.status()
    for name in compiled.MODULES:
        source = ROOT / (name.replace(".", "/") + ".py")
        built = [p for p in source.parent.glob(source.stem + ".*") if str(p).endswith(
            tuple(importlib.machinery.EXTENSION_SUFFIXES))]
        current = any(not compiled._stale(str(p), str(source)) for p in built)
        expected = "compiled" if current and not compiled.pure() else "source"
        assert name in state[expected], (name, state)


REPLIES = textwrap.dedent('''\
    import hashlib, json, logging, random, sys
    sys.path.insert(0, sys.argv[1])
    from test_fast_reply import _queries
    from tooldns import compiled
    from tooldns.fuzzpackets import CATEGORIES, Target, make_packet
    from tooldns.serving.resolver import StaticSource, ZoneResolver
    from tooldns.serving.server import DNSServer
    from tooldns.serving.tree import load_tree

    class Errors(logging.Handler):
        count = 0
        def emit(self, record): Errors.count += 1

    logging.getLogger("tooldns").addHandler(Errors(logging.ERROR))
    digests = {"queries": hashlib.sha256(), "hostile": hashlib.sha256()}
    counts = dict.fromkeys(digests, 0)

    def answer(server, kind, data, udp):
        reply = server.handle(data, udp)
        digests[kind].update(len(data).to_bytes(2, "big") + data + (b"-" if reply is None else reply))
        counts[kind] += 1

    for n, store in enumerate(sorted(load_tree(sys.argv[2]), key=lambda s: s.index.origin)):
        server = DNSServer(ZoneResolver(StaticSource(store.index)), "127.0.0.1", 0)
        for data, udp in _queries(store.index, 120, n, False):
            answer(server, "queries", data, udp)
        zone, rng = store.zone, random.Random(n)
        names = tuple(c.name for c in zone.children) + tuple(t.owner(zone.origin) for t in zone.tools)
        target = Target(zone.origin, names)
        for i in range(160):
            data = make_packet(sorted(CATEGORIES)[i % len(CATEGORIES)], rng, target)
            answer(server, "hostile", data, True)
            answer(server, "hostile", data, False)
    print(json.dumps({"digests": {k: d.hexdigest() for k, d in digests.items()}, "counts": counts,
                      "errors": Errors.count, "compiled": len(compiled.status()["compiled"])}))
    ''')


def _replies(pure: bool) -> dict:
    env = {**os.environ, compiled.PURE_VARIABLE: "1" if pure else "0"}
    folders = [str(ROOT / "tests"), str(ROOT / "zones")]
    out = subprocess.run([sys.executable, "-c", REPLIES, *folders], env=env,
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_compiled_and_source_modules_answer_the_same_bytes():
    """Every zone of the shipped tree, 120 queries each (intents, names, K, types, EDNS sizes, UDP and
    TCP) and 160 hostile messages each over UDP and TCP (every category of tooldns/fuzzpackets.py:
    random bytes, mutated queries, pointer loops, bad OPT records and options, responses...),
    answered in a process running the compiled modules and in one running their source: the same
    bytes, or the same silence, for every one, and no internal error logged by either."""
    fast, slow = _replies(pure=False), _replies(pure=True)
    if not fast["compiled"]:
        pytest.skip("no module is compiled in this install (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")
    assert slow["compiled"] == 0
    assert fast["counts"] == slow["counts"]
    assert fast["counts"]["queries"] > 2000 and fast["counts"]["hostile"] > 7000
    assert fast["digests"] == slow["digests"]
    assert fast["errors"] == slow["errors"] == 0
