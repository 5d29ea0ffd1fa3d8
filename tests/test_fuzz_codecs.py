"""Property tests of the pure codecs of :mod:`tooldns.protocol`: round trips and hostile bytes.

For each codec (intent, vector, meta and EDE options, TXT pairs, names and cursors, the published walk): what is
encoded from valid values decodes to the same values, what decodes encodes back to the same
bytes, and decoding any bytes at all either succeeds or raises the codec's own error
(:class:`IntentError`, :class:`VectorError`, :class:`NameError_`, :class:`PlanError`), never ``IndexError``,
``struct.error``, ``UnicodeDecodeError`` and the like. The client's reply parser, which reads what
any server on the network sends, is held to the same rule with dnspython's ``FormError``.

Counts are small for CI; ``HYPOTHESIS_PROFILE=fuzz`` runs them long (see :mod:`fuzzing`).
"""

from __future__ import annotations

import math
import struct

import dns.exception
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.IN.SRV
import dns.wire
import pytest
from hypothesis import assume, example, given, strategies as st

from fuzzing import examples
from resolver_client.message import Srv, parse_reply, read_name
from tooldns.exceptions import IntentError, NameError_, PlanError, VectorError
from tooldns.protocol.ede import decode_ede, encode_ede
from tooldns.protocol.intent import MAX_INTENT_BYTES, Intent, decode_intent, encode_intent, shorten_intent
from tooldns.protocol.meta import Meta, decode_meta, encode_meta
from tooldns.protocol.plan import WalkPlan, decode_plan, encode_plan
from tooldns.protocol.names import MAX_LABEL, MAX_NAME, Cursor, SERVICES, TRANSPORTS, cursor, normalize, parse_cursor
from tooldns.protocol.txt import decode_pairs, encode_pairs
from tooldns.protocol.vector import MAX_DIM, MAX_MODEL, Vector, decode_vector, encode_vector, quantize

# Text as agents and zone authors write it (no lone surrogates: Python text that UTF-8 can carry),
# and text as Python can hold it (surrogates too: what `surrogateescape` makes of bad argv bytes).
TEXT = st.text(max_size=300)
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
FORBIDDEN = {chr(c) for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)} | {"\x7f"}


def valid_intent_text() -> st.SearchStrategy[str]:
    return TEXT.filter(lambda t: t.strip() and not FORBIDDEN & set(t) and len(t.encode()) <= MAX_INTENT_BYTES)


# -- intent option --

@examples(200)
@given(valid_intent_text(), st.integers(1, 255))
def test_intent_round_trips(text, k):
    data = encode_intent(text, k)
    assert len(data) == 4 + len(text.encode("utf-8"))
    assert decode_intent(data) == Intent(text=text, k=k)


@examples(500)
@given(st.one_of(st.binary(max_size=64),
                 st.builds(lambda v, n, k, payload: struct.pack("!BHB", v, n, k) + payload,
                           st.integers(0, 2), st.integers(0, 70), st.integers(0, 3), st.binary(max_size=70))))
@example(b"\x00\x00\x02\x01\xff\xfe")  # invalid UTF-8 of the announced length
def test_decoding_any_intent_bytes_raises_only_intent_error(data):
    try:
        intent = decode_intent(data)
    except IntentError:
        return
    assert encode_intent(intent.text, intent.k) == data  # what decodes, encodes back to the same bytes


@examples(300)
@given(ANY_TEXT, st.integers(-5, 300))
@example("caf\udce9", 3)  # `tooldns-resolve $'caf\xe9'`: a Latin-1 byte in a UTF-8 locale's argv
def test_encoding_any_intent_raises_only_intent_error(text, k):
    try:
        data = encode_intent(text, k)
    except IntentError:
        return
    assert decode_intent(data).text == text


@examples(300)
@given(ANY_TEXT, st.integers(1, 80))
@example("a\udcff" * 50, 20)
def test_shortened_intents_fit_and_keep_the_start(text, limit):
    short = shorten_intent(text, limit)
    assert len(short.encode("utf-8", "surrogatepass")) <= limit
    assert text.startswith(short)
    if len(text.encode("utf-8", "surrogatepass")) <= limit:
        assert short == text


# -- vector option --

MODEL = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=MAX_MODEL)
COMPONENTS = st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=64)


@examples(300)
@given(MODEL, COMPONENTS)
@example("m", [1.0, -0.5, 0.0])
@example("m", [0.0])
def test_vector_round_trips_within_half_a_step(model, values):
    biggest = max(abs(v) for v in values)
    assume(biggest == 0 or biggest > 1e-30)  # smaller: a scale no IEEE 754 single holds (VectorError)
    vector = quantize(model, values)
    decoded = decode_vector(encode_vector(model, values))
    assert decoded == vector and decoded.model == model and decoded.dim == len(values)
    for got, want in zip(decoded.values(), values):
        assert abs(got - want) <= vector.scale / 2 + biggest * 1e-6


def _vector_bytes(version, model, dim, scale_bits, codes):
    return bytes([version, len(model)]) + model + struct.pack("!HI", dim, scale_bits) + codes


@examples(500)
@given(st.one_of(st.binary(max_size=80),
                 st.builds(_vector_bytes, st.integers(0, 1), st.binary(min_size=0, max_size=6), st.integers(0, 8),
                           st.integers(0, 2**32 - 1) | st.sampled_from([0x3C010204, 0x7F800000, 0x7FC00000,
                                                                         0x80000000, 0x00000001]),
                           st.binary(max_size=9))))
def test_decoding_any_vector_bytes_raises_only_vector_error(data):
    try:
        vector = decode_vector(data)
    except VectorError:
        return
    assert vector.to_bytes() == data
    assert all(math.isfinite(v) for v in vector.values())


@examples(300)
@given(st.text(max_size=70) | MODEL, st.floats() | st.floats(1e-45, 1e39), st.binary(max_size=MAX_DIM + 2))
@example("m", 1e39, b"\x01")  # finite, but no IEEE 754 single
@example("m", 1e-300, b"\x01")  # regression: went out as scale 0, which decode_vector refuses
def test_encoding_any_vector_raises_only_vector_error(model, scale, codes):
    try:
        data = Vector(model, scale, codes).to_bytes()
    except VectorError:
        return
    assert decode_vector(data).codes == codes


@examples(200)
@given(MODEL, st.lists(st.floats(), min_size=0, max_size=8) | st.lists(st.floats(1e38, 1e308), min_size=1))
def test_quantizing_any_floats_raises_only_vector_error(model, values):
    try:
        vector = quantize(model, values)
    except VectorError:
        return
    assert math.isfinite(vector.scale) and vector.scale > 0 and vector.dim == len(values)


# -- meta and EDE options --

@examples(300)
@given(st.integers(0, 255), st.integers(0, 2**32 - 1),
       st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))
def test_meta_round_trips(flags, ttl, scorer):
    assert decode_meta(encode_meta(flags, ttl, scorer)) == Meta(flags=flags, cache_ttl=ttl, scorer=scorer)


@examples(300)
@given(st.binary(max_size=40) | st.binary(max_size=40).map(lambda b: b"\x00" + b))
def test_decoding_any_meta_bytes_raises_only_intent_error(data):
    try:
        meta = decode_meta(data)
    except IntentError:
        return
    assert meta.version == 0 and 0 <= meta.flags <= 255 and meta.cache_ttl >= 0


@examples(300)
@given(TEXT, st.integers(0, 65535))
def test_ede_round_trips(text, code):
    assert decode_ede(encode_ede(text, code)) == (code, text)


@examples(300)
@given(st.binary(max_size=80))
def test_decoding_any_ede_bytes_raises_only_intent_error(data):
    try:
        code, text = decode_ede(data)
    except IntentError:
        assert len(data) < 2
        return
    assert 0 <= code <= 65535 and isinstance(text, str)


# -- TXT key=value strings --

KEY = st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1, max_size=12).filter(
    lambda key: key != "tooldns")  # the format's key, which encode_pairs refuses (below)


def test_the_format_key_is_refused_as_a_pair():
    """A pair keyed ``tooldns`` would read back joined to the format version ("1" + its value)."""
    with pytest.raises(ValueError, match="format key"):
        encode_pairs([("tooldns", "0000")])
    assert decode_pairs(encode_pairs([("toold", "0000")])) == {"tooldns": "1", "toold": "0000"}


@examples(300)
@given(st.dictionaries(KEY.filter(lambda k: k not in ("tooldns", "param")), TEXT | st.integers(), max_size=6),
       st.lists(st.text(max_size=80).filter(lambda t: "\n" not in t), max_size=3))
def test_txt_pairs_round_trip_in_strings_of_at_most_255_octets(pairs, params):
    strings = encode_pairs([*pairs.items(), *(("param", p) for p in params)])
    assert all(len(s) <= 255 for s in strings)
    want = {"tooldns": "1", **{k: str(v) for k, v in pairs.items()}}
    if params:
        want["param"] = "\n".join(params)
    assert decode_pairs(strings) == want


@examples(200)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_decoding_any_txt_strings_never_raises(strings):
    assert isinstance(decode_pairs(strings), dict)


@examples(100)
@given(KEY, TEXT, st.integers(4, 60))
def test_clipped_values_fit(key, value, clip):
    strings = encode_pairs([(key, value)], clip=clip)
    assert len(decode_pairs(strings)[key].encode("utf-8")) <= max(clip, 3)


# -- names and cursors --

LABEL = st.from_regex(r"\A[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")


@st.composite
def dns_names(draw) -> str:
    labels = draw(st.lists(LABEL, min_size=1, max_size=6))
    name = ".".join(labels) + "."
    assume(len(name) + 1 <= MAX_NAME)
    return name


@examples(300)
@given(ANY_TEXT | st.lists(st.text("aZ_-.09é ", max_size=70), max_size=6).map(".".join))
@example("a" * 64 + ".tools.")
@example("." * 3)
def test_normalizing_any_text_raises_only_name_error(text):
    try:
        name = normalize(text)
    except NameError_:
        return
    assert name.endswith(".") and normalize(name) == name
    assert name == "." or len(name) + 1 <= MAX_NAME
    assert all(len(label) <= MAX_LABEL for label in name[:-1].split("."))


@examples(150)
@given(dns_names().map(str.upper) | dns_names())
def test_valid_names_normalize_to_themselves_in_lower_case(name):
    assert normalize(name) == name.lower()


@examples(150)
@given(st.sampled_from(sorted(SERVICES)), st.sampled_from(sorted(TRANSPORTS)),
       dns_names().filter(lambda n: not n.startswith("_")), st.booleans())
def test_cursors_round_trip(service, transport, zone, expanded):
    """Zones whose first label starts with '_' are left out: zone files refuse such labels, and
    ``_svc._tcp._x.tools.`` could not tell the zone ``_x.tools.`` (expanded) from ``x.tools.``."""
    try:
        c = cursor(service, zone, transport, expanded)
    except NameError_:
        return  # the cursor's own labels make the name too long
    assert parse_cursor(c.to_text()) == c
    assert parse_cursor(c.to_text().upper()) == c


@examples(300)
@given(ANY_TEXT | st.builds("_{}._{}.{}".format, st.text("amcptu_", max_size=6), st.text("tcpu_", max_size=4),
                            st.text("_ab.", max_size=12)))
def test_parsing_any_text_as_a_cursor_raises_only_name_error(text):
    try:
        c = parse_cursor(text)
    except NameError_:
        return
    if c is not None:
        assert isinstance(c, Cursor) and parse_cursor(c.to_text()) == c


# -- the client's reply parser: what any server on the network may send --

@examples(300)
@given(st.binary(max_size=200) | st.binary(min_size=12, max_size=200).map(lambda b: b[:2] + b"\x80" + b[3:]))
def test_parsing_any_reply_bytes_raises_only_form_error(data):
    try:
        parse_reply(data)
    except dns.exception.DNSException:
        pass


@pytest.mark.parametrize("text", ["caf\udce9", "\ud800"])
def test_intents_python_cannot_encode_are_an_intent_error(text):
    """Regression: lone surrogates (undecodable argv bytes) raised UnicodeEncodeError, past the
    resolver's error handling."""
    with pytest.raises(IntentError, match="UTF-8"):
        encode_intent(text, 3)


def test_a_long_intent_python_cannot_encode_is_shortened_then_refused():
    """Regression: shorten_intent raised UnicodeEncodeError on lone surrogates before encode_intent could
    refuse them."""
    short = shorten_intent("caf\udce9 " * 2000)
    assert len(short.encode("utf-8", "surrogatepass")) <= MAX_INTENT_BYTES and short.startswith("caf\udce9")
    with pytest.raises(IntentError):
        encode_intent(short, 3)


def test_a_scale_below_the_smallest_single_is_refused():
    """Regression: a positive scale that rounds to 0 as an IEEE 754 single went out as 0, which
    decode_vector refuses."""
    with pytest.raises(VectorError, match="smallest IEEE 754 single"):
        Vector("m", 1e-300, b"\x01").to_bytes()
    assert decode_vector(Vector("m", 1e-45, b"\x01").to_bytes()).scale > 0  # the smallest single itself


# -- the client's own RDATA decoding against dnspython's, on the same bytes --

def _dnspython_records(wire: bytes) -> list[list[tuple]]:
    """Every record of *wire* as dnspython decodes it, per section: what :func:`parse_reply` read
    before it decoded NS, CNAME, A, AAAA, TXT and SRV itself (the reference it is held to)."""
    parser = dns.wire.Parser(wire)
    with dns.exception.ExceptionWrapper(dns.exception.FormError):
        _, _, qd, *counts = parser.get_struct("!HHHHHH")
        if qd:
            parser.get_name(None)
            parser.get_struct("!HH")
        sections = []
        for count in counts:
            records = []
            for _ in range(count):
                name, after = read_name(wire, parser.current)
                parser.seek(after)
                rdtype, rdclass, ttl, rdlen = parser.get_struct("!HHIH")
                with parser.restrict_to(rdlen):
                    if rdtype == 41:
                        parser.get_bytes(rdlen)
                        continue
                    records.append((name, rdtype, ttl, dns.rdata.from_wire_parser(rdclass, rdtype, parser)))
            sections.append(records)
        if parser.remaining():
            raise dns.exception.FormError("trailing bytes")
    return sections


def _expected_value(rdata):
    """What :attr:`Record.value` holds for dnspython's *rdata*."""
    if rdata.rdclass != dns.rdataclass.IN and rdata.rdtype not in (dns.rdatatype.TXT, dns.rdatatype.NS,
                                                                  dns.rdatatype.CNAME):
        return None  # SRV, A and AAAA are IN's types: dnspython's CH A is another format
    if isinstance(rdata, dns.rdtypes.IN.SRV.SRV):
        return Srv(rdata.priority, rdata.weight, rdata.port, rdata.target.to_text())
    for attribute in ("strings", "address"):
        if hasattr(rdata, attribute):
            return getattr(rdata, attribute)
    return rdata.target.to_text() if hasattr(rdata, "target") else None


_QUESTION = bytes.fromhex("045f616e79" "045f746370" "065f746f6f6c73" "00" "0021" "0001")  # _any._tcp._tools. SRV IN


@st.composite
def _name_wire(draw) -> bytes:
    """A name as a server might write it: labels of any octets up to 63 (so names up to and past 255
    octets), ending in the root or a compression pointer anywhere."""
    labels = draw(st.lists(st.one_of(st.sampled_from([b"tools", b"Weather", b"a-b", b"x" * 63]),
                                     st.binary(min_size=1, max_size=63)), max_size=4))
    if draw(st.integers(0, 9)) == 0:  # four long labels: 252 to 257 octets, across the most a name may have (255)
        labels = [b"y" * 63] * 3 + [b"z" * draw(st.integers(58, 63))]
    tail = draw(st.sampled_from([b"\0", b"\0", b"\0", b"\xc0\x0c", b"\xc0\x0c", b"\xc0\x11", b"\x41", b"\xc0",
                                 b"ptr"]))
    if tail == b"ptr":
        tail = bytes((0xC0, draw(st.integers(0, 120))))
    return b"".join(bytes((len(label),)) + label for label in labels) + tail


@st.composite
def _rdata_wire(draw, rdtype: int) -> bytes:
    """RDATA of *rdtype*, well formed or nearly: a byte more or less, any byte changed."""
    T = dns.rdatatype
    if rdtype == T.TXT:
        data = b"".join(bytes((len(s),)) + s for s in draw(st.lists(st.binary(max_size=30), max_size=3)))
    elif rdtype in (T.A, T.AAAA):
        data = draw(st.binary(min_size=4 if rdtype == T.A else 16, max_size=4 if rdtype == T.A else 16))
    else:  # a name, after SRV's priority, weight and port or MX's preference
        data = draw(st.binary(min_size=6 if rdtype == T.SRV else 2 if rdtype == T.MX else 0,
                              max_size=6 if rdtype == T.SRV else 2 if rdtype == T.MX else 0)) + draw(_name_wire())
    change = draw(st.sampled_from(["none"] * 12 + ["cut", "add", "set"]))
    if change == "cut":
        data = data[:-1]
    elif change == "add":
        data += draw(st.binary(min_size=1, max_size=1))
    elif change == "set" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.binary(min_size=1, max_size=1)) + data[at + 1:]
    return data


@st.composite
def _reply_wire(draw) -> bytes:
    """A reply whose records each hold well-formed or nearly well-formed RDATA, in any section."""
    T = dns.rdatatype
    records, counts = b"", [0, 0, 0]
    for _ in range(draw(st.integers(0, 6))):
        rdtype = draw(st.sampled_from([T.TXT, T.SRV, T.A, T.AAAA, T.NS, T.CNAME, T.MX]))
        owner = draw(st.sampled_from([b"\xc0\x0c", b"\xc0\x11", b"name"]))
        owner = draw(_name_wire()) if owner == b"name" else owner
        rdclass = draw(st.sampled_from([dns.rdataclass.IN] * 4 + [dns.rdataclass.CH]))
        rdata = draw(_rdata_wire(rdtype))
        records += owner + struct.pack("!HHIH", rdtype, rdclass, 300, len(rdata)) + rdata
        counts[draw(st.integers(0, 2))] += 1
    return struct.pack("!HHHHHH", 7, 0x8400, 1, *counts) + _QUESTION + records


def _parse_or_none(parse, wire: bytes):
    try:
        return parse(wire)
    except dns.exception.FormError:
        return None


def _one_answer(rdtype: int, rdata: bytes) -> bytes:
    return (struct.pack("!HHHHHH", 7, 0x8400, 1, 1, 0, 0) + _QUESTION + b"\xc0\x0c"
            + struct.pack("!HHIH", rdtype, dns.rdataclass.IN, 300, len(rdata)) + rdata)


@examples(600)
@given(_reply_wire())
@example(_one_answer(dns.rdatatype.A, b"\x7f\0\0\1\0"))  # an address of 5 octets
@example(_one_answer(dns.rdatatype.AAAA, bytes(17)))
@example(_one_answer(dns.rdatatype.A, b"\x7f\0\0\1"))
@example(_one_answer(dns.rdatatype.NS, b"\x03ns1\xc0\x0c\0"))  # a byte after the name
@example(_one_answer(dns.rdatatype.TXT, b""))
def test_the_reply_parser_decodes_and_refuses_as_dnspython_does(wire):
    """The client's parser accepts exactly the replies whose records dnspython's rdata classes read,
    and its values are dnspython's: names of up to 255 octets, compression pointers only backwards,
    strings and names within their RDATA, SRV and names ending where their RDATA ends, addresses of 4
    or 16 octets, at least one TXT string, class CH's A not read as IN's."""
    expected, parsed = _parse_or_none(_dnspython_records, wire), _parse_or_none(parse_reply, wire)
    assert (parsed is None) == (expected is None), "one refused what the other read"
    if parsed is None:
        return
    for got, want in zip((parsed.answer, parsed.authority, parsed.additional), expected):
        assert [(r.name, r.rdtype, r.ttl) for r in got] == [w[:3] for w in want]
        for record, (_, _, _, rdata) in zip(got, want):
            assert record.rdata == rdata and record.value == _expected_value(rdata)


# -- the published walk (``_walk.<origin>`` TXT) --

def _plans():
    models = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=64)
    optional = lambda most: st.none() | st.integers(1, most)  # noqa: E731
    return st.builds(WalkPlan, st.lists(st.integers(1, 255), min_size=1, max_size=8).map(tuple), optional(255),
                     optional(255), optional(65535), st.none() | models)


@examples(300)
@given(_plans())
def test_a_published_walk_round_trips(plan):
    strings = encode_plan(plan)
    assert all(len(s) <= 255 for s in strings) and strings[0] == b"tooldns-walk=1"
    assert decode_plan(strings) == plan


@examples(500)
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from([b"tooldns-walk=1", b"k=6", b"k=", b"k=6,3",
                                                                   b"beam=0", b"model=\xff", b"leaf-k=99999999"])),
                max_size=8))
def test_a_published_walk_decodes_or_says_why(strings):
    try:
        plan = decode_plan(strings)
    except PlanError:
        return
    assert decode_plan(encode_plan(plan)) == plan  # whatever it accepts is a walk it could have written
