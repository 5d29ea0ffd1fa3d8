"""The command lines, as users run them: tooldns-resolve and tooldns."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from resolver_client.cli import main as resolve_main
from tooldns.cli import main as tooldns_main

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, copy_tree, fresh_subnet, free_port, ZONES


def root_arg(tree):
    address, port = tree.root()
    return f"{address}:{port}"


def at(tree):
    """--root of *tree*, and a reply timeout a loaded machine does not hit (the default is 1 s)."""
    return ["--root", root_arg(tree), "--timeout", str(REPLY_TIMEOUT)]


def test_resolve_table(demo_tree, capsys):
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["#", "score", "name"]
    assert "hko.weather.tools." in out and ";; " in out and "queries" in out


def test_resolve_json(demo_tree, capsys):
    assert resolve_main(["send a slack message", *at(demo_tree), "--json", "--k", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    tool = data["tools"][0]
    assert {"name", "title", "service", "target", "port", "zone", "score"} <= set(tool)
    # as tooldns mcp's find_tools: the DNS name as name, the human name as title
    assert tool["name"] == f"{tool['label']}._{tool['service']}._tcp.{tool['zone']}" and "Slack" in tool["title"]
    assert {"queries", "bytes_sent", "bytes_received", "packets", "ms"} <= set(data["stats"])


def test_resolve_trace_like_dig(demo_tree, capsys):
    assert resolve_main(["typhoon warning", *at(demo_tree), "--trace", "--trust", "hko"]) == 0
    out = capsys.readouterr().out
    assert ";; hop 1: " in out and "_any._tcp._tools. SRV -> NOERROR" in out
    assert "referral 1. weather.tools." in out
    assert "tool 1. HKO Weather Warning Summary" in out


def test_resolve_with_a_beam_says_what_it_left(demo_tree, capsys):
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree), "--trace", "--k", "3", "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert "not followed: beyond the beam of 1 a depth" in out and "hko.weather.tools." in out
    with pytest.raises(SystemExit):
        resolve_main(["weather", *at(demo_tree), "--beam", "0"])
    assert "--beam must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        resolve_main(["weather", *at(demo_tree), "--beam", "2", "--no-beam"])
    assert "--beam and --no-beam do not go together" in capsys.readouterr().err


def test_resolve_bounds_deep_depths_by_default_and_not_with_no_beam(demo_tree, capsys):
    """The default beam (6 at K = 5) leaves some of the 13 zones two levels down out; --no-beam asks them all."""
    assert resolve_main(["get information", *at(demo_tree), "--trace", "--k", "5"]) == 0
    assert "not followed: beyond the beam of 6 a depth" in capsys.readouterr().out
    assert resolve_main(["get information", *at(demo_tree), "--trace", "--k", "5", "--no-beam"]) == 0
    assert "beyond the beam" not in capsys.readouterr().out


def test_resolve_service_and_trust_flags(demo_tree, capsys):
    code = resolve_main(["Hong Kong Observatory warnings", *at(demo_tree), "--trust", "", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert all(not t["zone"].startswith("hko.") for t in data["tools"])
    assert code in (0, 1)
    assert resolve_main(["pull requests", *at(demo_tree), "--service", "mcp", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tools"] and all(t["service"] == "mcp" for t in data["tools"])


def test_a_misspelt_trusted_organisation_is_warned_of(demo_tree, capsys):
    """--trust nosuchorg was taken silently; now a trust entry that names no zone the walk met is said."""
    assert resolve_main(["typhoon warning", *at(demo_tree), "--trust", "hko,nosuchorg"]) == 0
    err = capsys.readouterr().err
    assert ";; warning: --trust nosuchorg: no zone of that name was met on the walk (organisations met: hko)" in err
    assert "--trust hko" not in err


def test_resolve_says_where_it_wrote_the_html_page(demo_tree, tmp_path, capsys):
    page = tmp_path / "walk.html"
    assert resolve_main(["typhoon warning", *at(demo_tree), "--html", str(page)]) == 0
    assert f";; the walk's picture written to {page}" in capsys.readouterr().err and page.exists()


def test_an_empty_intent_is_a_usage_error(capsys):
    for intent in ("", "   "):
        with pytest.raises(SystemExit) as info:
            resolve_main([intent, "--root", "127.0.0.1:9"])
        assert info.value.code == 2
        assert "the intent is empty: say in words what the agent wants to do" in capsys.readouterr().err


@pytest.mark.integration
def test_resolve_errors(capsys):
    port = free_port("127.0.0.1")
    assert resolve_main(["weather", "--root", f"127.0.0.1:{port}", "--timeout", "0.3"]) == 3
    err = capsys.readouterr().err
    assert "no usable reply from a root name server" in err and f"is a tree served at 127.0.0.1:{port}?" in err
    with pytest.raises(SystemExit) as info:
        resolve_main(["weather", "--k", "0"])
    assert info.value.code == 2
    assert resolve_main(["weather", "--service", "gopher"]) == 3


def test_check_reports_errors(tmp_path, capsys):
    d = copy_tree(ZONES, tmp_path / "z", "127.0.0")
    assert tooldns_main(["check", str(d)]) == 0
    assert "25 zones" in capsys.readouterr().out
    bad = d / "history.weather.tools.yaml"
    bad.write_text(bad.read_text().replace("service: http", "service: gopher", 1))
    assert tooldns_main(["check", str(d)]) == 1
    err = capsys.readouterr().err
    assert "history.weather.tools.yaml:" in err and "unknown service 'gopher'" in err


@pytest.mark.integration
def test_serve_starts_prints_and_stops_on_ctrl_c(tmp_path):
    subnet = fresh_subnet()
    d = copy_tree(ZONES, tmp_path / "z", subnet)
    port = free_port(subnet + ".1")
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", str(d), "--port", str(port),
                             "--rcvbuf", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C" in line or not line:
                break
        text = "".join(lines)
        assert f"{subnet}.1 " in text
        assert "hko.weather.tools." in text
        rmem_max = int(open("/proc/sys/net/core/rmem_max").read())
        granted = int(re.search(r"UDP receive buffer: (\d+) bytes", text).group(1))  # as the kernel reports it
        assert granted in (2 * 1_000_000, 2 * min(1_000_000, rmem_max))  # forced (as root), or capped
        from resolver_client import Resolver
        with Resolver(root=(f"{subnet}.1", port), timeout=REPLY_TIMEOUT) as r:
            assert r.resolve("historical weather Hong Kong").tools
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_TIMEOUT) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.integration
def test_serve_refuses_broken_tree(tmp_path):
    d = copy_tree(ZONES, tmp_path / "z", fresh_subnet())
    (d / "maps.tools.yaml").write_text("origin: maps.tools.\nsoa: {serial: 1}\nnameservers: []\nbogus: 1\n")
    out = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(d), "--port", "0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "maps.tools.yaml:4: unknown key 'bogus'" in out.stderr


@pytest.mark.parametrize("flag,bad,message", [
    ("--tcp-idle", "inf", "a number of seconds above 0"), ("--tcp-idle", "0", "a number of seconds above 0"),
    ("--summary-refresh", "nan", "a number of seconds above 0"), ("--watch-interval", "-0.5", "0 or more"),
    ("--workers", "0", "a whole number of at least 1"), ("--workers", "1.5", "a whole number of at least 1"),
    ("--port", "70000", "a port number from 0 to 65535"), ("--port", "-1", "a port number from 0 to 65535"),
    ("--port", "65536", "a port number from 0 to 65535")])
def test_serve_refuses_numbers_out_of_range(flag, bad, message, capsys):
    """Durations must be finite numbers of seconds, counts and ports whole numbers: exit 2 with argparse's
    message naming the flag, before anything is served."""
    with pytest.raises(SystemExit) as exit_:
        tooldns_main(["serve", str(ZONES), flag, bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be" in err and message in err and repr(bad) in err


def test_resolve_leaves_out_tools_no_word_matched(demo_tree, capsys):
    """Zones answer K tools however few match, the unmatched at score 0: they are not found ones (exit 1)."""
    assert resolve_main(["xyzzy qwerty", *at(demo_tree)]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == "no tools found for 'xyzzy qwerty'"
    assert "left out: no word of the intent matched them" in captured.err
    assert resolve_main(["xyzzy qwerty", *at(demo_tree), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["tools"] == []
    assert resolve_main(["historical weather xyzzy", *at(demo_tree), "--json"]) == 0
    assert all(t["score"] > 0 for t in json.loads(capsys.readouterr().out)["tools"])
    assert resolve_main([" ".join(["xyzzy"] * 800), *at(demo_tree)]) == 1  # said back cut, not 4,800 characters
    said = capsys.readouterr().out.strip()
    assert said.startswith("no tools found for 'xyzzy xyzzy") and said.endswith("...'") and len(said) < 240


def test_resolve_table_shows_details_and_marks_cut_cells(demo_tree, capsys):
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree), "--details"]) == 0
    lines = capsys.readouterr().out.splitlines()
    described = [line for line in lines if line.startswith("     ")]
    assert described and all(len(line.strip()) > 20 for line in described)
    assert any(line.rstrip().endswith("...") for line in lines[1:] if not line.startswith("     "))  # the HKO endpoints
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree)]) == 0
    assert not any(line.startswith("     ") for line in capsys.readouterr().out.splitlines())


def test_resolve_says_when_it_shortened_the_intent(demo_tree, capsys):
    assert resolve_main(["historical weather " * 400, *at(demo_tree)]) == 0
    assert "was cut at a word boundary to fit one query" in capsys.readouterr().err


def test_resolve_into_a_pipe_closed_early_is_no_error(demo_tree):
    """`tooldns-resolve ... --json | head -1`: the reader stops reading; no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write meets a closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "resolver_client", "historical weather Hong Kong", *at(demo_tree),
                             "--json"], stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    err = proc.communicate(timeout=WAIT_TIMEOUT)[1].decode()
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_check_warns_of_a_delegation_without_its_zone_file(tmp_path, capsys):
    """A child served elsewhere is no error, but ``check`` says that here it will not answer."""
    d = copy_tree(ZONES, tmp_path / "z", "127.0.0")
    (d / "hko.weather.tools.yaml").unlink()
    assert tooldns_main(["check", str(d)]) == 0
    out = capsys.readouterr().out
    assert "24 zones" in out and "weather.tools.yaml: delegation to hko.weather.tools. has no zone file here" in out


def test_commands_name_a_missing_directory_as_such(tmp_path, capsys):
    assert tooldns_main(["check", str(tmp_path / "nowhere")]) == 1
    assert "nowhere: no such file or directory" in capsys.readouterr().err
    assert tooldns_main(["serve", str(tmp_path / "nowhere"), "--port", "0"]) == 1
    assert "nowhere: no such directory" in capsys.readouterr().err


@pytest.mark.integration
def test_serve_on_a_port_in_use_says_what_to_do(tmp_path):
    d = copy_tree(ZONES, tmp_path / "z", fresh_subnet())
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        root = next(line for line in (d / "tools.yaml").read_text().splitlines() if "address:" in line).split()[-1]
        held.bind((root, 0))
        out = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(d), "--port", str(held.getsockname()[1])],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Address already in use" in out.stderr and "choose another --port" in out.stderr


def test_resolve_says_once_when_zones_did_not_use_the_vector(demo_tree, capsys):
    """The shipped tree scores no vectors: every zone flags VECTOR_IGNORED, the user hears it once."""
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree), "--embed", "hash"]) == 0
    assert capsys.readouterr().err.count("the intent's vector was not used") == 1
    assert resolve_main(["historical weather Hong Kong", *at(demo_tree)]) == 0
    assert "vector" not in capsys.readouterr().err


@pytest.mark.parametrize("command", [["check", str(ZONES)], ["dnssec", "show", str(ZONES)], ["--help"]])
def test_tooldns_into_a_pipe_closed_early_is_no_error(command):
    """`tooldns dnssec show zones/ | head`: the reader stops reading; before, "tooldns: [Errno 32]
    Broken pipe" and exit 3. Now the rest goes nowhere, quietly (Python's documentation on SIGPIPE)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write meets a closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", *command], stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    err = proc.communicate(timeout=WAIT_TIMEOUT)[1].decode()
    assert err == "" and proc.returncode in (0, 1), (proc.returncode, err)
