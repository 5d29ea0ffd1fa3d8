"""Build backend: setuptools' own, asking for Cython only when the compiled modules are asked for.

A plain ``pip install .`` (or ``-e``, with any extras) builds the package from its Python source
in seconds: nothing is compiled and Cython is not fetched, so an agent's client-only install and the
quick start never wait on a C compiler. ``TOOLDNS_COMPILE=1 pip install ...`` adds Cython to the
build's requirements and ``setup.py`` compiles the modules a query runs through
(``tooldns.compiled.MODULES``; about 4 minutes on 2 cores, shown with ``pip install -v``).

pyproject.toml names this module (``build-backend``, ``backend-path``); everything but the build
requirements is setuptools.build_meta unchanged::

    TOOLDNS_COMPILE=1 pip install -v -e ".[server]"
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - the hooks this module does not change

#: what compiling needs beyond setuptools (pyproject.toml's build-system requires)
CYTHON = "Cython>=3.1"


def _compiling() -> list[str]:
    """``[CYTHON]`` when this build compiles (``tooldns.compiled.compile_requested``), else nothing.

    ``tooldns/compiled.py`` is read by its path, as ``setup.py`` reads it: the standard library
    only, where nothing the package depends on is installed yet."""
    spec = importlib.util.spec_from_file_location("_tooldns_compiled",
                                                  Path(__file__).resolve().parent / "tooldns" / "compiled.py")
    compiled = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compiled)
    return [CYTHON] if compiled.compile_requested() else []


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compiling()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _compiling()
