"""Cursor names: where a search stands in the `.tools` tree, as pure functions on text.

Grammar (labels compare case-insensitively; some resolvers randomise case, RFC draft 0x20)::

    _<service>._<transport>._<first>.<rest>.   cursor form: "search the children of zone
                                                <first>.<rest>. for this intent"
    _<service>._<transport>.<zone>.            expanded form: "the tools of <zone>" (RFC 2782 SRV
                                                owner name; an ordinary SRV client can ask it)

    >>> parse_cursor("_mcp._tcp._weather.tools.")
    Cursor(service='mcp', transport='tcp', zone='weather.tools.', expanded=False)
    >>> Cursor("mcp", "tcp", "history.weather.tools.", expanded=True).to_text()
    '_mcp._tcp.history.weather.tools.'

Services are `mcp`, `a2a`, `http` and `skill`, and the wildcard `any` (tools of every service).
Label and name lengths of RFC 1035 (63 and 255 octets on the wire) are enforced with clear errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..exceptions import NameError_

#: ``any`` is the wildcard service: a cursor with it asks for tools of every service.
ANY_SERVICE = "any"
SERVICES = frozenset({"mcp", "a2a", "http", "skill", ANY_SERVICE})
TRANSPORTS = frozenset({"tcp", "udp"})
MAX_LABEL = 63
MAX_NAME = 255
# Host-name labels plus the underscore used by service labels (RFC 8552) and cursors.
_LABEL_RE = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?$")


def check_label(label: str) -> str:
    """Return *label* lower-cased, or raise saying why it is not a valid label."""
    if not label:
        raise NameError_("empty label (two dots in a row, or a leading dot)")
    try:
        raw = label.encode("ascii")
    except UnicodeEncodeError:
        raise NameError_(f"label {label!r} is not ASCII; use its IDNA (xn--) form") from None
    if len(raw) > MAX_LABEL:
        raise NameError_(f"label {label[:20]!r}... is {len(raw)} octets; at most {MAX_LABEL} are allowed")
    low = label.lower()
    if not _LABEL_RE.match(low):
        raise NameError_(f"label {label!r} may hold only letters, digits, '-' and '_', "
                         "and may not start or end with '-'")
    return low


@lru_cache(maxsize=8192)
def normalize(name: str) -> str:
    """Return *name* lower-cased and absolute (ending in '.'), checked against RFC 1035 limits.

    Pure, so cached: a server sees the same few names over and over.
    """
    if not isinstance(name, str):
        raise NameError_(f"a name must be text, got {type(name).__name__}")
    text = name.strip()
    if text in ("", "."):
        return "."
    if not text.endswith("."):
        text += "."
    labels = text[:-1].split(".")
    labels = [check_label(label) for label in labels]
    wire = sum(len(label) + 1 for label in labels) + 1
    if wire > MAX_NAME:
        raise NameError_(f"name is {wire} octets on the wire; at most {MAX_NAME} are allowed")
    return ".".join(labels) + "."


def labels(name: str) -> list[str]:
    """The labels of an absolute, normalized name, leftmost first ('.' has none)."""
    return [] if name == "." else name[:-1].split(".")


def is_subdomain(name: str, zone: str) -> bool:
    """True if normalized *name* is *zone* or lies below it."""
    return zone == "." or name == zone or name.endswith("." + zone)


#: the label a stand-in name (:func:`wire_name`) has where the question's odd labels stood: no zone holds it
STAND_IN = "\x00"


def wire_name(labels: tuple[bytes, ...] | list[bytes]) -> tuple[str, str | None]:
    """A question name as read off the wire (its *labels*), as the text a zone decides on: lower-case
    and absolute, with None; or, when a label holds a dot or an octet outside ASCII (no name a zone
    serves has one; joined with dots it would read as another name), a stand-in and what is wrong.

    The stand-in lies where the question's name lies: its labels right of the last odd one are kept
    and the rest become one label no zone holds (:data:`STAND_IN`), so a zone refuses a name outside
    it and denies one inside it, as any name it does not hold.

        >>> wire_name((b"History", b"weather", b"tools"))
        ('history.weather.tools.', None)
        >>> wire_name((b"weather.tools",))[0], wire_name((b"a.b", b"weather", b"tools"))[0]
        ('\x00.', '\x00.weather.tools.')
    """
    for at in range(len(labels) - 1, -1, -1):
        label = labels[at]
        if b"." in label or not label.isascii():
            kept = [part.decode("ascii").lower() for part in labels[at + 1:]]
            what = "a dot" if b"." in label else "octets outside ASCII"
            shown = "".join("\\." if c == 0x2E else chr(c) if 0x20 < c < 0x7F and c not in b'\\"' else f"\\{c:03d}"
                            for c in label)  # as dig shows it
            return ".".join([STAND_IN, *kept]) + ".", f"label '{shown}' holds {what}: no name here has one"
    return (b".".join(labels).decode("ascii").lower() + ".") if labels else ".", None


def parent(name: str) -> str:
    parts = labels(name)
    return ".".join(parts[1:]) + "." if len(parts) > 1 else "."


@dataclass(frozen=True)
class Cursor:
    """A search position: which service, and which zone's children (or tools) are asked for."""

    service: str
    transport: str
    zone: str
    expanded: bool = False

    def to_text(self) -> str:
        if self.expanded:
            return normalize(f"_{self.service}._{self.transport}.{self.zone}")
        first, _, rest = self.zone.partition(".")
        if not first:
            raise NameError_("the DNS root has no cursor form")
        return normalize(f"_{self.service}._{self.transport}._{first}.{rest}")

    def descend(self, child_zone: str) -> "Cursor":
        """The cursor one step down, at *child_zone* (a zone below this one)."""
        return Cursor(self.service, self.transport, normalize(child_zone), expanded=False)

    def expand(self) -> "Cursor":
        """The expanded form of this cursor: the tools of its zone."""
        return Cursor(self.service, self.transport, self.zone, expanded=True)


def cursor(service: str, zone: str, transport: str = "tcp", expanded: bool = False) -> Cursor:
    """Build a checked cursor."""
    service, transport = service.lower(), transport.lower()
    if service not in SERVICES:
        raise NameError_(f"unknown service {service!r}; known: {', '.join(sorted(SERVICES))}")
    if transport not in TRANSPORTS:
        raise NameError_(f"unknown transport {transport!r}; known: {', '.join(sorted(TRANSPORTS))}")
    c = Cursor(service, transport, normalize(zone), expanded)
    c.to_text()  # enforce length limits of the name it makes
    return c


@lru_cache(maxsize=8192)
def parse_cursor(name: str) -> Cursor | None:
    """Parse *name* as a cursor name; None if it is not one (no `_svc._proto.` prefix).

    Raises :class:`NameError_` for names that break RFC 1035 or name an unknown service.
    """
    norm = normalize(name)
    parts = labels(norm)
    if len(parts) < 3 or not parts[0].startswith("_") or not parts[1].startswith("_"):
        return None
    service, transport = parts[0][1:], parts[1][1:]
    if service not in SERVICES:
        raise NameError_(f"unknown service label _{service}; known: "
                         + ", ".join("_" + s for s in sorted(SERVICES)))
    if transport not in TRANSPORTS:
        raise NameError_(f"unknown transport label _{transport}; known: "
                         + ", ".join("_" + t for t in sorted(TRANSPORTS)))
    first = parts[2]
    if first.startswith("_"):
        if len(first) == 1:
            raise NameError_("cursor label '_' names no zone")
        zone = ".".join([first[1:], *parts[3:]]) + "."
        return Cursor(service, transport, zone, expanded=False)
    return Cursor(service, transport, ".".join(parts[2:]) + ".", expanded=True)
