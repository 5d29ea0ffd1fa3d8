"""What would wait is done off the server's event loop: a mark on the loop's thread, and the signal.

The server answers each query on its event loop, where answering must never wait: one query that
waits there (for a model to embed its intent, say) stalls every other. Yet most queries to a zone
that embeds intents wait on nothing: they bring a vector of its model, or an intent it embedded a
moment ago. So the server answers on the loop inside :func:`on_the_loop`; what would wait asks
:func:`may_wait` first and, told no, raises :class:`WouldWait`; the server then answers that query
in its thread pool, where waiting costs no other query. Anywhere else (the pool, a test or a
benchmark calling the server's ``handle``), :func:`may_wait` says yes.

    with on_the_loop():
        wire = server.handle(data, udp, client)     # WouldWait: answer it in the pool instead
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_here = threading.local()


class WouldWait(Exception):
    """Answering this query would wait (an intent to embed): answer it off the event loop."""


@contextmanager
def on_the_loop() -> Iterator[None]:
    """Mark the current thread as the event loop's while the block runs: :func:`may_wait` says no."""
    _here.loop = True
    try:
        yield
    finally:
        _here.loop = False


def may_wait() -> bool:
    """Whether the current thread may wait (it is not answering on an event loop)."""
    return not getattr(_here, "loop", False)
