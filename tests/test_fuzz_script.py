"""``scripts/fuzz/fuzz_server.py`` works: a small run against a tree of its own passes its floors, and the
floors fail when a reply is missing, stray or bad.

The run serves a copy of ``zones/`` on addresses no other test uses, with rate limiting off (it
would otherwise count most replies as limited), and reads the script's printed summary.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tooldns.fuzzpackets import Report, encode_name, floors, header, question

from conftest import ROOT, ZONES, copy_tree, fresh_subnet

SCRIPT = ROOT / "scripts" / "fuzz" / "fuzz_server.py"


@pytest.mark.integration
def test_a_small_run_passes_its_floors(tmp_path):
    zones = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    serve_help = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", "--help"], capture_output=True,
                                text=True, cwd=ROOT).stdout
    no_limit = ["--serve-arg=--no-rate-limit"] if "--no-rate-limit" in serve_help else []
    # --timeout 5: the script's 1 s default would count a reply a loaded machine sends late as unanswered
    out = subprocess.run([sys.executable, str(SCRIPT), "--packets", "2000", "--zones", str(zones), "--seed", "3",
                          "--log", str(tmp_path / "server.log"), "--timeout", "5", *no_limit],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "rate limiting off" in text and "floors: all held" in text
    total = re.search(r"^total\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", text, re.M)
    sent, answered, unanswered, dropped, stray, bad = map(int, total.groups())
    assert sent == 2000 and unanswered == stray == bad == 0
    assert answered + dropped == sent and answered > 1500 and dropped > 0
    for category in ("random", "valid", "mutated", "pointers", "names", "counts", "opt", "intent", "responses",
                     "short", "tcp"):
        assert re.search(rf"^{category}\s+\d+", text, re.M), category
    assert "server log: 0 'Traceback' lines" in text and re.search(r"server RSS: start \d+ kB", text)
    assert re.search(r"resolution of 'historical weather Hong Kong' afterwards: ok: .* in h(ko|istory)\.weather", text)


def test_the_floors_fail_on_missing_stray_and_bad_replies():
    query = header(7) + question(encode_name("weather.tools."))
    response = header(8, flags=0x8000) + question(encode_name("weather.tools."))
    ok = (True, "fine")
    report = Report()
    report.tally("valid").sent += 1
    report.silence("valid", query, True)
    assert floors(report, "", {}, None, False, ok) == ["1 queries due a reply got none"]
    assert floors(report, "", {}, None, True, ok) == []  # rate limited: the servers' policy
    report = Report()
    report.reply("responses", response, response, True)  # a reply to a response: a loop in the making
    report.reply("valid", query, query, True)  # QR clear: not a reply
    failed = floors(report, "Traceback (most recent call last):", {"servfail": 2}, None, False,
                         (False, "no tools"))
    assert failed == ["1 replies to messages that must be dropped", "1 bad replies", "1 tracebacks in the server's log",
                      "the servers counted 2 internal errors (SERVFAIL)", "the resolution afterwards: no tools"]
