"""Zone-file validation: one test per error class, each with the file:line a zone editor needs."""

import textwrap

import pytest

from tooldns.exceptions import ZoneFileError
from tooldns.zone.zonefile import load_zone, parse_zone

GOOD = textwrap.dedent("""\
    origin: weather.tools.
    soa:
      contact: hostmaster@weather.tools
      serial: 7
    nameservers:
      - name: ns1.weather.tools.
        address: 127.0.0.2
    summary:
      description: Weather data
    children:
      - label: history
        kind: functional
        summary:
          description: Past weather
        nameservers:
          - name: ns1.history.weather.tools.
            address: 127.0.0.3
    tools:
      - label: wttr
        name: wttr.in
        service: http
        target: wttr.in.
        port: 443
        description: Console weather
""")


def errors_of(text: str) -> list[str]:
    with pytest.raises(ZoneFileError) as info:
        parse_zone(text, "w.yaml")
    return info.value.errors


def one_error(text: str, line: int, *fragments: str) -> str:
    errs = errors_of(text)
    assert len(errs) == 1, errs
    assert errs[0].startswith(f"w.yaml:{line}: "), errs[0]
    for f in fragments:
        assert f in errs[0], errs[0]
    return errs[0]


def test_good_zone_parses():
    z = parse_zone(GOOD, "w.yaml")
    assert z.origin == "weather.tools."
    assert z.soa.serial == 7 and z.soa.rname == "hostmaster.weather.tools."
    assert [c.name for c in z.children] == ["history.weather.tools."]
    assert z.tools[0].owner(z.origin) == "wttr._http._tcp.weather.tools."


def test_bad_yaml():
    one_error(GOOD.replace("  serial: 7", "  serial: [7"), 5, "bad YAML")


def test_unknown_key():
    one_error(GOOD.replace("    port: 443", "    port: 443\n    colour: red"), 24, "unknown key 'colour'", "allowed:")


def test_missing_field():
    one_error(GOOD.replace("    port: 443\n", ""), 19, "tool is missing 'port'")


def test_bad_label():
    one_error(GOOD.replace("label: wttr", "label: -wttr"), 19, "tool label", "may not start or end with '-'")


def test_underscore_label_reserved():
    one_error(GOOD.replace("label: history", "label: _history"), 11, "reserved")


def test_duplicate_label():
    dup = GOOD + textwrap.indent(textwrap.dedent("""\
        - label: wttr
          name: again
          service: http
          target: wttr.in.
          port: 80
          description: Again
    """), "  ")
    one_error(dup, 25, "duplicate tool label 'wttr'", "first at line 19")


def test_duplicate_yaml_key():
    one_error(GOOD.replace("    port: 443", "    port: 443\n    port: 80"), 24, "duplicate key 'port'")


def test_delegation_without_glue():
    text = GOOD.replace("""    nameservers:
      - name: ns1.history.weather.tools.
        address: 127.0.0.3
""", "")
    one_error(text, 11, "delegation to 'history' has no name servers", "glue")


def test_glue_without_address():
    one_error(GOOD.replace("        address: 127.0.0.3\n", ""), 16, "is missing 'address'")


def test_glue_outside_bailiwick():
    one_error(GOOD.replace("ns1.history.weather.tools.", "ns1.example.org."), 16, "outside the bailiwick")


def test_unknown_service():
    one_error(GOOD.replace("service: http", "service: gopher"), 21, "unknown service 'gopher'", "allowed: a2a, http, mcp, skill")


def test_bad_address():
    one_error(GOOD.replace("address: 127.0.0.3", "address: 127.0.0.300"), 17, "not an IPv4 or IPv6 address")


def test_bad_port():
    one_error(GOOD.replace("port: 443", "port: 70000"), 23, "from 0 to 65535")


def test_bad_kind():
    one_error(GOOD.replace("kind: functional", "kind: company"), 12, "allowed: functional, organisation")


def test_organization_spelling_accepted():
    assert parse_zone(GOOD.replace("kind: functional", "kind: organization"), "w.yaml").children[0].kind == "organisation"


def test_empty_and_non_mapping():
    assert "empty" in errors_of("")[0]
    one_error("- just\n- a list\n", 1, "must be a mapping")


def test_all_errors_reported_at_once():
    text = GOOD.replace("service: http", "service: gopher").replace("port: 443", "port: -1")
    assert len(errors_of(text)) == 2


def test_load_zone_reports_path(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("origin: [x\n")
    with pytest.raises(ZoneFileError, match=r"bad\.yaml:\d+: bad YAML"):
        load_zone(p)
    with pytest.raises(ZoneFileError, match="cannot read"):
        load_zone(tmp_path / "missing.yaml")


def test_shipped_tree_is_valid_and_big_enough():
    from tooldns.serving.tree import load_tree
    from conftest import ZONES

    stores = load_tree(ZONES)
    zones = {s.index.origin: s.zone for s in stores}
    tools = [t for z in zones.values() for t in z.tools]
    assert "tools." in zones
    assert len(zones["tools."].children) >= 6
    assert max(len(o.split(".")) - 1 for o in zones) >= 3  # depth 3: tools. > weather.tools. > history.weather.tools.
    assert len(tools) >= 60
    assert {t.service for t in tools} == {"mcp", "a2a", "http", "skill"}
    orgs = [c for z in zones.values() for c in z.children if c.kind == "organisation"]
    parents = [z.origin for z in zones.values() if sum(c.kind == "organisation" for c in z.children) >= 2]
    assert len(orgs) >= 2 and parents


def test_origin_may_not_be_a_cursor():
    with pytest.raises(ZoneFileError, match="may not start with '_'"):
        parse_zone(GOOD.replace("origin: weather.tools.", "origin: _weather.tools."), "w.yaml")


@pytest.mark.parametrize("setting, message", [
    ("scorer_options: {k1: [1]}", "a value must be a number, text or true/false"),
    ("scorer_options: {nope: 1}", "bm25 does not take these options"),
    ("child_scorer_options: {k1: {a: 1}}", "a value must be a number, text or true/false"),
    ("embed_intents: nope", "unknown embedder 'nope'"),
    ("scorer: llm\n  scorer_options: {base_url: 'http://256.1.1.1:99999/v1'}", "base_url .* is not a URL"),
    ("scorer: llm\n  scorer_options: {base_url: 'localhost:8000'}", "not a URL such as http://HOST:PORT/v1"),
    ("scorer: llm\n  scorer_options: {base_url: 8000}", "base_url must be a URL, not int"),
])
def test_settings_a_scorer_would_refuse_are_refused_with_their_line(setting, message):
    with pytest.raises(ZoneFileError, match=message) as info:
        parse_zone(GOOD + f"settings:\n  {setting}\n", "w.yaml")
    assert f"w.yaml:{GOOD.count(chr(10)) + 2 + setting.count(chr(10))}:" in str(info.value)


def with_corpus(line: str) -> str:
    return GOOD.replace("      description: Past weather\n", f"      description: Past weather\n      {line}\n")


def test_corpus_terms_rank_a_child_exactly_as_its_corpus_text_would():
    """``corpus_terms`` is the corpus counted (what ``tooldns build`` writes): same BM25 scores, a
    fraction of the bytes once a subtree repeats its words."""
    from collections import Counter

    from tooldns.scoring.bm25 import BM25
    from tooldns.scoring.tokenize import tokenize
    from tooldns.zone.zonefile import format_terms

    text = "rain gauge readings; rain radar and hourly rain totals for the past decade of storms"
    counted = format_terms(Counter(tokenize(text)))
    assert counted.startswith("rain:3 ")
    as_text = parse_zone(with_corpus(f"corpus: {text}"), "w.yaml").children[0].summary
    as_terms = parse_zone(with_corpus(f"corpus_terms: {counted}"), "w.yaml").children[0].summary
    assert as_terms.corpus == "" and dict(as_terms.corpus_terms) == Counter(tokenize(text))
    assert as_terms.counts() == as_text.counts()
    other = "sunshine hours and ultraviolet index"
    for query in ("past rain totals", "storm decade", "ultraviolet"):
        assert (BM25([as_terms.document(), other], k1=10).scores(query)
                == BM25([as_text.document(), other], k1=10).scores(query))
    assert "rain" in str(as_terms.document())  # what non-lexical scorers (an LLM) read: the terms


@pytest.mark.parametrize("pairs, fragment", [
    ("rain:3 radar", "pair 2 ('radar') is not term:count"),
    ("rain:0", "pair 1 ('rain:0') is not term:count"),
    ("rain:x", "is not term:count"),
    ("rain:²", "is not term:count"),
    (":4", "is not term:count"),
    ("a:b:2", "is not term:count"),
    ("rain:1 rain:2", "counts a term twice"),
    ("rain:1 radar:2147483648", "pair 2 ('radar:2147483648') is not term:count"),
    ("rain:1 radar:00", "pair 2 ('radar:00') is not term:count"),
])
def test_malformed_corpus_terms_are_refused_with_their_line(pairs, fragment):
    one_error(with_corpus(f"corpus_terms: '{pairs}'"), 15, "summary of child 'history' 'corpus_terms'", fragment)


def test_corpus_terms_are_split_at_any_white_space_as_str_split_splits():
    text = with_corpus('corpus_terms: "rain:3\\tradar:01\\u3000 storm:2147483647\\n"')
    summary = parse_zone(text, "w.yaml").children[0].summary
    assert summary.corpus_terms == (("rain", 3), ("radar", 1), ("storm", 2**31 - 1))


def test_facets_are_read_written_and_kept_to_delegations():
    """``facets`` (what ``tooldns build`` writes: the tools beneath a child in groups) come back as
    they were written, through ``dump_zone``; a zone's own summary has none."""
    from tooldns.zone.zonefile import dump_zone

    text = with_corpus("facets: ['rain:3 radar:1', 'storm:2']")
    zone = parse_zone(text, "w.yaml")
    assert zone.children[0].summary.facets == ((("rain", 3), ("radar", 1)), (("storm", 2),))
    assert parse_zone(dump_zone(zone), "w.yaml") == zone
    document = zone.children[0].summary.document()
    assert document.facets == ({"rain": 3, "radar": 1}, {"storm": 2})
    one_error(GOOD.replace("  description: Weather data\n", "  description: Weather data\n  facets: ['rain:1']\n"),
              10, "unknown key 'facets'")


@pytest.mark.parametrize("facets, line, fragment", [
    ("['rain:3', 'radar']", 15, "facet 2 of summary of child 'history': pair 1 ('radar') is not term:count"),
    ("['rain:1 rain:2']", 15, "facet 1 of summary of child 'history' counts a term twice"),
    ("[7]", 15, "facet 1 of summary of child 'history' must be term:count pairs"),
    ("['']", 15, "facet 1 of summary of child 'history' must be term:count pairs"),
    ("rain:1", 15, "'facets' in summary of child 'history' must be a list"),
])
def test_malformed_facets_are_refused_with_their_line(facets, line, fragment):
    one_error(with_corpus(f"facets: {facets}"), line, fragment)


def test_too_many_facets_are_refused():
    from tooldns.zone.limits import ZoneLimits

    many = "[" + ", ".join(f"'t{i}:1'" for i in range(ZoneLimits().max_facets + 1)) + "]"
    one_error(with_corpus(f"facets: {many}"), 15, "max_facets")


def test_a_broken_child_file_is_reported_as_broken_not_as_missing(tmp_path, caplog):
    """At start a directory with a broken zone file is refused with that file's message; its parent's
    delegation is not also said to have no zone file (it has one). A file really missing is."""
    import logging
    import shutil

    from conftest import ZONES
    from tooldns.serving.tree import load_tree

    shutil.copytree(ZONES, tmp_path / "z")
    leaf = tmp_path / "z" / "history.weather.tools.yaml"
    leaf.write_text(leaf.read_text() + "tools: [oops\n")
    with caplog.at_level(logging.WARNING, logger="tooldns.serving.tree"):
        with pytest.raises(ZoneFileError, match="history.weather.tools.yaml:.*bad YAML"):
            load_tree(tmp_path / "z")
        assert "no zone file here" not in caplog.text
        leaf.unlink()
        load_tree(tmp_path / "z")
    assert "delegation to history.weather.tools. has no zone file here" in caplog.text


WALK = textwrap.dedent("""\
    walk:
      k: [5, 3, 2]
      leaf_k: 6
      best_leaf_k: 10
      beam: 6
      model: multilingual-e5-small
      fusion: 0.6
""")


def test_a_published_walk_is_read():
    from tooldns.zone import WalkPlan

    z = parse_zone(GOOD + WALK, "w.yaml")
    assert z.walk == WalkPlan(k=(5, 3, 2), leaf_k=6, best_leaf_k=10, beam=6, model="multilingual-e5-small", fusion=0.6)
    assert parse_zone(GOOD + "walk: {k: 6}\n", "w.yaml").walk == WalkPlan(k=(6,))
    assert parse_zone(GOOD, "w.yaml").walk is None


@pytest.mark.parametrize("old, new, line, fragment", [
    ("  k: [5, 3, 2]", "  k: [5, 0, 2]", 2, "walk 'k' 0 is out of range; each K must be a whole number from 1 to 255"),
    ("  k: [5, 3, 2]", "  k: 256", 2, "walk 'k' 256 is out of range"),
    ("  k: [5, 3, 2]", "  k: [1, 1, 1, 1, 1, 1, 1, 1, 1]", 2, "walk 'k' names 9 depths"),
    ("  k: [5, 3, 2]", "  k: []", 2, "walk 'k' names 0 depths"),
    ("  k: [5, 3, 2]", "  k: '5,3,2'", 2, "walk 'k' must be a whole number from 1 to 255, or a list"),
    ("  k: [5, 3, 2]", "  k: true", 2, "walk 'k' must be"),
    ("  k: [5, 3, 2]", "  k:\n  - 5\n  - three", 4, "walk 'k' 'three' is out of range"),
    ("  leaf_k: 6", "  leaf_k: 0", 3, "walk 'leaf_k' must be a whole number from 1 to 255, got 0"),
    ("  best_leaf_k: 10", "  best_leaf_k: 300", 4, "walk 'best_leaf_k' must be a whole number from 1 to 255"),
    ("  beam: 6", "  beam: 0", 5, "walk 'beam' must be a whole number from 1 to 65535, got 0"),
    ("  beam: 6", "  beam: 2.5", 5, "walk 'beam' must be a whole number"),
    ("  model: multilingual-e5-small", "  model: two words", 6, "walk model name 'two words' has U+0020"),
    ("  model: multilingual-e5-small", "  model: '" + "m" * 65 + "'", 6, "model name is 65 bytes; it must be 1 to 64"),
    ("  model: multilingual-e5-small", "  model: modèle", 6, "has U+00E8"),
    ("  model: multilingual-e5-small", "  model: ''", 6, "walk 'model' is empty"),
    ("  fusion: 0.6", "  fusion: 1.5", 7, "walk fusion must be a number from 0 to 1 with at most three decimal places"),
    ("  fusion: 0.6", "  fusion: 0.6125", 7, "got 0.6125"),
    ("  fusion: 0.6", "  fusion: half", 7, "walk fusion must be a number"),
    ("  beam: 6", "  beam: 6\n  colour: red", 6, "unknown key 'colour' in walk; allowed: beam, best_leaf_k, fusion, k, leaf_k,"),
    ("  k: [5, 3, 2]\n", "", 2, "walk is missing 'k'"),
    ("walk:\n  k: [5, 3, 2]", "walk: 6\nx:\n  k: [5, 3, 2]", 1, "walk must be a mapping"),
])
def test_each_bad_walk_value_is_reported_at_its_line(old, new, line, fragment):
    text = GOOD + WALK.replace(old, new)
    errs = errors_of(text)
    at = GOOD.count("\n") + line  # lines counted from walk:'s, which is 1
    assert any(e.startswith(f"w.yaml:{at}: ") and fragment in e for e in errs), errs


def test_tooldns_check_accepts_a_zone_with_a_walk(tmp_path, capsys):
    from tooldns.cli import main as tooldns_main

    path = tmp_path / "weather.tools.yaml"
    path.write_text(GOOD + WALK, encoding="utf-8")
    assert tooldns_main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
