"""Zone files written as PyYAML writes them, without PyYAML's per-node work where it can be left out.

``yaml.dump`` walks every node through Python (a representer, a resolver per scalar, then the
emitter): about a quarter of ``tooldns build``'s time on a large catalog went there, most of it on
the tools of tens of thousands of leaves, whose scalars are plain words. :func:`dump` writes a
document of dicts, lists, strings, numbers, booleans and None in block style, exactly as
``yaml.dump(doc, Dumper=CSafeDumper, sort_keys=False, allow_unicode=True, width=120)`` does: the
same keys in the same order, the same scalars plain or single-quoted as libyaml chooses (its rules
for printable ASCII in a block context: indicators first, ``': '`` and ``' #'``, leading and
trailing spaces, and the resolver's verdict on whether the plain text reads back as a string),
folded at the same spaces, ``[]`` and ``{}`` for empty collections. Every other top-level value, or
item of a top-level list (one tool, one child), such as one holding non-ASCII text or a line break,
is handed to ``yaml.dump`` whole, which writes it as it stands at the top of a file, where it stands
here. A document in which a dict or list appears twice (PyYAML writes an anchor and an alias) goes
to ``yaml.dump`` whole.

``tests/test_zone_emit.py`` checks the bytes against ``yaml.dump`` on the shipped zones, a built
tree and generated documents. :data:`LOADER` is the reader zone files are read back with. This
module knows no zone keys: :mod:`.zonefile`, the one schema, is its only user (it turns a zone into
the document written here, and reads the file back).

    >>> dump({"origin": "weather.tools.", "ttl": 3600, "tools": [{"label": "a", "port": 0}]})
    'origin: weather.tools.\\nttl: 3600\\ntools:\\n- label: a\\n  port: 0\\n'
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

#: the writer whose bytes :func:`dump` reproduces (libyaml's); without libyaml, PyYAML's own, used whole
DUMPER = getattr(yaml, "CSafeDumper", None)
#: the reader zone files are parsed with: libyaml's when PyYAML has it (built zone files can be
#: megabytes), PyYAML's own otherwise; both give the same marks (line numbers in errors)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: the line width zone files are written at (PyYAML folds a plain scalar at a space past it)
WIDTH = 120

_RESOLVER = Resolver()
_STR, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:float"
#: the only implicit types a word starting with a letter can resolve to (PyYAML's bool and null)
_BOOL_NULL = frozenset("yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF "
                       "null Null NULL".split())
#: first characters that make libyaml quote a scalar (its indicators; '-', '?' and ':' only before a space)
_INDICATORS = frozenset("#,[]{}&*!|>'\"%@`")


#: key -> as written with its colon (a zone's keys are its fields and its terms: most repeat)
_KEYS: dict[str, str] = {}
#: short texts written plain, remembered (types, service names, words of parameters)
_PLAIN: set[str] = set()


class _Whole(Exception):
    """This value is written by yaml.dump."""


class _Shared(Exception):
    """A dict or list appears twice: the document is written by yaml.dump."""


def dump(doc: dict[str, Any]) -> str:
    """*doc* as ``yaml.dump(doc, Dumper=CSafeDumper, sort_keys=False, allow_unicode=True, width=120)`` writes it."""
    if DUMPER is None or not doc:
        return pyyaml(doc)
    seen: set[int] = set()
    out: list[str] = []
    try:
        for key, value in doc.items():
            if type(value) is list and value:  # one item at a time: a tool, a child
                _note(value, seen)
                out.append(_key(key) + "\n")
                for item in value:
                    out.append(_part(_seq, [item], item, seen))
            else:
                out.append(_part(_map, {key: value}, value, seen))
    except (_Shared, _Whole):
        return pyyaml(doc)
    return "".join(out)


def pyyaml(value: Any) -> str:
    """*value* written by PyYAML itself, as zone files are (the reference :func:`dump` reproduces)."""
    return yaml.dump(value, Dumper=DUMPER or yaml.SafeDumper, sort_keys=False, allow_unicode=True, width=WIDTH)


def _part(write, wrapped, value, seen: set[int]) -> str:
    """*value*, *wrapped* in a one-key dict or a one-item list, written as at the top of a file: by
    *write* when every scalar of it is plain, else by yaml.dump. The dicts and lists it holds join
    *seen*; :class:`_Shared` when one is there already."""
    out: list[str] = []
    mine: set[int] = set()
    try:
        write(out, wrapped, 0, "", mine)
        text = "".join(out)
    except _Whole:
        mine.clear()
        _containers(value, mine)
        text = pyyaml(wrapped)
    if not seen.isdisjoint(mine):
        raise _Shared
    seen |= mine
    return text


def _containers(value, seen: set[int]) -> None:
    """Note every dict and list of *value* in *seen*; :class:`_Shared` if one is there already."""
    if type(value) is dict or type(value) is list:
        _note(value, seen)
        for item in (value.values() if type(value) is dict else value):
            _containers(item, seen)


def _key(key) -> str:
    """A mapping key as written, with its colon: remembered (:data:`_KEYS`), since keys repeat."""
    if type(key) is not str or len(key) > 100:
        raise _Whole
    if len(_KEYS) >= 1 << 16:
        _KEYS.clear()
    written = _KEYS[key] = _text(key, 0, 0, False) + ":"
    return written


def _plain(text: str) -> bool | None:
    """Whether libyaml writes printable ASCII *text* as a plain scalar (True) or single-quoted
    (False), by its rules for a block context; None where this module does not decide."""
    if not text or text[0] == " " or text[-1] == " " or text[-1] == ":" or ": " in text or " #" in text:
        return False
    first = text[0]
    if first in _INDICATORS or text.startswith(("---", "...")):
        return False
    if first in "-?:" and (len(text) == 1 or text[1] == " "):
        return False
    if first.isalpha():  # of the implicit types, only bool and null start with a letter
        return text not in _BOOL_NULL
    return _RESOLVER.resolve(ScalarNode, text, (True, False)) == _STR


def _text(text: str, column: int, indent: int, breaks: bool = True) -> str:
    """*text* written from *column*, plain or single-quoted as libyaml chooses, folded (when
    *breaks*) at a single space written past :data:`WIDTH`, each fold indented by *indent*."""
    if not text.isascii() or not text.isprintable():
        raise _Whole
    if text in _PLAIN:
        plain = True
    else:
        plain = _plain(text)
        if plain and len(text) <= 40 and len(_PLAIN) < 1 << 16:
            _PLAIN.add(text)
    if plain is None:
        raise _Whole
    if plain:
        return text if not breaks or column + len(text) <= WIDTH else _fold(text, column, indent)
    if not breaks or column + 1 + len(text) + text.count("'") <= WIDTH:
        return "'" + text.replace("'", "''") + "'"
    return "'" + _fold(text.replace("'", "''"), column + 1, indent) + "'"


def _scalar(value, column: int, indent: int) -> str:
    """A scalar written from *column*, its folds indented by *indent*."""
    kind = type(value)
    if kind is str:
        return _text(value, column, indent)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    if kind is float:  # SafeRepresenter.represent_float, for finite numbers
        text = repr(value).lower()
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
        if _RESOLVER.resolve(ScalarNode, text, (True, False)) != _FLOAT:
            raise _Whole
        return text
    raise _Whole


def _fold(text: str, column: int, indent: int) -> str:
    """*text* (its quotes doubled if quoted) written from *column*, broken as libyaml breaks it: at
    a space between two other characters, when written past :data:`WIDTH`."""
    lines, start, n = [], 0, len(text)
    while True:
        at = text.find(" ", start + max(WIDTH + 1 - column, 0))
        while at != -1 and (at == 0 or text[at - 1] == " " or at + 1 == n or text[at + 1] == " "):
            at = text.find(" ", at + 1)
        if at == -1:
            lines.append(text[start:])
            return ("\n" + " " * indent).join(lines)
        lines.append(text[start:at])
        start, column = at + 1, indent


def _value(out: list[str], value, indent: int, column: int, seen: set[int]) -> None:
    """What follows a mapping key written up to *column* (its colon included), the mapping at *indent*."""
    kind = type(value)
    if kind is not dict and kind is not list:
        out.append(" " + _scalar(value, column + 1, indent + 2) + "\n")
    elif _empty(value, seen):
        out.append(" {}\n" if kind is dict else " []\n")
    elif kind is dict:
        out.append("\n")
        _map(out, value, indent + 2, " " * (indent + 2), seen)
    else:  # a sequence in a mapping stands at the mapping's indent
        out.append("\n")
        _seq(out, value, indent, " " * indent, seen)


def _note(value, seen: set[int]) -> None:
    """Note dict or list *value* in *seen*; :class:`_Shared` if it is there already."""
    if id(value) in seen:
        raise _Shared
    seen.add(id(value))


def _empty(value, seen: set[int]) -> bool:
    """Whether dict or list *value* is empty, noted in *seen* (:func:`_note`)."""
    _note(value, seen)
    return not value


def _map(out: list[str], mapping: dict, indent: int, lead: str, seen: set[int]) -> None:
    """A block mapping whose keys stand at *indent*; the first after *lead* (its indent, or nothing after '- ')."""
    pad = " " * indent
    keys = _KEYS
    for key, value in mapping.items():
        head = (keys.get(key) if type(key) is str else None) or _key(key)
        kind = type(value)
        if kind is int:  # the common cases written here: a term's count, a word
            out.append(f"{lead}{head} {value}\n")
        elif kind is str and value in _PLAIN and indent + len(head) + 1 + len(value) <= WIDTH:
            out.append(f"{lead}{head} {value}\n")
        else:
            out.append(lead + head)
            _value(out, value, indent, indent + len(head), seen)
        lead = pad


def _seq(out: list[str], items: list, indent: int, lead: str, seen: set[int]) -> None:
    """A block sequence whose dashes stand at *indent*; the first after *lead*."""
    pad = " " * indent
    for item in items:
        out.append(lead + "- ")
        lead = pad
        kind = type(item)
        if kind is not dict and kind is not list:
            out.append(_scalar(item, indent + 2, indent + 2) + "\n")
        elif _empty(item, seen):
            out.append("{}\n" if kind is dict else "[]\n")
        else:  # its first key or dash on the dash's line
            (_map if kind is dict else _seq)(out, item, indent + 2, "", seen)
