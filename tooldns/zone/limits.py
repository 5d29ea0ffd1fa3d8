"""How much one zone file may hold: the limits that keep a zone file from exhausting a server.

A zone file is written by whoever runs the zone, and a server reads it at start and on every
edit; these limits bound what reading it can cost (time, memory) and make sure that whatever
loads can be answered: every tool's own TXT record, with every text at its limit, still packs
into one DNS message (65,535 octets; ``tests/test_zone_limits.py`` resolves such a tool over
real DNS). Lengths are UTF-8 bytes, what goes on the wire. A file over a limit is refused like
any invalid file, with ``file:line`` messages that name the limit.

The defaults are generous: a tree ``tooldns build`` makes of the 1,839 ToolRet tools has at most
92 children and 59 tools a zone, 19 parameters a tool, descriptions of 554 bytes and a largest
file of 0.4 MB. An operator who needs other limits passes them when loading::

    >>> from tooldns.zone.zonefile import load_zone
    >>> zone = load_zone("zones/tools.yaml", limits=ZoneLimits(max_tools=50_000))
    >>> ZoneLimits().max_file_bytes
    67108864
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZoneLimits:
    """Limits on one zone file; every field is a maximum."""

    # -- the file as YAML: bounds on reading it at all --
    #: size of the file (64 MiB; a built zone of the whole ToolRet catalog is under 0.5 MB)
    max_file_bytes: int = 64 * 2**20
    #: YAML values in the file (every key, value and list item): bounds the memory of the parsed
    #: file (at worst, a million empty mappings, about 200 MB for a 3 MB file); a zone of 10,000
    #: tools with a parameter each has about 300,000
    max_nodes: int = 1_000_000
    #: mappings and lists nested in one another (a zone file needs six at most)
    max_depth: int = 32
    #: problems reported for one file; past this many the rest are counted, not listed
    max_errors: int = 100

    # -- counts --
    #: tools in one zone (10,000 load and are indexed in about 3 s)
    max_tools: int = 10_000
    #: delegations (children) of one zone (``tooldns build`` makes at most 2,500 by default: the root of
    #: a million tools has 2,237)
    max_children: int = 4_096
    #: name servers of a zone, and of each delegation
    max_nameservers: int = 32
    #: parameters of one tool (each is one string of at most 240 characters in the tool's TXT)
    max_parameters: int = 50
    #: keywords of one summary
    max_keywords: int = 256
    #: vectors (centroids) of one delegation
    max_vectors: int = 64
    #: facets of one delegation (``tooldns build`` writes at most 16)
    max_facets: int = 64
    #: example intents of one tool (what ``tooldns build --examples`` fits its vector map on)
    max_examples: int = 64

    # -- text lengths, in UTF-8 bytes --
    #: a tool's description (its TXT record carries all of it)
    max_description_bytes: int = 8192
    #: a tool's name
    max_name_bytes: int = 256
    #: a tool's endpoint (a URL, a command line)
    max_endpoint_bytes: int = 2048
    #: a parameter's description (the TXT record carries its first 240 characters)
    max_parameter_bytes: int = 2048
    #: one example intent of a tool (an intent is at most 4,096 bytes on the wire; examples are shorter)
    max_example_bytes: int = 1024
    #: a summary's description (the zone's own and each delegation's)
    max_summary_bytes: int = 4096
    #: one keyword of a summary
    max_keyword_bytes: int = 256
    #: a summary's corpus: text scorers index but answers never carry (``tooldns build`` puts the
    #: text of every tool beneath a child there)
    max_corpus_bytes: int = 16 * 2**20
    #: every other text: a tool's id, service, transport and ``vector_of``, a parameter's name and
    #: type, the SOA contact, the settings' texts
    max_text_bytes: int = 1024
