"""A plain query and its intent option read with C integers: the compiled twins of
:func:`tooldns.serving.wire.read_plain_query` and :func:`tooldns.protocol.intent.decode_intent`.

Every query a server answers from its fast path is read first: its header, the labels of its
question's name, its OPT record and options; then its intent option. From source (and compiled
from that source) each octet read is a Python integer: some 11,000 instructions a query. Here the
same reading goes octet by octet in C, to the same :class:`~tooldns.serving.wire.PlainQuery` (or
None), the rules written once more beside the source's. A plain intent option (version 0, the
length field right, K at least 1, ASCII text without control characters but tab, newline and
carriage return, and not only spaces) is checked in C and its text made in one step; any other goes
to the Python :func:`~tooldns.protocol.intent.decode_intent`, which decodes it or raises
:class:`~tooldns.exceptions.IntentError` with the text clients see. ``tests/test_plain_query.py``
and ``tests/test_plain_intent.py`` hold each to its reference over hostile and well-formed input.

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`tooldns.serving.fast.path`, which alone
chooses, reads with the references.

    >>> read_plain_query(query_bytes).qtype
    33
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.serving.fast.cquery runs compiled only (TOOLDNS_COMPILE=1 pip install -e .)")

from cython.cimports.cpython.unicode import PyUnicode_DecodeASCII  # noqa: E402

from ...protocol.intent import MAX_INTENT_BYTES, VERSION, Intent  # noqa: E402
from ...protocol.intent import decode_intent as python_decode_intent  # noqa: E402
from ...protocol.names import MAX_LABEL, MAX_NAME  # noqa: E402
from ..wire import CLASSIC_UDP_SIZE, SERVER_UDP_SIZE, PlainQuery  # noqa: E402

_MAX_LABEL = cython.declare(cython.Py_ssize_t, MAX_LABEL)
_MAX_NAME = cython.declare(cython.Py_ssize_t, MAX_NAME)
_CLASSIC = cython.declare(cython.Py_ssize_t, CLASSIC_UDP_SIZE)
_SERVER = cython.declare(cython.Py_ssize_t, SERVER_UDP_SIZE)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(size=cython.Py_ssize_t, p=cython.p_uchar, pos=cython.Py_ssize_t, length=cython.Py_ssize_t,
               end=cython.Py_ssize_t, qtype=cython.Py_ssize_t, qclass=cython.Py_ssize_t, i=cython.Py_ssize_t,
               rtype=cython.Py_ssize_t, udp_size=cython.Py_ssize_t, version=cython.Py_ssize_t,
               rdlength=cython.Py_ssize_t, code=cython.Py_ssize_t, options=dict, found=list)
def read_plain_query(data):
    """Read a plain query from *data* without dnslib: a QUERY with one question of class IN (not a
    zone transfer), an uncompressed name within RFC 1035's limits and no record but an OPT record
    of EDNS version 0 whose options are well formed. None for anything else (the full path reads it).
    """
    if type(data) is not bytes:
        data = bytes(data)
    size = len(data)
    p = cython.cast(cython.p_uchar, cython.cast(cython.p_char, data))
    # header, root name, type and class, OPT record; QR and opcode 0; one question and the OPT record
    if size < 28 or p[2] & 0xF8:
        return None
    if p[4] != 0 or p[5] != 1 or p[6] or p[7] or p[8] or p[9] or p[10] != 0 or p[11] != 1:
        return None
    pos = 12  # the question's name: uncompressed labels, at most MAX_NAME octets
    length = p[12]
    while length:
        if length > _MAX_LABEL:  # a pointer, an extended label type or too long a label
            return None
        pos += length + 1
        if pos >= size:
            return None
        length = p[pos]
    end = pos + 5  # past the root label, the type and the class
    if end - 16 > _MAX_NAME or end + 11 > size:
        return None
    qtype = p[end - 4] << 8 | p[end - 3]
    qclass = p[end - 2] << 8 | p[end - 1]
    if qclass != 1 or qtype == 251 or qtype == 252 or p[end]:  # IXFR, AXFR; the OPT record's owner: the root
        return None
    rtype = p[end + 1] << 8 | p[end + 2]
    udp_size = p[end + 3] << 8 | p[end + 4]
    version = p[end + 6]
    rdlength = p[end + 9] << 8 | p[end + 10]
    pos = end + 11
    if rtype != 41 or version != 0 or pos + rdlength != size:  # the OPT record ends the message
        return None
    options = {}
    while pos < size:
        if size - pos < 4:
            return None
        code = p[pos] << 8 | p[pos + 1]
        length = p[pos + 2] << 8 | p[pos + 3]
        pos += 4
        if pos + length > size:
            return None
        found = options.get(code)
        if found is None:
            options[code] = [data[pos:pos + length]]
        else:
            found.append(data[pos:pos + length])
        pos += length
    if udp_size < _CLASSIC:
        udp_size = _CLASSIC
    if udp_size > _SERVER:
        udp_size = _SERVER
    return PlainQuery(end, qtype, bool(p[2] & 0x01), udp_size, options)


_MAX = cython.declare(cython.Py_ssize_t, MAX_INTENT_BYTES)
_VERSION = cython.declare(cython.Py_ssize_t, VERSION)
_new = object.__new__
_set = object.__setattr__


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(size=cython.Py_ssize_t, p=cython.p_uchar, length=cython.Py_ssize_t, k=cython.Py_ssize_t,
               i=cython.Py_ssize_t, c=cython.uchar, blank=cython.bint)
def decode_intent(data):
    """Parse option data strictly; raise :class:`~tooldns.exceptions.IntentError` saying what is wrong."""
    if type(data) is not bytes:
        return python_decode_intent(data)
    size = len(data)
    if size < 4:
        return python_decode_intent(data)
    p = cython.cast(cython.p_uchar, cython.cast(cython.p_char, data))
    length = p[1] << 8 | p[2]
    k = p[3]
    if p[0] != _VERSION or length != size - 4 or k == 0 or length == 0 or length > _MAX:
        return python_decode_intent(data)
    blank = True
    for i in range(4, size):
        c = p[i]
        if c >= 0x7F or (c < 0x20 and c != 9 and c != 10 and c != 13):  # outside ASCII, DEL, a control character
            return python_decode_intent(data)
        if blank and c != 32 and c != 9 and c != 10 and c != 13:
            blank = False
    if blank:  # only spaces: "intent is empty"
        return python_decode_intent(data)
    intent = _new(Intent)
    _set(intent, "__dict__", {"text": PyUnicode_DecodeASCII(cython.cast(cython.p_char, p + 4), length, cython.NULL),
                              "k": k, "version": VERSION, "brief": False, "fit": False})
    return intent
