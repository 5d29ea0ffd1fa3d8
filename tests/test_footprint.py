"""What a loaded zone is counted at (:mod:`tooldns.serving.footprint`): the bytes of the zone data its
objects reach, each once, nothing it shares with other zones; and sizes as ``--max-loaded-memory`` takes them."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import threading

import pytest

from tooldns.commands.argtypes import size
from tooldns.serving.footprint import footprint, zone_footprint
from tooldns.serving.index import ZoneIndex
from tooldns.zone.zonefile import load_zone

from conftest import ROOT


def test_each_object_is_counted_once_and_more_data_counts_more():
    text = "x" * 1000
    once = footprint([text])
    assert footprint([text, text]) == once + 8  # one more list slot, not another string
    assert footprint([text, "y" * 1000]) > once + 1000
    assert footprint() == 0


def test_what_a_zone_shares_is_not_counted():
    shared = [threading.Lock(), sys, footprint, len, int]
    assert footprint(shared) == sys.getsizeof(shared)  # the list alone


def test_what_an_index_shares_with_the_process_is_not_counted():
    """The intent embedder a process shares (zone code, the model's weights behind it) and the signer are
    the process's, not the zone's: a zone's count is the same with or without them."""
    from tooldns.embedding.hashing import HashEmbedder
    from tooldns.embedding.registry import IntentEmbeddings

    zone = load_zone(ROOT / "zones" / "history.weather.tools.yaml")
    index = ZoneIndex(zone)
    alone = zone_footprint(zone, index)
    embedder = HashEmbedder()
    embedder.weights = bytes(1_000_000)  # as a model's would be
    shared = IntentEmbeddings(embedder)
    index.intent_embeddings = shared
    assert footprint(shared) > 1_000_000 and zone_footprint(zone, index) == alone


def test_a_zone_with_more_tools_holds_more():
    zone = load_zone(ROOT / "zones" / "history.weather.tools.yaml")
    whole = footprint(zone, ZoneIndex(zone))
    assert whole > 10 * 1024
    fewer = dataclasses.replace(zone, tools=zone.tools[:1])
    assert len(zone.tools) > 1 and footprint(fewer, ZoneIndex(fewer)) < whole


@pytest.mark.parametrize("text, expected", [("0", 0), ("1000", 1000), ("768M", 768 * 2**20), ("1.5g", 3 * 2**29),
                                            ("64k", 65536), (" 2G ", 2**31)])
def test_sizes_in_bytes_or_with_a_unit(text, expected):
    assert size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "M", "12X", "1T", "nan", "inf", "1e400"])
def test_what_is_no_size_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="size in bytes"):
        size(text)


def test_serve_refuses_a_memory_bound_that_is_no_size():
    done = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", "zones", "--lazy", "--listen", "127.0.0.1",
                           "--max-loaded-memory", "lots"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--max-loaded-memory" in done.stderr and "size in bytes" in done.stderr
