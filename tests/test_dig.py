"""Wire compatibility with a real third-party client: ISC dig against a running server."""

import subprocess

import pytest

from tooldns.protocol.intent import encode_intent

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, dig_path

pytestmark = [pytest.mark.integration,  # dig, a real third-party client, against servers on loopback
              pytest.mark.skipif(dig_path() is None, reason="dig is not installed (Debian package bind9-dnsutils)")]


def dig(tree, *args):
    address, port = tree.root()
    out = subprocess.run([dig_path(), f"@{address}", "-p", str(port), "+norec", f"+time={REPLY_TIMEOUT:.0f}", "+tries=1",
                          *args], capture_output=True, text=True, timeout=REPLY_TIMEOUT + WAIT_TIMEOUT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_dig_gets_ranked_referral(demo_tree):
    hexdata = encode_intent("historical weather Hong Kong", 3).hex()
    out = dig(demo_tree, "_any._tcp._tools.", "SRV", f"+ednsopt=65301:{hexdata}")
    assert "status: NOERROR" in out
    assert "flags: qr;" in out  # a referral: no AA, no RA
    assert "AUTHORITY SECTION" in out and "weather.tools.\t\t3600\tIN\tNS\tns1.weather.tools." in out
    assert '"rank=1"' in out and '"score=' in out
    assert "OPT=65302" in out  # the meta option


def test_dig_without_option_gets_all_children(demo_tree):
    out = dig(demo_tree, "_any._tcp._tools.", "SRV")
    for domain in ("weather", "maps", "finance", "code", "knowledge", "comms", "productivity"):
        assert f"{domain}.tools." in out


def test_dig_malformed_option_formerr_with_ede(demo_tree):
    out = dig(demo_tree, "_any._tcp._tools.", "SRV", "+ednsopt=65301:0000050341")
    assert "status: FORMERR" in out
    assert "EDE: 0 (Other): (bad intent option: intent length field says 5 bytes but 1 follow)" in out


def test_dig_over_tcp_and_plain_records(demo_tree):
    out = dig(demo_tree, "+tcp", "tools.", "SOA")
    assert "status: NOERROR" in out and "flags: qr aa;" in out and "(TCP)" in out
    out = dig(demo_tree, "nothere.tools.", "A")
    assert "status: NXDOMAIN" in out
    out = dig(demo_tree, "example.org.", "A")
    assert "status: REFUSED" in out


def test_dig_chinese_intent(demo_tree):
    hexdata = encode_intent("香港天文台", 1).hex()
    out = dig(demo_tree, "_any._tcp._tools.", "SRV", f"+ednsopt=65301:{hexdata}")
    assert "weather.tools.\t\t3600\tIN\tNS" in out
