"""What ``tooldns check`` says about a zone's text: stuffed, injected, oversized or unprintable.

The rules are :mod:`tooldns.protocol.hygiene`'s, which servers and the resolver apply anyway
(repeated words are capped, instructions cut out, control characters dropped); these warnings
tell the zone's editor, so that what a tool says is what agents will see.

    >>> content_warnings(load_zone("zones/hko.weather.tools.yaml"), "hko.weather.tools.yaml")
    []
"""

from __future__ import annotations

from ..protocol.hygiene import findings
from .model import Zone


def content_warnings(zone: Zone, where: str) -> list[str]:
    """One line per tool, child summary or name whose text a reader would be misled by."""
    out = []
    for tool in zone.tools:
        for what, text in (("name", tool.name), ("description", tool.description), ("endpoint", tool.endpoint)):
            for finding in findings(text):
                out.append(f"{where}: tool {tool.label}: {what}: {finding}")
        for p in tool.parameters:
            for finding in findings(p.description):
                out.append(f"{where}: tool {tool.label}: parameter {p.name}: {finding}")
    for child in zone.children:
        text = " ".join([child.summary.description, *child.summary.keywords])
        for finding in findings(text):
            out.append(f"{where}: child {child.label}: summary: {finding}")
    return out
