"""What the benchmark scripts share: where the ToolRet data is, a ``tooldns serve`` process to measure, and percentiles."""

from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the ToolRet benchmark's folder (README there), as the tests find it: TOOLDNS_DATA, or ../shared/data/toolret
DATA = Path(os.environ.get("TOOLDNS_DATA", ROOT.parent / "shared" / "data" / "toolret"))


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


class CachedEmbedder:
    """An embedder whose vectors are kept on disk (*directory*, one ``.npy`` per text and side, named by
    the SHA-256 of the model, the side and the text): a benchmark that builds the same catalog many
    times (cross-validation, sweeps) embeds each text once. The vectors are the embedder's own, so
    every figure is what the embedder alone gives; only the time to make them is saved."""

    def __init__(self, embedder, directory) -> None:
        self.inner, self.directory = embedder, Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.model, self.dim, self.remote = embedder.model, embedder.dim, getattr(embedder, "remote", False)

    def _path(self, side: str, text: str) -> Path:
        import hashlib

        key = hashlib.sha256(f"{self.model}\0{side}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / key[:2] / f"{key}.npy"

    def _cached(self, side: str, texts, embed) -> list[list[float]]:
        import numpy as np

        texts = list(texts)
        out: dict[int, list[float]] = {}
        todo = []
        for i, text in enumerate(texts):
            path = self._path(side, text)
            if path.exists():
                out[i] = np.load(path).tolist()
            else:
                todo.append(i)
        if todo:
            for i, vector in zip(todo, embed([texts[i] for i in todo])):
                path = self._path(side, texts[i])
                path.parent.mkdir(exist_ok=True)
                np.save(path, np.asarray(vector, dtype=np.float64))
                out[i] = list(vector)
        return [out[i] for i in range(len(texts))]

    def embed(self, texts):
        return self._cached("passage", texts, self.inner.embed)

    def embed_queries(self, texts):
        return self._cached("query", texts, self.inner.embed_queries)

    def embed_one(self, text):
        return self.embed([text])[0]

    def embed_query(self, text):
        return self.embed_queries([text])[0]

    def covers(self, text) -> bool:
        return self.inner.covers(text)

    def counters(self):
        return self.inner.counters()


def percentile(values, p: float) -> float:
    """The nearest-rank *p*-th percentile of *values* (0 for none)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else 0.0


def start_servers(zones: str, port: int, answer_cache: int = 4096, extra: list[str] | tuple[str, ...] = (),
                  rate_limit: bool = False, wrapper: list[str] | tuple[str, ...] = ()) -> tuple[subprocess.Popen, tuple[str, int]]:
    """``tooldns serve ZONES`` (with *extra* arguments) in its own process; returns it and the root server's (address, port).

    Response rate limiting is off unless *rate_limit*: a benchmark is one client flooding on purpose.
    *wrapper* runs the process under another command (``valgrind --tool=callgrind ...``).
    """
    switch = [] if rate_limit else ["--no-rate-limit"]
    proc = subprocess.Popen([*wrapper, sys.executable, "-m", "tooldns.cli", "serve", str(zones), "--port", str(port),
                             "--answer-cache", str(answer_cache), *switch, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        match = re.search(r"root zone on (\S+):(\d+);", line)
        if match:
            # read what the servers log from now on: a pipe nobody reads fills (64 KiB) and then stops them at
            # their next log line (a zone of 703 children without their files logs that much at once)
            proc.log_tail = collections.deque(lines[-50:], maxlen=50)
            proc.log_reader = threading.Thread(target=_drain, args=(proc.stdout, proc.log_tail), daemon=True)
            proc.log_reader.start()
            return proc, (match.group(1), int(match.group(2)))
        if not line:
            proc.wait(10)
            raise SystemExit("servers did not start:\n" + "".join(lines[-20:]))


def _drain(stream, tail: collections.deque) -> None:
    """Read *stream* to its end, keeping its last lines in *tail*."""
    for line in stream:
        tail.append(line)


def stop_servers(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
