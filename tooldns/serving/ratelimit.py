"""Response rate limiting (RRL) of UDP replies, as BIND's ``rate-limit``: pure, clock-injected, no I/O.

A spoofed query makes a DNS server send its reply to the victim whose address was forged; the
reply is larger than the query (see ``docs/security.md``). :class:`RateLimiter` keeps one account
per client prefix (a /24 or /56 by default) and kind of reply (a response, an NXDOMAIN, an error):
it earns the kind's rate in credits a second, up to one second's worth, and is charged one credit
per reply, down to ``window`` seconds' worth of debt. A reply while in debt is dropped, except
every ``slip``-th, which is sent as a *slip*: :func:`slip_reply` keeps the header (TC set), the
question and a bare OPT record, so that a real client at that address retries over TCP, which is
never limited. The table of accounts is an LRU of at most ``max_entries`` (BIND's
``max-table-size``), so a flood from many prefixes costs bounded memory.

The caller passes the time, so tests drive the clock without sleeping; the server calls
:meth:`RateLimiter.check` on the UDP path only, after the reply is built.

    >>> limiter = RateLimiter(RateLimit(responses_per_second=2, window=5, slip=2))
    >>> [limiter.check("192.0.2.7", RESPONSE, now=0.0) for _ in range(4)]
    ['send', 'send', 'drop', 'slip']
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections import OrderedDict

from ..zone.model import RateLimit
from .wire import skip_name

#: what to do with a reply
SEND, DROP, SLIP = "send", "drop", "slip"
#: kinds of reply, each with its own account and rate
RESPONSE, NXDOMAIN, ERROR = 0, 1, 2
#: accounts kept at most (BIND's max-table-size); the least recently used goes first
MAX_ENTRIES = 65536

_V6 = 1 << 130  # keeps IPv6 prefixes apart from IPv4 ones in one table


def kind_of(wire: bytes) -> int:
    """The kind of reply *wire*, from its RCODE: NOERROR is a response, NXDOMAIN one, anything else an error."""
    rcode = wire[3] & 0x0F if len(wire) > 3 else 2
    return RESPONSE if rcode == 0 else NXDOMAIN if rcode == 3 else ERROR


def _address(host: str) -> tuple[int, int]:
    """(bits, address as an integer); IPv4-mapped IPv6 addresses count as IPv4."""
    if ":" not in host:
        return 32, int.from_bytes(socket.inet_pton(socket.AF_INET, host), "big")
    value = int.from_bytes(socket.inet_pton(socket.AF_INET6, host.partition("%")[0]), "big")
    if value >> 32 == 0xFFFF:
        return 32, value & 0xFFFFFFFF
    return 128, value


class RateLimiter:
    """Per client prefix and kind of reply: send, drop or slip (see the module's docstring)."""

    def __init__(self, config: RateLimit, max_entries: int = MAX_ENTRIES) -> None:
        self.config = config
        self.max_entries = max_entries
        rate = config.responses_per_second
        self._rates = (rate, rate if config.nxdomains_per_second is None else config.nxdomains_per_second,
                       rate if config.errors_per_second is None else config.errors_per_second)
        self._plen = {32: config.ipv4_prefix_length, 128: config.ipv6_prefix_length}
        self._exempt = []
        for text in config.exempt:
            net = ipaddress.ip_network(text, strict=False)
            bits = net.max_prefixlen
            self._exempt.append((bits, net.prefixlen, int(net.network_address) >> (bits - net.prefixlen)))
        #: prefix and kind -> [credit, time of the last reply, limited replies since the last slip]
        self._table: OrderedDict[int, list] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return any(self._rates)

    def __len__(self) -> int:
        return len(self._table)

    def _exempted(self, bits: int, value: int) -> bool:
        return any(bits == b and value >> (bits - plen) == net for b, plen, net in self._exempt)

    def check(self, host: str, kind: int, now: float) -> str:
        """SEND, DROP or SLIP for a reply of *kind* to *host* (an address literal) at time *now* (seconds)."""
        rate = self._rates[kind]
        if not rate:
            return SEND
        try:
            bits, value = _address(host)
        except (OSError, ValueError):
            return SEND  # not an IP address (a Unix socket, a test double): nothing to limit by
        if self._exempt and self._exempted(bits, value):
            return SEND
        prefix = value >> (bits - self._plen[bits])
        key = ((prefix | _V6) if bits == 128 else prefix) * 4 + kind
        account = self._table.get(key)
        if account is None:
            account = self._table[key] = [float(rate), now, 0]
            if len(self._table) > self.max_entries:
                self._table.popitem(last=False)
        else:
            self._table.move_to_end(key)
            account[0] = min(float(rate), account[0] + max(0.0, now - account[1]) * rate)
            account[1] = now
        account[0] = max(account[0] - 1.0, -float(self.config.window * rate))
        if account[0] >= 0:
            return SEND
        account[2] += 1
        if self.config.slip and account[2] >= self.config.slip:
            account[2] = 0
            return SLIP
        return DROP


def _bare_opt(wire: bytes, pos: int, records: int) -> bytes:
    """The reply's OPT record without its options (size and extended RCODE kept), or b"" if none."""
    for _ in range(records):
        pos = skip_name(wire, pos)
        rtype, rclass, ttl, rdlength = struct.unpack_from("!HHIH", wire, pos)
        if rtype == 41:
            return b"\x00" + struct.pack("!HHIH", 41, rclass, ttl, 0)
        pos += 10 + rdlength
    return b""


def slip_reply(wire: bytes) -> bytes:
    """What is sent instead of reply *wire* when it slips: header with TC set, question, bare OPT, no records."""
    qdcount, ancount, nscount, arcount = struct.unpack_from("!HHHH", wire, 4)
    try:
        end = 12
        for _ in range(qdcount):
            end = skip_name(wire, end) + 4
        opt = _bare_opt(wire, end, ancount + nscount + arcount)
        if end > len(wire):
            raise ValueError("question past the end")
    except (IndexError, ValueError, struct.error):  # our own reply: never expected; send the header alone
        end, qdcount, opt = 12, 0, b""
    header = wire[:2] + bytes([wire[2] | 0x02, wire[3]]) + struct.pack("!HHHH", qdcount, 0, 0, 1 if opt else 0)
    return header + wire[12:end] + opt
