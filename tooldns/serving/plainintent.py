"""The common intent option decoded in C: :func:`tooldns.protocol.intent.decode_intent`, compiled.

A server decodes the intent option of every query it ranks. Most are plain: version 0, the length
field right, K at least 1, and ASCII text without control characters (tab, newline and carriage
return aside) and not only spaces. Such an option is checked octet by octet in C and its text made in
one step; any other (non-ASCII text, and every option that is wrong in any way) goes to the Python
:func:`~tooldns.protocol.intent.decode_intent`, which decodes it or raises
:class:`~tooldns.exceptions.IntentError` with the text clients see. ``tests/test_plain_intent.py``
holds the two to the same result. The server's resolver (:mod:`tooldns.serving.resolver`) decodes
with this one when it is compiled.

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`~tooldns.protocol.intent` keeps its own.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.serving.plainintent runs compiled only (pip install -e . with Cython and a C compiler)")

from cython.cimports.cpython.unicode import PyUnicode_DecodeASCII  # noqa: E402

from ..protocol.intent import MAX_INTENT_BYTES, VERSION, Intent  # noqa: E402
from ..protocol.intent import decode_intent as python_decode_intent  # noqa: E402

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
