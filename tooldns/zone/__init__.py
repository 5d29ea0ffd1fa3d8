"""Zone data: what one node of the `.tools` tree holds (:mod:`.model`) and its YAML file
(:mod:`.zonefile`: ``load_zone`` / ``parse_zone`` read with ``file:line`` errors, ``dump_zone``
writes, one schema and one set of defaults for both; :mod:`.limits`: the sizes a zone file may
reach, so that none can exhaust a server).

    >>> from tooldns.zone import dump_zone, load_zone, parse_zone
    >>> zone = load_zone("zones/weather.tools.yaml")
    >>> parse_zone(dump_zone(zone)) == zone
    True
"""

from .limits import ZoneLimits
from .model import SOA, Delegation, NameServer, Parameter, Settings, Summary, Tool, WalkPlan, Zone
from .zonefile import dump_zone, load_zone, parse_zone

__all__ = ["Delegation", "NameServer", "Parameter", "SOA", "Settings", "Summary", "Tool", "WalkPlan", "Zone",
           "ZoneLimits", "dump_zone", "load_zone", "parse_zone"]
