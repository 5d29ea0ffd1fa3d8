"""Zone files written by :mod:`tooldns.zone.emit` are PyYAML's own bytes, on real zones and generated documents."""

from __future__ import annotations

import json
import string

import pytest
import yaml
from hypothesis import example, given, strategies as st
from yaml.resolver import Resolver

from conftest import ZONES
from fuzzing import examples
from test_build import synthetic_catalog
from tooldns.building.build import build
from tooldns.zone import emit, load_zone
from tooldns.zone.zonefile import dump_zone, zone_document

pytestmark = pytest.mark.skipif(emit.DUMPER is None, reason="PyYAML without libyaml: zone files are written by PyYAML whole")


def test_only_bool_and_null_start_with_a_letter():
    """What _plain assumes of PyYAML's resolver for a text starting with a letter."""
    tags = {tag for letter in string.ascii_letters for tag, _ in Resolver.yaml_implicit_resolvers.get(letter, [])}
    assert tags == {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"}
    for word in emit._BOOL_NULL:
        assert Resolver().resolve(yaml.ScalarNode, word, (True, False)) != "tag:yaml.org,2002:str"


@pytest.mark.parametrize("path", sorted(ZONES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_zone_is_written_as_pyyaml_writes_it(path):
    doc = zone_document(load_zone(path))
    assert emit.dump(doc) == emit.pyyaml(doc)


def test_a_built_tree_is_written_as_pyyaml_writes_it(tmp_path):
    catalog = tmp_path / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog()))
    build([str(catalog)], str(tmp_path / "built"))
    files = sorted((tmp_path / "built").glob("*.yaml"))
    assert len(files) > 1
    for path in files:
        doc = zone_document(load_zone(path))
        assert emit.dump(doc) == emit.pyyaml(doc), path.name
        assert path.read_text(encoding="utf-8").endswith(emit.pyyaml(doc))


# texts rich in what decides plain against quoted and where a long line folds
_CHARS = st.sampled_from(list("aZ09 :#'\"-?.,[]{}&*!|>%@`=~<+_/\\") + ["  ", ": ", " #", "é", "天", "\n", "\t", "\x07"])
_WORDS = st.sampled_from(["yes", "No", "null", "on", "OFF", "true", "~", "3", "-1", "0x1F", "1.5", ".inf", "2026-12-01",
                          "1_000", "---", "...", "<<", "=", "a b", "word"])
texts = st.one_of(st.lists(_CHARS, max_size=12).map("".join), _WORDS,
                  st.lists(st.one_of(_WORDS, st.lists(_CHARS, max_size=8).map("".join), st.just("description")),
                           max_size=60).map(" ".join))
scalars = st.one_of(texts, st.integers(-10**6, 10**6), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.75, 10.0, 1e-05, 1e20]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(texts, inner, max_size=4)), max_leaves=12)
documents = st.dictionaries(texts, values, max_size=5)


@examples(400)
@given(documents)
@example({"k": [[1, 2], [3]], "e": [], "f": {}, "n": None})
@example({"description": "word " * 60, "t": "it's: " + "x " * 70})
def test_any_document_is_written_as_pyyaml_writes_it(doc):
    assert emit.dump(doc) == emit.pyyaml(doc)


def test_a_list_or_dict_written_twice_is_left_to_pyyaml_with_its_anchor():
    shared = ["archive", "climate"]
    doc = {"a": shared, "tools": [{"keywords": shared}]}
    assert "&id001" in emit.dump(doc)
    assert emit.dump(doc) == emit.pyyaml(doc)


def test_dump_zone_reads_back_and_is_what_pyyaml_writes():
    zone = load_zone(ZONES / "history.weather.tools.yaml")
    text = dump_zone(zone, "a header")
    assert text == "# a header\n" + yaml.dump(zone_document(zone), Dumper=yaml.CSafeDumper, sort_keys=False,
                                              allow_unicode=True, width=120)
