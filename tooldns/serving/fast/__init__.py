"""The fast path: intent searches answered from the datagram's bytes to the reply's, or declined.

One door, :meth:`FastPath.answer(data, udp) <.path.FastPath.answer>`: the reply's bytes, or None,
and the full path (:mod:`tooldns.serving.resolver`) answers. The room:

* :mod:`.path`: the door; it alone chooses the compiled twins, once;
* :mod:`.pack`: a zone's pieces encoded once (:class:`~.pack.PackedZone`) and the Python writers of
  a referral and of an answer, the references;
* :mod:`.cpack`: the same referrals and answers written in C (compiled only);
* :mod:`.cquery`: the query and its intent option read in C (compiled only), twins of
  :func:`tooldns.serving.wire.read_plain_query` and :func:`tooldns.protocol.intent.decode_intent`.

    >>> FastPath(StaticSource(index), INTENT_OPTION_CODE, stats).answer(query_bytes, udp=True)
"""

from .path import COMPILED, FastPath

__all__ = ["COMPILED", "FastPath"]
