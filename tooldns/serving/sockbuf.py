"""UDP receive buffers: how many datagrams wait for the server, and how many the kernel dropped.

A burst of queries that arrives while the event loop is busy waits in the socket's receive buffer;
what does not fit is dropped by the kernel, unseen by the server. Linux gives a socket
``net.core.rmem_default`` (208 KiB: about 200 datagrams of 1 kB), so :class:`DNSServer
<tooldns.serving.server.DNSServer>` asks for :data:`DEFAULT_RCVBUF` (``tooldns serve --rcvbuf``).
:func:`raise_rcvbuf` tries ``SO_RCVBUFFORCE`` (allowed with CAP_NET_ADMIN), then ``SO_RCVBUF``,
which the kernel caps at ``net.core.rmem_max``, and returns the size the kernel then reports (which
counts its own bookkeeping: twice what was asked, on Linux). :func:`udp_drops` reads the socket's
drop counter from ``/proc/net/udp`` and ``/proc/net/udp6`` (the ``drops`` column of the line with
the socket's inode); None where there is no such file.

    >>> effective = raise_rcvbuf(sock, 16 * 2**20)  # 33554432 as root on Linux; 2 * rmem_max otherwise
    >>> udp_drops(sock)
    0
"""

from __future__ import annotations

import os
import socket

#: the receive buffer a server asks for each UDP socket, in bytes. A queued datagram of 1 kB costs the
#: kernel about 2.3 kB of buffer: 16 MiB hold about 7,000, a third of a second of a 2-core server's
#: work. The kernel takes the memory only while datagrams wait, within net.ipv4.udp_mem for all UDP
#: sockets (scripts/attacks/udp_burst.py: a burst of 20,000 lost 14,004 with the system's 208 KiB,
#: 11,057 with 4 MiB, 2,815 with 16 MiB, 0 with 32 MiB)
DEFAULT_RCVBUF = 16 * 2**20
#: Linux's SO_RCVBUFFORCE, which Python's socket module may not name
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_PROC_FILES = ("/proc/net/udp", "/proc/net/udp6")


def raise_rcvbuf(sock, size: int) -> int:
    """Ask for a receive buffer of *size* bytes on *sock* (``SO_RCVBUFFORCE``, then ``SO_RCVBUF``
    where forcing is not allowed); the size the kernel reports afterwards. A *size* of 0 leaves
    the system's default."""
    if size > 0:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
        except OSError:  # not CAP_NET_ADMIN, or not Linux: capped at net.core.rmem_max
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
            except OSError:
                pass
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def udp_drops(sock) -> int | None:
    """Datagrams the kernel dropped for *sock* (its receive buffer full, or a checksum wrong) since
    it was opened; None when ``/proc/net/udp`` cannot tell (not Linux, the socket closed)."""
    try:
        inode = str(os.fstat(sock.fileno()).st_ino)
    except (OSError, ValueError):
        return None
    for path in _PROC_FILES:
        try:
            with open(path, encoding="ascii") as lines:
                next(lines, None)  # the header
                for line in lines:
                    fields = line.split()
                    # sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
                    if len(fields) >= 13 and fields[9] == inode:
                        return int(fields[12])
        except OSError:
            continue
    return None
