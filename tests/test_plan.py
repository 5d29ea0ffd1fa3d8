"""The published walk's codec (``_walk.<origin>`` TXT, :mod:`tooldns.protocol.plan`): golden strings, no sockets."""

import doctest

import pytest

import tooldns.protocol.plan as plan_module
from tooldns.exceptions import PlanError, ToolDNSError
from tooldns.protocol.plan import (MAX_BEAM, WalkPlan, decode_plan, decode_plan_rrset, encode_plan, plan_name,
                                   plan_text)

FULL = WalkPlan(k=(6,), leaf_k=6, best_leaf_k=10, beam=6, model="multilingual-e5-small")
#: what docs/protocol.md (section 6b) shows for FULL
FULL_STRINGS = [b"tooldns-walk=1", b"k=6", b"leaf-k=6", b"best-leaf-k=10", b"beam=6", b"model=multilingual-e5-small"]


def test_the_docstring_examples_hold():
    assert doctest.testmod(plan_module).failed == 0


def test_golden_strings():
    assert encode_plan(FULL) == FULL_STRINGS
    assert encode_plan(WalkPlan(k=(5, 3, 2))) == [b"tooldns-walk=1", b"k=5,3,2"]
    assert encode_plan(WalkPlan(k=3, beam=10)) == [b"tooldns-walk=1", b"k=3", b"beam=10"]
    assert plan_text(FULL) == "k=6 leaf-k=6 best-leaf-k=10 beam=6 model=multilingual-e5-small"
    assert plan_name("tools.") == "_walk.tools."


@pytest.mark.parametrize("plan", [FULL, WalkPlan(k=(5, 3, 2)), WalkPlan(k=(255,) * 8, leaf_k=1, best_leaf_k=255,
                                                                        beam=MAX_BEAM, model="m"),
                                  WalkPlan(k=1, model="x" * 64), WalkPlan(k=6, fusion=0.6), WalkPlan(k=6, fusion=0),
                                  WalkPlan(k=6, fusion=1.0), WalkPlan(k=6, fusion=0.125)])
def test_round_trip(plan):
    assert decode_plan(encode_plan(plan)) == plan


def test_an_int_k_is_one_depth_and_a_list_a_tuple():
    assert WalkPlan(k=6).k == (6,) and WalkPlan(k=[5, 3]).k == (5, 3)
    assert WalkPlan(k=6) == WalkPlan(k=(6,))


def test_unknown_keys_are_skipped_and_order_does_not_matter():
    strings = [b"k=5,3", b"colour=blue", b"tooldns-walk=1", b"future-knob=7", b"leaf-k=4", b"no-equals-sign"]
    assert decode_plan(strings) == WalkPlan(k=(5, 3), leaf_k=4)


@pytest.mark.parametrize("strings, fragment", [
    ([b"k=6"], "no 'tooldns-walk=' string"),
    ([b"tooldns-walk=2", b"k=6"], "format '2' is not '1'"),
    ([b"tooldns-walk=1"], "has no 'k='"),
    ([b"tooldns-walk=1", b"k="], "k='' is not a whole number from 1 to 255"),
    ([b"tooldns-walk=1", b"k=0"], "k='0' is not a whole number"),
    ([b"tooldns-walk=1", b"k=256"], "k='256' is not a whole number from 1 to 255"),
    ([b"tooldns-walk=1", b"k=6,,3"], "k='' is not"),
    ([b"tooldns-walk=1", b"k=06"], "k='06' is not"),
    ([b"tooldns-walk=1", b"k=+6"], "k='+6' is not"),
    ([b"tooldns-walk=1", b"k=6 "], "k='6 ' is not"),
    ([b"tooldns-walk=1", "k=\u0666".encode()], "is not a whole number"),  # an Arabic-Indic six
    ([b"tooldns-walk=1", b"k=1,1,1,1,1,1,1,1,1"], "k names 9 depths; it must name 1 to 8"),
    ([b"tooldns-walk=1", b"k=6", b"leaf-k=-1"], "leaf-k='-1' is not a whole number from 1 to 255"),
    ([b"tooldns-walk=1", b"k=6", b"best-leaf-k=1000"], "best-leaf-k='1000'"),
    ([b"tooldns-walk=1", b"k=6", b"beam=0"], "beam='0' is not a whole number from 1 to 65535"),
    ([b"tooldns-walk=1", b"k=6", b"beam=65536"], "beam='65536'"),
    ([b"tooldns-walk=1", b"k=6", b"beam=99999999999999999999"], "beam='99999999999999999999'"),
    ([b"tooldns-walk=1", b"k=6", b"model="], "model name is 0 bytes"),
    ([b"tooldns-walk=1", b"k=6", b"model=two words"], "has U+0020 at position 3"),
    ([b"tooldns-walk=1", b"k=6", "model=modèle".encode()], "has U+00E8"),
    ([b"tooldns-walk=1", b"k=6", b"model=\xff"], "has U+FFFD"),
    ([b"tooldns-walk=1", b"k=6", b"model=" + b"m" * 65], "model name is 65 bytes; it must be 1 to 64"),
    ([b"tooldns-walk=1", b"k=6", b"fusion=1.5"], "fusion='1.5' is not a share from 0 to 1"),
    ([b"tooldns-walk=1", b"k=6", b"fusion=0.6125"], "fusion='0.6125'"),
    ([b"tooldns-walk=1", b"k=6", b"fusion=.6"], "fusion='.6'"),
    ([b"tooldns-walk=1", b"k=6", b"fusion=-0"], "fusion='-0'"),
    ([b"tooldns-walk=1", b"k=6", b"fusion=1e-1"], "fusion='1e-1'"),
    # a repeated key continues the value (docs/protocol.md, TXT strings): k=6 then k=3 reads k=63
    ([b"tooldns-walk=1", b"k=6", b"leaf-k=2", b"leaf-k=56"], "leaf-k='256'"),
])
def test_malformed_known_values_are_errors_saying_what_is_wrong(strings, fragment):
    with pytest.raises(PlanError) as info:
        decode_plan(strings)
    assert fragment in str(info.value)
    assert isinstance(info.value, ToolDNSError)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(k=()), "k names 0 depths"), (dict(k=(3,) * 9), "k names 9 depths"), (dict(k=(0,)), "k 0 is out of range"),
    (dict(k=(3, 256)), "k 256 is out of range"), (dict(k=True), "k must be whole numbers"),
    (dict(k=("6",)), "k must be whole numbers"), (dict(k=3, leaf_k=0), "leaf_k must be"),
    (dict(k=3, best_leaf_k=256), "best_leaf_k must be"), (dict(k=3, beam=0), "beam must be"),
    (dict(k=3, beam=True), "beam must be"), (dict(k=3, model=""), "model name is 0 bytes"),
    (dict(k=3, model="a b"), r"U\+0020"), (dict(k=3, model=5), "model must be text"),
    (dict(k=3, fusion=1.01), "fusion must be"), (dict(k=3, fusion=-0.5), "fusion must be"),
    (dict(k=3, fusion=0.0005), "fusion must be"), (dict(k=3, fusion=True), "fusion must be"),
    (dict(k=3, fusion="0.6"), "fusion must be"),
])
def test_a_plan_out_of_range_cannot_be_made(kwargs, fragment):
    with pytest.raises(PlanError, match=fragment):
        WalkPlan(**kwargs)


def test_a_fusion_is_written_as_short_as_it_reads():
    assert encode_plan(WalkPlan(k=6, fusion=0.6))[-1] == b"fusion=0.6"
    assert encode_plan(WalkPlan(k=6, fusion=1.0))[-1] == b"fusion=1"
    assert encode_plan(WalkPlan(k=6, fusion=0.125, model="m"))[-2:] == [b"model=m", b"fusion=0.125"]
    assert decode_plan([b"tooldns-walk=1", b"k=6", b"fusion=1.000"]).fusion == 1.0


def test_an_rrset_holds_one_walk_among_other_txt_records():
    other = [b"v=spf1 -all"]
    assert decode_plan_rrset([other, FULL_STRINGS]) == FULL
    with pytest.raises(PlanError, match="no TXT record with 'tooldns-walk='"):
        decode_plan_rrset([other])
    with pytest.raises(PlanError, match="2 TXT records with 'tooldns-walk='"):
        decode_plan_rrset([FULL_STRINGS, [b"tooldns-walk=1", b"k=3"]])
    with pytest.raises(PlanError, match="k='x'"):
        decode_plan_rrset([[b"tooldns-walk=1", b"k=x"]])


def test_error_texts_quote_a_servers_bytes_printably_and_short():
    with pytest.raises(PlanError) as info:
        decode_plan([b"tooldns-walk=1", b"k=6", b"beam=\x1b[31m" + b"9" * 100])
    text = str(info.value)
    assert "\x1b" not in text and len(text) < 160
