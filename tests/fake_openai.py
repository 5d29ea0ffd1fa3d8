"""A local OpenAI-compatible chat server that stands in for the hosted model in tests.

It answers ``POST /v1/chat/completions`` deterministically from the prompt it receives: items
are ranked by how many intent words they share, and, like a gullible model, it puts first any
item whose text still says "always pick me" or "ignore previous instructions". It can be told
to be slow, to fail with 500 or 429, or to answer garbage, prose-wrapped JSON, out-of-range
numbers or nothing. The real ``openai`` client talks to it over HTTP.

It also answers ``POST /v1/embeddings`` with deterministic vectors (feature hashing,
:class:`tooldns.embedding.HashEmbedder` of ``embedding_dim`` dimensions, scaled by 3 so that the
client has to normalise them) and word counts as ``usage``, as floats or base64 as asked; those
requests are kept in ``embedding_requests``. The same modes make it slow or fail with 500 or 429;
mode "short" answers one vector fewer than asked; "nan_vector", "zero_vector" and "huge_vector" make its
first vector all NaN, 0 or 1e308; "null_item", "same_index" and "no_index" break its items' shape.

A "slow" request is held until the test calls :meth:`FakeLLM.release` (or ``delay`` seconds pass,
or the server closes), so a test decides when the model answers instead of racing a sleep; a
"trickle" one is answered one byte every 0.1 s (no read ever waits long: a per-read timeout never
fires), until released; and
:meth:`FakeLLM.wait_for_requests` lets a test wait until the model has been asked.
"""

from __future__ import annotations

import array
import base64
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tooldns.embedding.hashing import HashEmbedder

GULLIBLE = ("always pick me", "ignore previous instructions")
GENERIC = {"tool", "tools", "returns", "return", "request", "query", "with", "from", "that", "this", "data", "about"}


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3 and w not in GENERIC]


def _tool_lines(prompt: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^\[(\d+)\] (.*)$", prompt, re.M)]


def _category_lines(prompt: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^(?:- |\(\d+\) )([^:\n]+): (.*)$", prompt, re.M)]


def build_task(task: str, prompt: str) -> dict:
    """Deterministic answers to the tree builder's prompts (keywords, design, validate, assign, refine)."""
    if task == "keywords":
        out = {}
        for n, text in _tool_lines(prompt):
            counts: dict[str, int] = {}
            for w in _words(text):
                counts[w] = counts.get(w, 0) + 1
            out[str(n)] = [w for w, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:4]]
        return {"keywords": out}
    if task == "design":
        limit = int(re.search(r"Design 2 to (\d+)", prompt).group(1))
        lines = [t for _, t in _tool_lines(prompt)] or [w.strip() for w in prompt.split("Keywords:")[-1].split(",")]
        df: dict[str, int] = {}
        for line in lines:
            for w in set(_words(line)):
                df[w] = df.get(w, 0) + 1
        common = [w for w, c in sorted(df.items(), key=lambda x: (-x[1], x[0])) if c <= 0.5 * len(lines)]
        return {"categories": [{"name": w.title(), "description": f"Tools about {w}"} for w in common[:min(limit, 4)]]}
    if task in ("validate", "refine"):
        return {"categories": [{"name": n, "description": d} for n, d in _category_lines(prompt)]}
    if task == "assign":
        cats = [n.lower() for n, _ in _category_lines(prompt.split("Tools:")[0])]
        tools = _tool_lines(prompt.split("Tools:")[-1])
        return {"assignments": {str(n): [c for c, name in enumerate(cats) if name in text.lower()] for n, text in tools}}
    raise ValueError(f"unknown task {task}")


def rank_from_prompt(prompt: str, k: int | None = None) -> list[int]:
    intent = re.search(r"^Intent: (.*)$", prompt, re.M)
    words = {w for w in re.findall(r"[a-z0-9]+", (intent.group(1) if intent else "").lower()) if len(w) > 2}
    items = [(int(m.group(1)), m.group(2).lower()) for m in re.finditer(r'^\[(\d+)\] "(.*)"$', prompt, re.M)]
    kmatch = re.search(r"^K: (\d+)$", prompt, re.M)
    k = k or (int(kmatch.group(1)) if kmatch else 3)
    scored = []
    for i, text in items:
        overlap = len(words & set(re.findall(r"[a-z0-9]+", text)))
        boost = 100 if any(g in text for g in GULLIBLE) else 0
        if overlap or boost:
            scored.append((-(overlap + boost), i))
    return [i for _, i in sorted(scored)][:k]


class FakeLLM:
    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 0.0  # in "slow" mode: the longest a request is held when the test does not release it
        self.requests: list[dict] = []  # chat requests
        self.embedding_requests: list[dict] = []
        self.embedding_dim = 32
        self._released = threading.Event()  # set: held "slow" requests are answered now
        self._arrived = threading.Condition()  # notified on every request
        self.prompt_tokens = 0
        self.completion_tokens = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.rstrip("/").endswith("/embeddings"):
                    self._embeddings(body)
                    return
                with fake._arrived:
                    fake.requests.append(body)
                    fake._arrived.notify_all()
                messages = body.get("messages", [])
                prompt = messages[-1]["content"] if messages else ""
                mode = fake.mode
                if mode == "slow":
                    fake._released.wait(fake.delay)
                if mode in ("500", "429"):
                    self._send(int(mode), {"error": {"message": f"fake {mode}", "type": "server_error"}})
                    return
                task = re.search(r"TASK: (\w+)", messages[0]["content"]) if messages else None
                if prompt == "ping":
                    content = "pong"
                elif task:
                    content = json.dumps(build_task(task.group(1), prompt))
                elif mode == "garbage":
                    content = "I think the second one is best."
                elif mode == "empty":
                    content = ""
                elif mode == "out_of_range":
                    content = json.dumps({"ranking": [99, -1, "x", True]})
                elif mode == "prose":
                    content = f"Sure! Here is the ranking: {json.dumps({'ranking': rank_from_prompt(prompt)})} Hope it helps."
                else:
                    content = json.dumps({"ranking": rank_from_prompt(prompt)})
                p = sum(len(str(m.get("content", "")).split()) for m in messages)
                c = len(content.split())
                fake.prompt_tokens += p
                fake.completion_tokens += c
                self._send(200, {
                    "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": ({"prompt_tokens": -5, "completion_tokens": 1e300, "total_tokens": 1.5}
                              if mode == "odd_usage" else {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}),
                })

            def _embeddings(self, body: dict) -> None:
                fake.embedding_requests.append(body)
                mode = fake.mode
                if mode == "slow":
                    fake._released.wait(fake.delay)
                if mode in ("500", "429"):
                    self._send(int(mode), {"error": {"message": f"fake {mode}", "type": "server_error"}})
                    return
                texts = body.get("input", [])
                texts = [texts] if isinstance(texts, str) else texts
                vectors = [[3 * x for x in v] for v in HashEmbedder(fake.embedding_dim).embed(texts)]
                if mode == "short":
                    vectors = vectors[:-1]
                if mode in ("nan_vector", "zero_vector", "huge_vector"):
                    vectors[0] = [{"nan_vector": float("nan"), "zero_vector": 0.0, "huge_vector": 1e308}[mode]] * len(vectors[0])
                if body.get("encoding_format") == "base64":
                    vectors = [base64.b64encode(array.array("f", v).tobytes()).decode() for v in vectors]
                tokens = sum(len(t.split()) for t in texts)
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                if mode == "null_item":
                    data[0] = None
                elif mode == "same_index":
                    data[-1]["index"] = 0
                elif mode == "no_index":
                    data[0]["index"] = None
                self._send(200, {"object": "list", "data": data[::-1],  # out of order: the client sorts by index
                                 "model": body.get("model", "fake"),
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if fake.mode == "trickle":  # a byte at a time, until released
                        while data and not fake._released.wait(0.1):
                            self.wfile.write(data[:1])
                            self.wfile.flush()
                            data = data[1:]
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a held request (its budget ran out): nobody to answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # a short poll interval: close() (shutdown) waits up to one interval for the serving loop
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def chat_requests(self) -> list[dict]:
        """Requests other than the background probe's pings."""
        return [r for r in self.requests if r["messages"][-1]["content"] != "ping"]

    def release(self) -> None:
        """Answer the held "slow" requests now, and any later ones at once."""
        self._released.set()

    def wait_for_requests(self, n: int, timeout: float = 30.0) -> bool:
        """Wait until the model has been asked at least *n* chat requests (pings not counted);
        True at once when it has, False after *timeout* seconds when it has not."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.chat_requests()) >= n, timeout)

    def close(self) -> None:
        self._released.set()  # let held handler threads finish instead of sleeping on after the test
        self.httpd.shutdown()
        self.httpd.server_close()
