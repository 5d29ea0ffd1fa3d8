"""The LLM-built category tree (Algorithm 1 of the A2X paper), as a :class:`TreeBuilder`.

Breadth-first from a root holding every tool. For each node to split:

1. design categories: from the tools' descriptions, or, for a node of more than
   ``keyword_threshold`` (500) tools, from keywords extracted in batches of ``keyword_batch`` (50)
   tools a call;
2. at the root only, check the candidate top-level categories against typical agent goals and
   revise them;
3. up to ``refine_rounds`` (3) rounds of assign-and-refine: every tool is assigned to its
   categories (``assign_batch`` tools a call, calls in parallel); tools that fit none, or more
   than a third of the categories, are collected and the categories refined with them in view;
4. categories with ``min_category`` (2) or fewer tools are removed and their tools go back to the
   parent; children with more than ``max_leaf`` (40) tools and depth below ``max_depth`` (3) are
   split again.

Calls run on a bounded pool (``workers``, 8), progress is reported, and every request is cached on
disk keyed by (model, messages): an interrupted build run again pays only for calls not yet made.
``cost`` counts calls made and cached, and prompt and completion tokens. The result is the same
:class:`Category` tree the offline builder makes, so ``build_zones`` writes it the same way.

    tooldns build services.json --llm --llm-model gpt-4o-mini --out built/ --llm-cache .llm-cache/
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..chat import ChatModel, extract_json
from ..zone.zonefile import write_atomically
from .catalog import Catalog
from .trees import Category, Progress, _quiet, slug, unique_label

TYPICAL_GOALS = [
    "check the weather or a forecast", "look up a stock price or convert a currency", "book a flight or hotel",
    "find a place, an address or directions", "search the web, news or papers", "send an email or a message",
    "manage a calendar or tasks", "read or edit documents and files", "shop, compare or track products",
    "get sports, music, movie or game information", "manage code, software or data", "health, food or fitness",
]

SYSTEM = "You organise software tools into categories for a tool-discovery directory. Reply with JSON only."


@dataclass
class Cost:
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_calls: int = 0

    def text(self) -> str:
        return (f"{self.calls} LLM calls made ({self.cached_calls} more answered from the cache, "
                f"{self.failed_calls} failed), {self.prompt_tokens} prompt and {self.completion_tokens} "
                f"completion tokens")


def _categories(data: dict, limit: int) -> list[tuple[str, str]]:
    out, seen = [], set()
    for item in data.get("categories", []):
        if not isinstance(item, dict):
            continue
        name = str(item.get("name", "")).strip()
        if name and name.lower() not in seen:
            seen.add(name.lower())
            out.append((name, str(item.get("description", "")).strip()))
    if not out:
        raise ValueError("no categories in the answer")
    return out[:limit]


class LLMTreeBuilder:
    def __init__(self, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 cache_dir: str | os.PathLike | None = None, workers: int = 8, max_children: int = 20,
                 max_leaf: int = 40, max_depth: int = 3, keyword_threshold: int = 500, keyword_batch: int = 50,
                 assign_batch: int = 20, refine_rounds: int = 3, min_category: int = 2, timeout: float = 120.0,
                 client=None) -> None:
        self.chat = ChatModel(model=model, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=2,
                              client=client)
        self.model = self.chat.model
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.workers, self.max_children, self.max_leaf, self.max_depth = workers, max_children, max_leaf, max_depth
        self.keyword_threshold, self.keyword_batch = keyword_threshold, keyword_batch
        self.assign_batch, self.refine_rounds, self.min_category = assign_batch, refine_rounds, min_category
        self._cached_calls = 0
        self._lock = threading.Lock()

    @property
    def cost(self) -> Cost:
        """What the build has cost so far: the model's counts and the calls the disk cache answered."""
        return Cost(cached_calls=self._cached_calls, **self.chat.counters())

    # -- one cached call --
    def _call(self, task: str, prompt: str) -> dict:
        messages = [{"role": "system", "content": f"{SYSTEM} TASK: {task}"}, {"role": "user", "content": prompt}]
        key = hashlib.sha256(json.dumps([self.model, messages], ensure_ascii=False).encode()).hexdigest()
        path = self.cache_dir / f"{key}.json" if self.cache_dir else None
        if path is not None and path.exists():
            with self._lock:
                self._cached_calls += 1
            return extract_json(json.loads(path.read_text(encoding="utf-8"))["content"], object_only=True)
        content = self.chat.complete(messages, temperature=0) or ""
        data = extract_json(content, object_only=True)  # an unparsable answer is not cached: asked again next time
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # atomic: an interrupted build never leaves half an entry, nor a temporary file
            write_atomically(path, json.dumps({"messages": messages, "content": content}, ensure_ascii=False))
        return data

    def _parallel(self, fn, items: list) -> list:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(fn, items))

    # -- the algorithm --
    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category:
        self.catalog = catalog
        root = Category("", "All tools", "Every tool of the catalog")
        queue = [(root, list(range(len(catalog.tools))), 1)]
        while queue:  # breadth-first
            node, members, depth = queue.pop(0)
            if len(members) <= self.max_leaf or depth > self.max_depth:
                node.tools = sorted(set(node.tools) | set(members))
                continue
            progress(f"LLM: splitting {node.label or 'the root'} ({len(members)} tools); {self.cost.text()}")
            groups, leftover = self._split(members, is_root=depth == 1, progress=progress)
            node.tools = sorted(set(node.tools) | set(leftover))
            taken: set[str] = set()
            for (name, description), group in groups:
                child = Category(unique_label(slug(name, 30), taken, f"c{len(taken) + 1}"), name, description)
                node.children.append(child)
                queue.append((child, group, depth + 1))
        progress(f"LLM tree done: {self.cost.text()}")
        return root

    def _tool_line(self, i: int, n: int) -> str:
        t = self.catalog.tools[i]
        return f"[{n}] {t.names[0]}: {t.description[:200]}"

    def _design(self, members: list[int], is_root: bool) -> list[tuple[str, str]]:
        limit = self.max_children
        if len(members) > self.keyword_threshold:
            batches = [members[i:i + self.keyword_batch] for i in range(0, len(members), self.keyword_batch)]

            def keywords(batch: list[int]) -> list[str]:
                prompt = ("Give 3 to 5 short keywords for the function of each tool. Reply "
                          '{"keywords": {"<tool number>": ["keyword", ...]}}\n'
                          + "\n".join(self._tool_line(i, n) for n, i in enumerate(batch)))
                try:
                    data = self._call("keywords", prompt)
                except Exception:
                    return []
                values = data.get("keywords", {})
                return [str(k) for v in (values.values() if isinstance(values, dict) else []) if isinstance(v, list)
                        for k in v]

            words: dict[str, int] = {}
            for batch_words in self._parallel(keywords, batches):
                for w in batch_words:
                    words[w.lower()] = words.get(w.lower(), 0) + 1
            material = ", ".join(w for w, _ in sorted(words.items(), key=lambda x: (-x[1], x[0]))[:400])
            prompt = (f"Design 2 to {limit} categories that divide tools with these keywords by function. Reply "
                      '{"categories": [{"name": "...", "description": "..."}]}\nKeywords: ' + material)
        else:
            prompt = (f"Design 2 to {limit} categories that divide these tools by function. Reply "
                      '{"categories": [{"name": "...", "description": "..."}]}\n'
                      + "\n".join(self._tool_line(i, n) for n, i in enumerate(members)))
        categories = _categories(self._call("design", prompt), limit)
        if is_root:
            prompt = ("Candidate top-level categories:\n" + "\n".join(f"- {n}: {d}" for n, d in categories)
                      + "\nTypical agent goals:\n" + "\n".join(f"- {g}" for g in TYPICAL_GOALS)
                      + f"\nRevise the categories (at most {limit}) so that every goal a tool here serves has one. "
                      'Reply {"categories": [{"name": "...", "description": "..."}]}')
            try:
                categories = _categories(self._call("validate", prompt), limit)
            except Exception:
                pass  # keep the designed categories
        return categories

    def _assign(self, members: list[int], categories: list[tuple[str, str]]) -> dict[int, list[int]]:
        listing = "\n".join(f"({c}) {n}: {d}" for c, (n, d) in enumerate(categories))
        batches = [members[i:i + self.assign_batch] for i in range(0, len(members), self.assign_batch)]

        def assign(batch: list[int]) -> dict[int, list[int]]:
            prompt = ("Categories:\n" + listing + "\nFor each tool, list the numbers of the categories it belongs "
                      "to (one or more; none if none fits). Reply "
                      '{"assignments": {"<tool number>": [category numbers]}}\nTools:\n'
                      + "\n".join(self._tool_line(i, n) for n, i in enumerate(batch)))
            out: dict[int, list[int]] = {i: [] for i in batch}
            try:
                data = self._call("assign", prompt)
            except Exception:
                return out  # unassigned: collected for refinement, and kept at the parent at worst
            values = data.get("assignments", {})
            for key, cats in (values.items() if isinstance(values, dict) else []):
                try:
                    n = int(key)
                except (TypeError, ValueError):
                    continue
                if 0 <= n < len(batch) and isinstance(cats, list):
                    valid = []
                    for c in cats:
                        try:
                            c = int(c)
                        except (TypeError, ValueError):
                            continue
                        if 0 <= c < len(categories) and c not in valid:
                            valid.append(c)
                    out[batch[n]] = valid
            return out

        merged: dict[int, list[int]] = {}
        for part in self._parallel(assign, batches):
            merged.update(part)
        return merged

    def _split(self, members: list[int], is_root: bool, progress: Progress):
        categories = self._design(members, is_root)
        assignment: dict[int, list[int]] = {}
        for round_no in range(1, self.refine_rounds + 1):
            assignment = self._assign(members, categories)
            too_many = max(2, len(categories) // 3)
            misfits = [i for i, cats in assignment.items() if not cats or len(cats) > too_many]
            progress(f"LLM: round {round_no}: {len(categories)} categories, {len(misfits)} tools fit none or too many")
            if not misfits or round_no == self.refine_rounds:
                break
            prompt = ("Categories:\n" + "\n".join(f"- {n}: {d}" for n, d in categories)
                      + f"\nThese tools fit no category or too many. Revise the categories (at most "
                      f"{self.max_children}: rename, split, merge or add) so each fits one or two. Reply "
                      '{"categories": [{"name": "...", "description": "..."}]}\nTools:\n'
                      + "\n".join(self._tool_line(i, n) for n, i in enumerate(misfits[:100])))
            try:
                refined = _categories(self._call("refine", prompt), self.max_children)
            except Exception:
                break
            if refined == categories:  # nothing changed: assigning again would give the same answer
                break
            categories = refined
        groups: list[list[int]] = [[] for _ in categories]
        too_many = max(2, len(categories) // 3)
        leftover = []
        for i, cats in assignment.items():
            if not cats or len(cats) > too_many:
                leftover.append(i)
            for c in cats[:too_many]:
                groups[c].append(i)
        kept = []
        for (category, group) in zip(categories, groups):
            if len(group) <= self.min_category:
                leftover.extend(group)  # too small: its tools go back to the parent
            else:
                kept.append((category, sorted(group)))
        placed = {i for _, g in kept for i in g}
        leftover = sorted(set(leftover) - placed)
        if len(kept) < 2:  # nothing to split on: the node keeps its tools
            return [], sorted(members)
        return kept, leftover
