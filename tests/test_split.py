"""Intents that ask for several tools: split without a model, walked together, merged fairly."""

from __future__ import annotations

import asyncio

from resolver_client import AsyncResolver, Resolver
from resolver_client.results import Tool
from resolver_client.split import merge_fair, split_intent

from conftest import REPLY_TIMEOUT


def test_split_at_requests_not_at_every_and():
    assert split_intent("Find ski resorts in Switzerland, get details of a hotel and search for flights") == [
        "Find ski resorts in Switzerland", "get details of a hotel", "search for flights"]
    assert split_intent("I want the weather in Hong Kong. Then send the forecast to Slack please") == [
        "I want the weather in Hong Kong", "Then send the forecast to Slack please"]
    assert split_intent("salt and pepper prices in shops") == []
    assert split_intent("historical weather Hong Kong") == []


def _tool(name: str) -> Tool:
    return Tool(name=name, service="http", target="x.", port=443, zone="z.", score=1.0, rank=1, id=name)


def test_merge_gives_each_ranking_a_fair_share():
    whole = [_tool("a"), _tool("b"), _tool("c")]
    part1, part2 = [_tool("x"), _tool("a")], [_tool("y")]
    assert [t.id for t in merge_fair([whole, part1, part2], top=5)] == ["a", "x", "y", "b", "c"]


def test_split_walks_the_parts_too_over_real_servers(demo_tree):
    intent = "Get the historical weather in Hong Kong and send a message to a Slack channel"
    with Resolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        plain = r.resolve(intent, k=1, leaf_k=3)
        split = r.resolve(intent, k=1, leaf_k=3, split=True)
    weather = {"hko.weather.tools.", "history.weather.tools."}
    plain_zones = {t.zone for t in plain.tools}
    assert not ("chat.comms.tools." in plain_zones and plain_zones & weather)  # K = 1: one branch only
    zones = {t.zone for t in split.tools}
    assert "chat.comms.tools." in zones and zones & weather
    assert split.stats.queries > plain.stats.queries  # the parts' walks are counted
    asynced = asyncio.run(AsyncResolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False)
                          .resolve(intent, k=1, leaf_k=3, split=True))
    assert [t.key for t in asynced.tools] == [t.key for t in split.tools]
