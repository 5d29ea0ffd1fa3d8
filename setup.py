"""Build hook: compiles the modules a query's answer runs through (``tooldns.compiled.MODULES``) with
Cython when the install asks for it (``TOOLDNS_COMPILE=1 pip install ...``, which also has
``build_backend.py`` fetch Cython for the build); everything else is in pyproject.toml.

Each module is compiled from its own source with its annotations blanked out (:func:`blank_annotations`:
the same lines and columns, so tracebacks point where the source does). Cython reads annotations as C
types and then refuses, at run time, a subclass of list or tuple where one is annotated (a NamedTuple
where ``tuple[...]`` is written), even with its ``annotation_typing`` directive off; without them the
compiled module keeps Python's semantics. Beside each extension goes its stamp, the SHA-256 of the
source it was built from, which ``tooldns.compiled`` checks before letting it stand in for the source.

A plain ``pip install ...`` compiles nothing. A module that fails to compile is left to run from its
source, with a warning, and the install goes on (CI checks ``tooldns.compiled.status()`` after it).
The C compiler runs on every core (``build_ext --parallel``).
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
#: where the blanked copies and Cython's C files are written
WORK = Path("build") / "cython"


def _compiled_module():
    """``tooldns/compiled.py``, read without importing the package (the build needs none of it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tooldns_compiled", ROOT / "tooldns" / "compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _offset(lines: list[bytes], line: int, col: int) -> int:
    """The offset in the whole text of *lines* of (1-based *line*, byte *col*), as ``ast`` gives them."""
    return sum(map(len, lines[:line - 1])) + col


def _spans(tree: ast.AST, lines: list[bytes], text: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, replacement) of every annotation in *tree* but a class body's fields."""
    spans: list[tuple[int, int, bytes]] = []

    def at(node, end=False):
        return _offset(lines, node.end_lineno, node.end_col_offset) if end else _offset(lines, node.lineno, node.col_offset)

    def visit(node, in_class: bool) -> None:
        function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function:
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None and arg.annotation is not None:
                    spans.append((at(arg) + len(arg.arg.encode()), at(arg.annotation, end=True), b""))
            if node.returns is not None:
                start = at(node.returns)
                spans.append((text.rindex(b"->", 0, start), at(node.returns, end=True), b""))
        elif isinstance(node, ast.AnnAssign) and not in_class:
            if node.value is None:  # `x: T` declares only: a statement that does nothing
                spans.append((at(node), at(node, end=True), b"pass"))
            else:
                spans.append((at(node.target, end=True), at(node.annotation, end=True), b""))
        for child in ast.iter_child_nodes(node):  # a class's body is in a class; a function's is not
            visit(child, isinstance(node, ast.ClassDef) or (in_class and not function))

    visit(tree, False)
    return spans


def blank_annotations(source: str) -> str:
    """*source* with the annotations of functions and variables outside class bodies overwritten by
    spaces (a bare ``x: T`` by ``pass``): every line and column where it was. Class bodies keep theirs
    (dataclass and NamedTuple fields are made of them). Raises ValueError if the result would not be
    the same program without those annotations."""
    text = source.encode("utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(source)
    out = bytearray(text)
    for start, end, replacement in _spans(tree, lines, text):
        blank = bytes(b if b in b"\r\n" else 32 for b in out[start:end])
        out[start:end] = replacement + blank[len(replacement):]
    blanked = out.decode("utf-8")
    if ast.dump(ast.parse(blanked)) != ast.dump(_Unannotate().visit(ast.parse(source))):
        raise ValueError("blanking the annotations changed the program")
    return blanked


class _Unannotate(ast.NodeTransformer):
    """The annotations :func:`blank_annotations` blanks, removed from a tree: what it must come to."""

    def __init__(self) -> None:
        self.in_class = False

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def _function(self, node):
        node.returns = None
        was, self.in_class = self.in_class, False
        self.generic_visit(node)
        self.in_class = was
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        was, self.in_class = self.in_class, True
        self.generic_visit(node)
        self.in_class = was
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if self.in_class:
            return node
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value)


class BuildCompiled(build_ext):
    """``build_ext`` that lets a module that fails to compile run from its source, and writes each
    extension's stamp wherever the extension went (the build directory, and the source tree when
    installing for development, setuptools copying only the extension there)."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.failed: set[str] = set()  # the extensions that did not compile this time

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # 31 modules one after the other: most of the compile's minutes
            self.parallel = os.cpu_count() or 1

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: the source runs instead
            self.failed.add(ext.name)  # an older build of it may lie there: it gets no stamp of this source
            print(f"warning: {ext.name} not compiled ({exc}); it runs from its source", file=sys.stderr)

    def run(self) -> None:
        # Cython is needed here only: the build's requirements are read (running this file, preparing
        # this command) before it is there
        cythonize_blanked(self.extensions)
        super().run()
        compiled = _compiled_module()
        for ext in self.extensions:
            built = Path(self.get_ext_fullpath(ext.name))
            if ext.name in self.failed or not built.exists():
                continue
            stamp = compiled.source_digest(ROOT.joinpath(*ext.name.split(".")).with_suffix(".py")) + "\n"
            Path(str(built) + compiled.STAMP_SUFFIX).write_text(stamp, encoding="ascii")
            in_tree = ROOT / self.get_ext_filename(ext.name)  # where a development install copied it
            if in_tree != built and in_tree.exists() and in_tree.read_bytes() == built.read_bytes():
                Path(str(in_tree) + compiled.STAMP_SUFFIX).write_text(stamp, encoding="ascii")


def extensions() -> list[Extension]:
    """The extensions to build, each from its module's source: none unless ``TOOLDNS_COMPILE`` asks for
    them. Cython makes their C when they are built (:func:`cythonize_blanked`)."""
    compiled = _compiled_module()
    if not compiled.compile_requested():
        return []
    return [Extension(name, [str(Path(*name.split(".")).with_suffix(".py"))]) for name in compiled.MODULES]


def cythonize_blanked(modules: list[Extension]) -> None:
    """Point each of *modules* at the C that Cython makes of its source with the annotations blanked, in
    place (setuptools has prepared them already); those pointed at C already are left as they are."""
    todo = [ext for ext in modules if any(source.endswith(".py") for source in ext.sources)]
    if not todo:
        return
    try:
        from Cython.Build import cythonize
    except ImportError:  # asked for, yet not there: a build without isolation, in an environment without it
        raise SystemExit(f"{_compiled_module().COMPILE_VARIABLE} is set but Cython is not installed: pip install "
                         "'Cython>=3.1', or build with isolation (pip's default), which fetches it") from None
    for ext in todo:
        (relative,) = ext.sources
        copy = ROOT / WORK / relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        blanked = blank_annotations((ROOT / relative).read_text(encoding="utf-8"))
        if not copy.exists() or copy.read_text(encoding="utf-8") != blanked:
            copy.write_text(blanked, encoding="utf-8")
    here = os.getcwd()
    os.chdir(ROOT / WORK)  # so that Cython names each source as the package does: tooldns/serving/wire.py
    try:
        built = cythonize([Extension(ext.name, list(ext.sources)) for ext in todo], language_level=3,
                          nthreads=os.cpu_count() or 1, quiet=True,
                          compiler_directives={"annotation_typing": False, "binding": True})
    finally:
        os.chdir(here)
    for ext, c in zip(todo, built, strict=True):
        ext.sources = [os.path.relpath(ROOT / WORK / source) for source in c.sources]


if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildCompiled})
