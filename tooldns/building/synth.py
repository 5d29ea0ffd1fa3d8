"""Synthetic tool catalogs of any size (and queries with known answers) made from a real catalog.

To measure trees at 100,000 or 1,000,000 tools when the real catalog (ToolRet's
``services.en.json``) has 1,839. Each synthetic tool recombines real ones: a *source* tool and
two *peers*, the source's nearest neighbours by TF-IDF cosine (tools of a similar category).

* name: the source's name with one word swapped for a word of a peer's name (and, every other
  tool, a word of the second peer's name added), in the source's style (``getWeather``,
  ``get_weather``, ``Get Weather``);
* description: the source's first sentence, maybe one more of its sentences, one sentence of the
  first peer and, every other tool, one of the second peer;
* parameters: the source's, each kept with probability 0.7 (at least one), plus one of the
  first peer's;
* id: ``synth_<n>``; ``metadata.synth`` names the source and the peers.

Sources are taken in turn (a fresh shuffle each round), so every real tool has about
``n / 1839`` variants. Queries (:func:`synth_queries`), two kinds in equal numbers:

* ``dev``: a real query (ToolRet's ``queries.dev.en.json``, say) whose correct
  tools were sources; its correct tools are every synthetic tool made from them;
* ``own``: the words of one synthetic tool, paraphrased by dropping and shuffling (about two
  thirds of its name's words and six words of its description); its correct tool is that tool.

The same seed gives the same tools and queries; :func:`synth_tools` yields tools as they are made,
so a million of them need little memory. ``scripts/bench/synth_catalog.py`` writes them to files::

    python scripts/bench/synth_catalog.py --source ../shared/data/toolret/services.en.json \\
        --dev-queries ../shared/data/toolret/queries.dev.en.json --n 100000 \\
        --out /tmp/synth100k.json --queries-out /tmp/synth100k.queries.json

    >>> tools, queries = synth_catalog(entries, 300, seed=7, n_queries=40)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterator

from ..scoring.tokenize import STOPWORDS, tokenize

#: peers a source tool draws words, sentences and parameters from: its nearest neighbours
PEERS = 10
_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9'\"(])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9']{2,}")


@dataclass
class Source:
    """A real tool taken apart: what synthetic tools are made of."""

    id: str
    words: list[str]
    style: str  # "snake", "space" or "camel"
    sentences: list[str]
    params: dict
    url: str


def take_apart(entry: dict) -> Source:
    name = str(entry.get("name") or entry["id"])
    style = "snake" if "_" in name else "space" if " " in name else "camel"
    words = _NAME_WORD.findall(name) or [name]
    desc = str(entry.get("description") or name).strip()
    sentences = [s.strip() for s in _SENTENCE.split(desc) if s.strip()] or [desc]
    meta = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    schema = meta.get("inputSchema") if isinstance(meta.get("inputSchema"), dict) else {}
    params = schema.get("properties") if isinstance(schema.get("properties"), dict) else schema
    params = {str(k): v for k, v in params.items() if isinstance(v, dict)}
    return Source(str(entry["id"]), words, style, sentences, params, str(meta.get("url") or ""))


def join_name(words: list[str], style: str) -> str:
    if style == "snake":
        return "_".join(w.lower() for w in words)
    if style == "space":
        return " ".join(words)
    first = words[0]
    return first + "".join(w[:1].upper() + w[1:] for w in words[1:])


def nearest_peers(sources: list[Source], peers: int = PEERS) -> list[list[int]]:
    """For each source, the indices of its *peers* nearest other sources (TF-IDF cosine)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [" ".join([*s.words, *s.sentences, *s.params]) for s in sources]
    x = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None, sublinear_tf=True).fit_transform(texts)
    out = []
    for start in range(0, len(sources), 2000):
        sims = (x[start:start + 2000] @ x.T).toarray()
        for row, i in enumerate(range(start, min(start + 2000, len(sources)))):
            sims[row, i] = -1.0  # not its own peer
            order = np.argsort(-sims[row], kind="stable")[:peers]
            out.append([int(j) for j in order] if len(sources) > 1 else [i])
    return out


def synth_tool(n: int, src: Source, peer: Source, second: Source, rng: random.Random) -> dict:
    """Synthetic tool number *n*: *src* recombined with words, a sentence and a parameter of two peers."""
    words = list(src.words)
    swaps = [w for w in peer.words if w.isalpha() and w.lower() not in {x.lower() for x in words}]
    if swaps:  # a word for a word (a letter word: a name of digits alone would make no DNS label)
        at = rng.randrange(len(words))
        words[at] = rng.choice(swaps) if words[at].isalpha() or len(words) == 1 else words[at]
    extra = [w for w in second.words if w.isalpha() and w.lower() not in {x.lower() for x in words}]
    if n % 2 and extra:
        words.insert(rng.randrange(len(words) + 1), rng.choice(extra))
    sentences = [src.sentences[0]]
    if len(src.sentences) > 1 and rng.random() < 0.5:
        sentences.append(rng.choice(src.sentences[1:]))
    sentences.append(rng.choice(peer.sentences))
    if n % 2 == 0:
        sentences.append(rng.choice(second.sentences))
    params = {k: v for k, v in src.params.items() if rng.random() < 0.7}
    if src.params and not params:
        key = rng.choice(sorted(src.params))
        params[key] = src.params[key]
    if peer.params:
        key = rng.choice(sorted(peer.params))
        params.setdefault(key, peer.params[key])
    metadata = {"inputSchema": params, "synth": {"source": src.id, "peers": [peer.id, second.id]}}
    if src.url:
        metadata["url"] = src.url
    return {"id": f"synth_{n}", "name": join_name(words, src.style), "description": " ".join(dict.fromkeys(sentences)),
            "metadata": metadata}


def synth_tools(entries: list[dict], n: int, seed: int = 0) -> Iterator[tuple[int, dict]]:
    """*n* synthetic tools made from the catalog *entries*, as (source index, tool); deterministic for *seed*."""
    sources = [take_apart(e) for e in entries]
    if not sources:
        raise ValueError("the source catalog has no tools")
    peers = nearest_peers(sources)
    rng = random.Random(seed)
    order: list[int] = []
    for i in range(n):
        if not order:
            order = list(range(len(sources)))
            rng.shuffle(order)
        s = order.pop()
        near = peers[s]
        a, b = rng.sample(near, 2) if len(near) > 1 else (near[0], near[0])
        yield s, synth_tool(i, sources[s], sources[a], sources[b], rng)


def paraphrase(tool: dict, rng: random.Random) -> str:
    """The words of *tool*, dropped and shuffled: about two thirds of its name's words, six of its description."""
    name_words = [w.lower() for w in _NAME_WORD.findall(tool["name"]) if w.lower() not in STOPWORDS]
    kept = [w for w in name_words if rng.random() < 0.67] or name_words[:1]
    # as written (``PyPI`` stays one word to the tokenizer's camel-case split), once each
    firsts = {}
    for w in _WORD.findall(tool["description"]):
        if w.lower() not in STOPWORDS:
            firsts.setdefault(w.lower(), w)
    desc_words = list(firsts.values())
    kept += rng.sample(desc_words, min(6, len(desc_words)))
    rng.shuffle(kept)
    return " ".join(kept)


def synth_queries(dev_queries: list[dict], entries: list[dict], made: list[int], own: dict[int, dict],
                  n_queries: int, seed: int = 0) -> list[dict]:
    """Queries with known answers for a catalog made by :func:`synth_tools`: *made* is the source index of
    each synthetic tool, *own* the tools sampled for ``own`` queries (by number)."""
    rng = random.Random(seed + 1)
    index = {str(e["id"]): i for i, e in enumerate(entries)}
    variants: dict[int, list[str]] = {}
    for n, s in enumerate(made):
        variants.setdefault(s, []).append(f"synth_{n}")
    usable = [q for q in dev_queries
              if any(variants.get(index.get(str(c["id"]), -1)) for c in q.get("correct_tools", []))]
    out = []
    for q in rng.sample(usable, min(len(usable), n_queries - n_queries // 2)):
        correct = [t for c in q["correct_tools"] for t in variants.get(index.get(str(c["id"]), -1), [])]
        out.append({"id": f"dev-{q['id']}", "kind": "dev", "query": q["query"],
                    "correct_tools": [{"id": t} for t in correct]})
    for n in sorted(own):
        out.append({"id": f"own-{n}", "kind": "own", "query": paraphrase(own[n], rng),
                    "correct_tools": [{"id": f"synth_{n}"}]})
    return out


def own_sample(n_tools: int, n_queries: int, seed: int) -> set[int]:
    """Which synthetic tools get an ``own`` query."""
    return set(random.Random(seed + 2).sample(range(n_tools), min(n_tools, n_queries // 2)))


def synth_catalog(entries: list[dict], n: int, seed: int = 0, dev_queries: list[dict] | None = None,
                  n_queries: int = 0) -> tuple[list[dict], list[dict]]:
    """*n* synthetic tools and *n_queries* queries about them, in memory (small catalogs: tests)."""
    chosen = own_sample(n, n_queries, seed)
    tools, made = [], []
    for s, tool in synth_tools(entries, n, seed):
        tools.append(tool)
        made.append(s)
    own = {i: tools[i] for i in chosen}
    return tools, synth_queries(dev_queries or [], entries, made, own, n_queries, seed)


#: the longest intent a distinct stream holds, in UTF-8 octets: what one datagram carries as the resolver sends it
MAX_INTENT = 700


def distinct_intents(base: list[str], count: int, seed: int = 0) -> list[str]:
    """*count* different intents: *base* (less repeats and intents over :data:`MAX_INTENT` octets),
    then each the first half of one intent's words and the second half of another's, pairs drawn
    at random (*seed*), and its number (" 857", " 858" ...). Such an intent is new to every cache a
    server keeps: its packet cache; its word caches, which meet one word never seen before (as
    free text holds some: 88 % of ToolRet's odd-half dev queries hold a word none of the even half
    does, 5 on average); and what a zone keeps per list of children it refers to, where a copy of
    an intent already sent, numbered or not, is ranked, and answered, as that intent was."""
    base = list(dict.fromkeys(t for t in base if len(t.encode("utf-8")) <= MAX_INTENT))
    if not base:
        return []
    texts = dict.fromkeys(base[:count])
    rng, words, number = random.Random(seed), [t.split() for t in base], len(base)
    while len(texts) < count:
        a, b = rng.sample(words, 2) if len(words) > 1 else (words[0], words[0])
        parts, number = a[:len(a) // 2] + b[len(b) // 2:] + [str(number)], number + 1
        while len(" ".join(parts).encode("utf-8")) > MAX_INTENT:
            del parts[-2]
        texts.setdefault(" ".join(parts))
    return list(texts)
