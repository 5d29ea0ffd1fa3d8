"""The client's message reader and writer: golden bytes, compression, malformed replies."""

import dns.edns
import dns.exception
import dns.message
import dns.name
import dns.rdatatype
import dns.rrset
import pytest

from resolver_client.message import is_reply_to, make_query, opt_record, parse_reply, read_name
from tooldns.protocol.intent import encode_intent


def test_query_golden_bytes():
    opt = opt_record([dns.edns.GenericOption(65301, encode_intent("weather in Hong Kong", 3))])
    wire = make_query("_mcp._tcp._tools.", opt, msg_id=0x1234)
    assert wire.hex() == (
        "1234" "0000" "0001" "0000" "0000" "0001"                     # ID, RD=0, 1 question, 1 additional
        "045f6d6370" "045f746370" "065f746f6f6c73" "00" "0021" "0001"  # _mcp._tcp._tools. SRV IN
        "00" "0029" "04d0" "00000000" "001c"                          # OPT: root, size 1232, rdlen 28
        "ff15" "0018" "00001403" + b"weather in Hong Kong".hex())     # option 65301, 24 bytes
    parsed = dns.message.from_wire(wire)  # dnspython agrees
    assert parsed.question[0].name.to_text() == "_mcp._tcp._tools." and parsed.payload == 1232


def test_read_name_with_compression():
    wire = b"\x00" * 12 + b"\x05tools\x00" + b"\x07weather\xc0\x0c"
    assert read_name(wire, 12) == ("tools.", 19)
    assert read_name(wire, 19) == ("weather.tools.", 29)
    assert read_name(b"\x00", 0) == (".", 1)


@pytest.mark.parametrize("wire, pos, message", [
    (b"\x00" * 12 + b"\xc0\x0c", 12, "backwards"),      # points at itself
    (b"\x00" * 12 + b"\x05tool", 12, "past the end"),
    (b"\x00" * 12 + b"\x40abc\x00", 12, "label type"),
    (b"\x00" * 12 + b"\xc0", 12, "truncated"),
])
def test_read_name_rejects(wire, pos, message):
    with pytest.raises(dns.exception.FormError, match=message):
        read_name(wire, pos)


def test_parse_reply_matches_dnspython_and_checks_question():
    q = dns.message.make_query("_any._tcp._tools.", "SRV", flags=0)
    r = dns.message.make_response(q)
    r.authority.append(dns.rrset.from_text("weather.tools.", 3600, "IN", "NS", "ns1.weather.tools."))
    r.additional.append(dns.rrset.from_text("ns1.weather.tools.", 3600, "IN", "A", "127.0.0.2"))
    r.use_edns(0, 0, 1232)
    reply = parse_reply(r.to_wire())
    assert [(x.name, x.rdtype) for x in reply.authority] == [("weather.tools.", dns.rdatatype.NS)]
    assert reply.additional[0].rdata.address == "127.0.0.2" and reply.edns
    assert is_reply_to(q.to_wire(), reply)
    other = dns.message.make_query("_any._tcp._maps.tools.", "SRV", flags=0)
    other.id = q.id
    assert not is_reply_to(other.to_wire(), reply)
    with pytest.raises(dns.exception.FormError, match="after the last record"):
        parse_reply(r.to_wire() + b"\x00")
    with pytest.raises(dns.exception.FormError):
        parse_reply(r.to_wire()[:-3])


@pytest.mark.parametrize("qname", [
    "_any._tcp._tools.", "Weather.Tools.", ".", "", "x" * 63 + ".tools.", ("a" * 62 + ".") * 4,
    ("a" * 63 + ".") * 3 + "b" * 61 + ".",                        # 255 octets: the most a name may have
    ("a" * 63 + ".") * 3 + "b" * 62 + ".", "x" * 64 + ".", "a..b.", "abc", "caf\u00e9.tools."])
def test_a_query_name_is_written_as_dnspython_writes_it_or_refused_alike(qname):
    def by_dnspython():
        name = dns.name.Name([label.encode("ascii") for label in qname.split(".")])
        return bytes.fromhex("000700000001000000000001") + name.to_wire() + bytes.fromhex("00210001")

    outcomes = []
    for write in (by_dnspython, lambda: make_query(qname, b"", msg_id=7)):
        try:
            outcomes.append(write())
        except Exception as exc:  # the same exception class for the same name
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
