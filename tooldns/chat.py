"""Talking to an OpenAI-compatible chat model: one client, its retries, token counts, JSON answers.

Used by the LLM scorer (:mod:`tooldns.scoring.llm`, short budgets, no retries) and the LLM tree
builder (:mod:`tooldns.building.llmtree`, long timeouts, a few retries). Any endpoint that speaks
the OpenAI chat API works through the ``openai`` package (a hosted model, vLLM, llama.cpp's
server, Ollama); the ``openai`` import happens when the first client is made, so modules that only
might talk to a model stay light. Configuration falls back to the environment:
``TOOLDNS_LLM_MODEL`` (default ``gpt-4o-mini``), ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``.

    >>> chat = ChatModel(model="gpt-4o-mini", timeout=0.8, max_retries=0)
    >>> content = chat.complete([{"role": "user", "content": "Reply {\"ok\": true}"}])
    >>> extract_json(content), chat.counters()
    ({'ok': True}, {'calls': 1, 'prompt_tokens': 12, 'completion_tokens': 5, 'failed_calls': 0})
"""

from __future__ import annotations

import json
import os
import re
import threading
from urllib.parse import urlsplit

DEFAULT_MODEL = "gpt-4o-mini"


class Busy(Exception):
    """Every slot for calls to an endpoint is taken (calls that outlived their wait still run)."""


class Within:
    """Calls to an endpoint, each waited for at most a number of seconds, at most *slots* at once.

    An HTTP client's timeout is per read: a reply trickled a byte at a time never trips it. A call
    runs in a daemon thread of its own (nothing joins it at exit) and its caller stops waiting when
    the time is up (TimeoutError); the call ends when its client gives up, holding its slot until
    then. With every slot held the next call is not made (:class:`Busy`): the endpoint is not known
    to be down, only this process's calls to it are all out.
    """

    def __init__(self, slots: int = 8) -> None:
        self._slots = threading.BoundedSemaphore(slots)

    def __call__(self, seconds: float, fn, *args):
        if not self._slots.acquire(blocking=False):
            raise Busy("every call to the endpoint is out")
        done, out = threading.Event(), {}

        def run() -> None:
            try:
                out["value"] = fn(*args)
            except BaseException as exc:  # handed to the caller, if it still waits
                out["error"] = exc
            finally:
                self._slots.release()
                done.set()

        threading.Thread(target=run, name="tooldns-call", daemon=True).start()
        if not done.wait(seconds):
            raise TimeoutError(f"no answer within {seconds * 1000:g} ms")
        if "error" in out:
            raise out["error"]
        return out["value"]


_ANY_JSON = re.compile(r"\{.*\}|\[.*\]", re.DOTALL)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def extract_json(content: str | None, *, object_only: bool = False):
    """The JSON value in a model's answer, prose around it cut away; ValueError when there is none.

    With *object_only*, only a JSON object counts (and the value is checked to be one).
    """
    if not content or not content.strip():
        raise ValueError("empty answer")
    match = (_OBJECT if object_only else _ANY_JSON).search(content)
    if not match:
        raise ValueError(f"no JSON {'object ' if object_only else ''}in the answer: {content[:80]!r}")
    try:
        data = json.loads(match.group())
    except json.JSONDecodeError as exc:
        raise ValueError(f"answer is not valid JSON: {exc.msg}") from None
    if object_only and not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    return data


def url_problem(url) -> str | None:
    """What keeps *url* from being an endpoint's base URL (``http://HOST[:PORT]/PATH``), or None."""
    if not isinstance(url, str):
        return f"base_url must be a URL, not {type(url).__name__}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not one
    except ValueError as exc:
        return f"base_url {url!r} is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"base_url {url!r} is not a URL such as http://HOST:PORT/v1"
    try:
        import httpx  # what the openai client parses it with (it brings httpx)
    except ImportError:
        return None
    try:
        httpx.URL(url)
    except Exception as exc:  # httpx.InvalidURL and its like
        return f"base_url {url!r} is not a URL: {exc}"
    return None


def openai_client(*, base_url: str | None = None, api_key: str | None = None, timeout: float = 60.0,
                  max_retries: int = 0):
    """An ``openai.OpenAI`` client for an OpenAI-compatible endpoint (imported here, on first use).

    *base_url* and *api_key* fall back to ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``; without a key a
    placeholder is sent (local servers need none). Shared by :class:`ChatModel` and the remote
    embedder (:class:`tooldns.embedding.remote.OpenAIEmbedder`).
    """
    from openai import OpenAI

    url = base_url or os.environ.get("OPENAI_BASE_URL")
    problem = url_problem(url) if url else None
    if problem:
        raise ValueError(problem)
    return OpenAI(base_url=url,
                  api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                  timeout=timeout, max_retries=max_retries)


class Counters:
    """Named counts (calls, tokens, failures) that several threads add to."""

    def __init__(self, *names: str) -> None:
        self._counts = dict.fromkeys(names, 0)
        self._lock = threading.Lock()

    def add(self, **amounts: int) -> None:
        with self._lock:
            for key, value in amounts.items():
                self._counts[key] += value

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def _tokens(count) -> int:
    """A token count an endpoint reported, when it is one (a whole number from 0 to 2^31; 1.5, -5 or
    1e300 count as nothing): what ``stats.tooldns.`` sums must stay a count."""
    return count if isinstance(count, int) and not isinstance(count, bool) and 0 <= count < 2**31 else 0


class ChatModel:
    """One model at one endpoint, counting calls and tokens (thread-safe)."""

    def __init__(self, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 0, client=None) -> None:
        self.model = model or os.environ.get("TOOLDNS_LLM_MODEL") or DEFAULT_MODEL
        if client is None:
            client = openai_client(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.client = client
        self._counts = Counters("calls", "prompt_tokens", "completion_tokens", "failed_calls")

    def complete(self, messages: list[dict], **params) -> str | None:
        """The content of the model's answer to *messages* (None when it gave no choice).

        Raises whatever the client raises (timeouts, HTTP errors); those count as failed calls.
        """
        try:
            response = self.client.chat.completions.create(model=self.model, messages=messages, **params)
        except Exception:
            self._counts.add(failed_calls=1)
            raise
        usage = getattr(response, "usage", None)
        self._counts.add(calls=1, prompt_tokens=_tokens(getattr(usage, "prompt_tokens", 0)),
                         completion_tokens=_tokens(getattr(usage, "completion_tokens", 0)))
        return response.choices[0].message.content if response.choices else None

    def ping(self) -> None:
        """One tiny request that is not counted; raises when the endpoint does not answer."""
        self.client.chat.completions.create(model=self.model, max_tokens=1, temperature=0,
                                            messages=[{"role": "user", "content": "ping"}])

    def counters(self) -> dict[str, int]:
        return self._counts.snapshot()
