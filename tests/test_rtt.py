"""The resolver's round-trip estimates (:mod:`resolver_client.rtt`): RFC 6298's smoothing, the
retransmission timeout it gives within its bounds, and when a datagram goes again."""

from __future__ import annotations

import pytest

from resolver_client.rtt import FIRST_RTO, MAX_SENDS, MIN_RTO, RttTable, resend_times

A, B = ("192.0.2.1", 53), ("192.0.2.2", 53)


def test_a_server_never_heard_from_waits_the_first_rto_within_the_timeout():
    table = RttTable()
    assert table.srtt(A) is None
    assert table.rto(A, timeout=5.0) == FIRST_RTO
    assert table.rto(A, timeout=0.1) == 0.1


def test_the_estimate_follows_rfc_6298():
    table = RttTable()
    table.observe(A, 0.100)
    assert table.srtt(A) == pytest.approx(0.100)
    assert table.rto(A, 5.0) == pytest.approx(0.100 + 4 * 0.050)  # rttvar starts at half the first sample
    table.observe(A, 0.200)
    assert table.srtt(A) == pytest.approx(0.875 * 0.100 + 0.125 * 0.200)
    rttvar = 0.75 * 0.050 + 0.25 * 0.100
    assert table.rto(A, 5.0) == pytest.approx(table.srtt(A) + 4 * rttvar)
    for _ in range(200):  # a steady fast server: the floor, not less
        table.observe(B, 0.0002)
    assert table.rto(B, 5.0) == MIN_RTO


def test_a_new_server_is_first_waited_for_twice_as_long_as_the_others_take():
    table = RttTable()
    table.observe(A, 0.040)
    assert table.rto(B, 5.0) == pytest.approx(2 * (0.040 + 4 * 0.020))
    table.observe(A, 5.0)  # the others slow: no more than a server never heard from at all
    assert table.rto(B, 10.0) == FIRST_RTO


def test_servers_are_forgotten_least_recently_heard_first():
    table = RttTable(max_servers=2)
    table.observe(A, 0.1)
    table.observe(B, 0.1)
    table.observe(A, 0.1)  # A heard from again: B is now the oldest
    table.observe(("192.0.2.3", 53), 0.1)
    assert table.srtt(B) is None and table.srtt(A) is not None


def test_resends_back_off_within_the_timeout():
    assert resend_times(10.0, 0.1, 1.0) == pytest.approx([10.1, 10.3, 10.7])  # waits 0.1, 0.2, 0.4
    assert len(resend_times(0.0, 0.01, 100.0)) == MAX_SENDS - 1
    assert resend_times(0.0, 1.0, 1.0) == []  # the rto is the whole timeout: sent once


def test_a_server_that_missed_is_asked_after_the_others_until_it_answers_again():
    table = RttTable()
    table.observe(A, 0.050)
    table.observe(B, 0.080)
    c = ("192.0.2.3", 53)
    assert table.ordered([B, A, c]) == [B, A, c]  # the zone's order
    table.missed(A, 1.0)  # timed out, or another answered its hedge first
    table.missed(B, 0.4)
    assert table.ordered([A, B, c]) == [c, B, A]  # the longer one made the resolver wait, the later
    assert table.rto(A, 5.0) == pytest.approx(0.050 + 4 * 0.025)  # its own wait is not changed
    table.observe(A, 0.050)  # it answers again
    assert table.ordered([A, B, c]) == [A, c, B]


def test_a_resolver_for_short_round_trips_may_be_given_a_lower_floor():
    """``min_rto`` (issue 44): on a network of 1 to 10 ms round trips a lost datagram costs the floor,
    not 50 ms; a steady fast server is then waited for the floor given, and a slow one as before."""
    table = RttTable(min_rto=0.005)
    for _ in range(200):
        table.observe(A, 0.001)
    assert table.rto(A, 5.0) == 0.005 < MIN_RTO
    table.observe(B, 0.100)
    assert table.rto(B, 5.0) == pytest.approx(0.100 + 4 * 0.050)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            RttTable(min_rto=bad)


def test_the_resolver_and_its_cli_take_the_floor_and_refuse_nonsense(capsys):
    from resolver_client import Resolver, ResolverError
    from resolver_client.cli import main

    with Resolver(root="127.0.0.1:5300", min_rto=0.002) as resolver:
        assert resolver.rtt.min_rto == 0.002
    with Resolver(root="127.0.0.1:5300") as resolver:
        assert resolver.rtt.min_rto == MIN_RTO
    for bad in (0, "soon", -0.01):
        with pytest.raises(ResolverError, match="min_rto"):
            Resolver(root="127.0.0.1:5300", min_rto=bad)
    with pytest.raises(SystemExit) as exc:
        main(["weather", "--min-rto", "0"])
    assert exc.value.code == 2 and "min-rto" in capsys.readouterr().err
