"""The walk a tree recommends, published by a zone at ``_walk.<origin>``: a pure codec, no I/O.

Whoever built a tree knows how it is best walked: K per depth, how many tools to ask of each leaf,
the beam, the embedding model its zones' vectors are of. A resolver knows none of it before its
first query, and its built-in defaults suit no tree in particular. So a zone (in practice the root,
``tools.``) publishes the walk it recommends as one TXT record at ``_walk.<origin>`` (an RFC 8552
underscore label, as ``_summary.<origin>``), its strings ``key=value`` pairs (:mod:`.txt`'s
convention), the format key first::

    _walk.tools. 3600 IN TXT "tooldns-walk=1" "k=6" "leaf-k=6" "best-leaf-k=10" "beam=6"
                             "model=multilingual-e5-small"

Keys (``docs/protocol.md``, section 6b):

* ``k`` (required): K per depth, comma-separated, the last repeating: 1 to :data:`MAX_DEPTHS`
  values, each 1 to :data:`MAX_K` (``k=5,3,2``);
* ``leaf-k``: tools asked of each leaf (1 to :data:`MAX_K`); left out, the first K;
* ``best-leaf-k``: tools asked of the leaf on the walk's best path (1 to :data:`MAX_K`);
* ``beam``: zones asked at most at each depth below the root (1 to :data:`MAX_BEAM`);
* ``model``: the embedding model whose vectors the zones score, named as the vector option names
  it (printable ASCII without spaces, 1 to 64 bytes, :mod:`.vector`);
* ``pages``: follow-up queries a resolution may ask of leaves whose tools all made its result, each
  for the tools ranked after those (the page option, :mod:`.page`; 1 to :data:`MAX_PAGES`);
* ``fusion``: BM25's share when the client fuses the tools of hybrid leaves
  (:mod:`tooldns.protocol.fusion`), the rest the cosine's: a decimal from 0 to 1 with at most three
  places (``fusion=0.6``); what suits the ``model``'s vectors.

Numbers are decimal, without sign or leading zero. Decoding tolerates what it does not know and is
strict about what it does: a key it does not know is skipped (a later version may add some), but a
known key with a malformed or out-of-range value, a missing ``k``, or a format other than ``1``
raise :class:`~tooldns.exceptions.PlanError` saying what is wrong; a client then walks with its
built-in settings and says why.

    >>> encode_plan(WalkPlan(k=(5, 3, 2), leaf_k=6))
    [b'tooldns-walk=1', b'k=5,3,2', b'leaf-k=6']
    >>> decode_plan([b'tooldns-walk=1', b'k=6', b'colour=blue', b'fusion=0.6'])
    WalkPlan(k=(6,), leaf_k=None, best_leaf_k=None, beam=None, model=None, pages=None, fusion=0.6)
    >>> plan_name("tools.")
    '_walk.tools.'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import PlanError
from .txt import decode_pairs, encode_pairs
from .vector import MAX_MODEL

#: the label under a zone's apex that owns the walk it publishes (RFC 8552 style, as ``_summary``)
PLAN_LABEL = "_walk"
#: the key of the record's first string, and the only format this module reads
FORMAT_KEY = "tooldns-walk"
FORMAT = "1"
#: the largest K, leaf K and best leaf K: what the intent option's K octet holds
MAX_K = 255
#: the most depths a K schedule names (a resolver walks 8 deep at most by default)
MAX_DEPTHS = 8
#: the largest beam a published walk may name (a bound for decoding; any beam past a depth's
#: zones is the same as none)
MAX_BEAM = 65535

#: the most follow-up pages a published walk may name
MAX_PAGES = 64

_NUMBER = re.compile(r"[1-9][0-9]{0,5}\Z", re.ASCII)
#: a share as ``fusion=`` writes it: 0 or 1, or a decimal between with at most three places
_SHARE = re.compile(r"(0(\.[0-9]{1,3})?|1(\.0{1,3})?)\Z", re.ASCII)


@dataclass(frozen=True)
class WalkPlan:
    """A walk a zone recommends: K per depth (an int is taken as one depth), and optionally the
    tools asked of each leaf, of the best path's leaf, the beam and the embedding model; None where
    the zone says nothing; the follow-up pages a resolution may ask (:mod:`.page`); and BM25's
    share in the client's fusion of hybrid leaves' tools. :class:`PlanError` when a value is out of
    range."""

    k: tuple[int, ...]
    leaf_k: int | None = None
    best_leaf_k: int | None = None
    beam: int | None = None
    model: str | None = None
    pages: int | None = None
    fusion: float | None = None

    def __post_init__(self) -> None:
        ks = self.k
        if isinstance(ks, int) and not isinstance(ks, bool):
            ks = (ks,)
        elif isinstance(ks, list):
            ks = tuple(ks)
        object.__setattr__(self, "k", ks)
        problem = (k_problem(ks) or count_problem(self.leaf_k, "leaf_k") or count_problem(self.best_leaf_k, "best_leaf_k")
                   or beam_problem(self.beam) or model_problem(self.model) or pages_problem(self.pages)
                   or fusion_problem(self.fusion))
        if problem:
            raise PlanError(problem)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def k_problem(ks) -> str | None:
    """What is wrong with *ks* as K per depth, or None."""
    if not isinstance(ks, tuple) or not all(map(_whole, ks)):
        return f"k must be whole numbers, one per depth, got {ks!r}"[:120]
    if not 1 <= len(ks) <= MAX_DEPTHS:
        return f"k names {len(ks)} depths; it must name 1 to {MAX_DEPTHS}"
    bad = next((k for k in ks if not 1 <= k <= MAX_K), None)
    if bad is not None:
        return f"k {bad} is out of range; each K must be from 1 to {MAX_K}"
    return None


def count_problem(value, what: str) -> str | None:
    """What is wrong with *value* as a leaf's number of tools (None: not given), or None."""
    if value is None or (_whole(value) and 1 <= value <= MAX_K):
        return None
    return f"{what} must be a whole number from 1 to {MAX_K}, got {value!r}"[:120]


def beam_problem(value) -> str | None:
    """What is wrong with *value* as a beam (None: not given), or None."""
    if value is None or (_whole(value) and 1 <= value <= MAX_BEAM):
        return None
    return f"beam must be a whole number from 1 to {MAX_BEAM}, got {value!r}"[:120]


def pages_problem(value) -> str | None:
    """What is wrong with *value* as follow-up pages (None: not given), or None."""
    if value is None or (_whole(value) and 1 <= value <= MAX_PAGES):
        return None
    return f"pages must be a whole number from 1 to {MAX_PAGES}, got {value!r}"[:120]


def fusion_problem(value) -> str | None:
    """What is wrong with *value* as BM25's share in the client's fusion (None: not given), or None:
    a number from 0 to 1 in steps of a thousandth (what ``fusion=`` can write)."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1 \
            or abs(value * 1000 - round(value * 1000)) > 1e-6:
        return f"fusion must be a number from 0 to 1 with at most three decimal places, got {value!r}"[:120]
    return None


def _share(value: float) -> str:
    """*value* (a valid fusion) as ``fusion=`` writes it: ``0.6``, ``1``, ``0.125``."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def model_problem(model) -> str | None:
    """What is wrong with *model* as an embedding model's name (None: not given), or None: the
    vector option's rule, printable ASCII without spaces, 1 to 64 bytes."""
    if model is None:
        return None
    if not isinstance(model, str):
        return f"model must be text, got {type(model).__name__}"
    bad = next((i for i, ch in enumerate(model) if not 0x21 <= ord(ch) <= 0x7E), None)
    if bad is not None:
        return (f"model name {model[:64]!r} has U+{ord(model[bad]):04X} at position {bad}; "
                "use printable ASCII without spaces")
    if not 1 <= len(model) <= MAX_MODEL:
        return f"model name is {len(model)} bytes; it must be 1 to {MAX_MODEL}"
    return None


def plan_name(origin: str) -> str:
    """The owner name of the walk *origin* publishes."""
    return f"{PLAN_LABEL}.{origin}"


def _pairs(plan: WalkPlan) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = [("k", ",".join(map(str, plan.k)))]
    for key, value in (("leaf-k", plan.leaf_k), ("best-leaf-k", plan.best_leaf_k), ("beam", plan.beam),
                       ("model", plan.model), ("pages", plan.pages)):
        if value is not None:
            pairs.append((key, value))
    if plan.fusion is not None:
        pairs.append(("fusion", _share(plan.fusion)))
    return pairs


def encode_plan(plan: WalkPlan) -> list[bytes]:
    """The TXT strings of *plan*: the format first, then ``k`` and each setting given, in that order."""
    # encode_pairs writes its own format key first ("tooldns=1"): this record has its own
    return [f"{FORMAT_KEY}={FORMAT}".encode("ascii"), *encode_pairs(_pairs(plan))[1:]]


def plan_text(plan: WalkPlan) -> str:
    """*plan* as its strings read, without the format: ``k=5,3,2 leaf-k=6`` (traces, logs)."""
    return " ".join(f"{key}={value}" for key, value in _pairs(plan))


def _shown(value: str) -> str:
    """A value as an error message quotes it: printable, cut short (it is a server's)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in value[:40])
    return repr(text + ("..." if len(value) > 40 else ""))


def _number(pairs: dict[str, str], key: str, most: int) -> int | None:
    value = pairs.get(key)
    if value is None:
        return None
    if not _NUMBER.match(value) or int(value) > most:
        raise PlanError(f"published walk: {key}={_shown(value)} is not a whole number from 1 to {most}")
    return int(value)


def _fusion(pairs: dict[str, str]) -> float | None:
    value = pairs.get("fusion")
    if value is None:
        return None
    if not _SHARE.match(value):
        raise PlanError(f"published walk: fusion={_shown(value)} is not a share from 0 to 1 "
                        "(a decimal with at most three places)")
    return float(value)


def decode_plan(strings: Sequence[bytes]) -> WalkPlan:
    """The walk in one TXT record's *strings*; :class:`PlanError` saying what is wrong."""
    pairs = decode_pairs(strings)
    version = pairs.get(FORMAT_KEY)
    if version is None:
        raise PlanError(f"no '{FORMAT_KEY}=' string: not a published walk")
    if version != FORMAT:
        raise PlanError(f"published walk format {_shown(version)} is not {FORMAT!r}")
    if "k" not in pairs:
        raise PlanError("published walk has no 'k=' (K per depth)")
    parts = pairs["k"].split(",")
    if len(parts) > MAX_DEPTHS:
        raise PlanError(f"published walk: k names {len(parts)} depths; it must name 1 to {MAX_DEPTHS}")
    ks = tuple(_number({"k": part}, "k", MAX_K) for part in parts)
    model = pairs.get("model")
    problem = model_problem(model)
    if problem:
        raise PlanError(f"published walk: {problem}")
    return WalkPlan(k=ks, leaf_k=_number(pairs, "leaf-k", MAX_K), best_leaf_k=_number(pairs, "best-leaf-k", MAX_K),
                    beam=_number(pairs, "beam", MAX_BEAM), model=model, pages=_number(pairs, "pages", MAX_PAGES),
                    fusion=_fusion(pairs))


def decode_plan_rrset(records: Sequence[Sequence[bytes]]) -> WalkPlan:
    """The walk of the TXT RRset at ``_walk.<origin>`` (each record its strings): its one record
    carrying ``tooldns-walk=``, others (not ToolDNS's) skipped; :class:`PlanError` when none or
    several carry it, or that one is malformed."""
    ours = [strings for strings in records
            if any(bytes(s).startswith(FORMAT_KEY.encode("ascii") + b"=") for s in strings)]
    if not ours:
        raise PlanError(f"no TXT record with '{FORMAT_KEY}=': not a published walk")
    if len(ours) > 1:
        raise PlanError(f"{len(ours)} TXT records with '{FORMAT_KEY}='; a zone publishes one walk")
    return decode_plan(ours[0])
