"""Cursor names: parse and build as pure functions; RFC 1035 limits."""

import pytest

from tooldns.exceptions import NameError_
from tooldns.protocol.names import Cursor, cursor, normalize, parse_cursor


def test_parse_cursor_forms():
    assert parse_cursor("_mcp._tcp._tools.") == Cursor("mcp", "tcp", "tools.", False)
    assert parse_cursor("_mcp._tcp._weather.tools.") == Cursor("mcp", "tcp", "weather.tools.", False)
    assert parse_cursor("_mcp._tcp.history.weather.tools.") == Cursor("mcp", "tcp", "history.weather.tools.", True)
    assert parse_cursor("ns1.weather.tools.") is None
    assert parse_cursor("github._mcp._tcp.code.tools.") is None


def test_case_insensitive():
    assert parse_cursor("_MCP._Tcp._WeAtHeR.TOOLS") == parse_cursor("_mcp._tcp._weather.tools.")


def test_build_and_move_down():
    c = cursor("a2a", "tools.")
    assert c.to_text() == "_a2a._tcp._tools."
    d = c.descend("weather.tools.")
    assert d.to_text() == "_a2a._tcp._weather.tools."
    assert d.descend("history.weather.tools.").expand().to_text() == "_a2a._tcp.history.weather.tools."


@pytest.mark.parametrize("name, message", [
    ("_ftp._tcp._tools.", "unknown service"),
    ("_mcp._sctp._tools.", "unknown transport"),
    ("_mcp._tcp._.tools.", "names no zone"),
    ("a..b.", "empty label"),
    ("x" * 64 + ".tools.", "at most 63"),
    (".".join(["abcdefghi"] * 26) + ".", "at most 255"),
    ("wea ther.tools.", "may hold only"),
    ("天气.tools.", "not ASCII"),
])
def test_errors(name, message):
    with pytest.raises(NameError_, match=message):
        parse_cursor(name)


def test_normalize_limits_exact():
    ok = ".".join(["a" * 63] * 3 + ["b" * 61]) + "."  # 64*3 + 62 + 1 = 255 octets
    assert normalize(ok) == ok
    with pytest.raises(NameError_):
        normalize(".".join(["a" * 63] * 3 + ["b" * 62]) + ".")


def test_wire_name_keeps_a_name_or_stands_in_where_it_lies():
    from tooldns.protocol.names import STAND_IN, wire_name

    assert wire_name((b"History", b"weather", b"tools")) == ("history.weather.tools.", None)
    assert wire_name(()) == (".", None)
    stand_in, why = wire_name((b"weather.tools",))  # one label: under the DNS root, not under tools.
    assert stand_in == STAND_IN + "." and why == "label 'weather\\.tools' holds a dot: no name here has one"
    # the labels right of the last odd one are kept; the rest is one label no zone holds
    assert wire_name((b"x", b"a.b", b"History", b"tools"))[0] == STAND_IN + ".history.tools."
    assert wire_name((b"a.b", b"\xffx", b"tools")) == (
        STAND_IN + ".tools.", "label '\\255x' holds octets outside ASCII: no name here has one")
    with pytest.raises(NameError_):
        normalize(wire_name((b"a.b", b"tools"))[0])  # what lookup() reads as a name no zone holds
