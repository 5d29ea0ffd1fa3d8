"""The ``tooldns`` command line's own rooms: argparse, flags, help texts and what is printed.

:mod:`tooldns.cli` is the door (``tooldns serve``, ``check``, ``demo``, ``embed``, ``mcp``);
:mod:`.build` adds ``tooldns build`` (and ``build --update``), :mod:`.dnssec` ``tooldns dnssec``
and the DNSSEC flags of ``build`` and ``serve``; :mod:`.argtypes` holds the argparse types they
share. Each turns arguments into a call of a library function that takes plain arguments
(:func:`tooldns.building.build`, :func:`tooldns.building.update`, :mod:`tooldns.dnssec.manage`);
nothing below this package parses a command line.

    >>> from tooldns.cli import main
    >>> main(["build", "services.json", "--out", "built/"])
    0
"""
