"""A scripted stand-in for a model API on 127.0.0.1, for driving the real harness CLIs.

:class:`ModelStub` answers the Anthropic Messages API (``POST /v1/messages``, streamed as
server-sent events, Claude Code's ``ANTHROPIC_BASE_URL``) and the OpenAI Responses API
(``POST /v1/responses``, Codex's model provider ``base_url``). It keeps every request's
JSON body, so a test asserts on what the model was shown. Its script is one rule, the same
for both APIs, read off the newest input of a request that offers tools:

- the input's text holds ``please run: <command>`` (a prompt, a woken turn's reminder, a
  notice's preview) → call the shell tool with that command;
- the input is a tool's result → answer ``done``;
- else → answer ``ok``.

A request without tools (a title, a summary) is answered ``ok``, except a compaction's
summary request, answered ``summary``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RUN = re.compile(r"please run: ([^\n\"\\]+)")
# "please call: <tool> <JSON input>": a call of that tool (an MCP tool: mcp__<server>__<name>).
_CALL = re.compile(r"please call: (\S+) (\{[^\n]*\})")
_ids = itertools.count(1)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                for field in ("text", "content", "output"):
                    if field in block:
                        out.extend(_texts(block[field]))
    return out


def request_text(body: dict[str, Any]) -> str:
    """Everything a request showed the model, as one string (for assertions)."""
    return json.dumps(body, ensure_ascii=False)


class ModelStub:
    """The stand-in server; ``with ModelStub() as stub:`` serves on ``stub.url``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._json(200, {"data": [], "models": []})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if path.endswith("/messages/count_tokens"):
                    self._json(200, {"input_tokens": 100})
                    return
                if path.endswith("/messages"):
                    stub._record(path, body)
                    self._anthropic(body)
                    return
                if path.endswith("/responses"):
                    stub._record(path, body)
                    self._responses(body)
                    return
                self._json(404, {"error": {"type": "not_found", "message": path}})

            def _json(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def _anthropic(self, body: dict[str, Any]) -> None:
                kind, arg = stub.plan_anthropic(body)
                n = next(_ids)
                usage = {"input_tokens": 10, "output_tokens": 1}
                start = {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_{n}", "type": "message", "role": "assistant",
                        "model": body.get("model", "stub"), "content": [],
                        "stop_reason": None, "stop_sequence": None, "usage": usage,
                    },
                }  # fmt: skip
                if kind == "tool":
                    block = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {}}
                    delta = {
                        "type": "input_json_delta",
                        "partial_json": json.dumps({"command": arg, "description": "run"}),
                    }
                    stop = "tool_use"
                elif kind == "call":
                    name, _, given = arg.partition(" ")
                    block = {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": given}
                    stop = "tool_use"
                else:
                    block = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": arg}
                    stop = "end_turn"
                self._sse(
                    [
                        ("message_start", start),
                        ("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": block}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": delta}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                        ("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": stop, "stop_sequence": None},
                                           "usage": {"output_tokens": 5}}),
                        ("message_stop", {"type": "message_stop"}),
                    ]
                )  # fmt: skip

            def _responses(self, body: dict[str, Any]) -> None:
                kind, arg = stub.plan_responses(body)
                n = next(_ids)
                rid = f"resp_{n}"
                item: dict[str, Any]
                if kind == "tool":
                    offered = {t.get("name") for t in body.get("tools") or []}
                    # Codex's unified exec tool (0.171) where it is offered, else the
                    # older shell tool.
                    name, args = (
                        ("exec_command", {"cmd": arg})
                        if "exec_command" in offered
                        else ("shell", {"command": ["bash", "-lc", arg]})
                    )
                    item = {
                        "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                        "name": name, "arguments": json.dumps(args), "status": "completed",
                    }  # fmt: skip
                else:
                    item = {
                        "type": "message", "id": f"msg_{n}", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": arg, "annotations": []}],
                    }  # fmt: skip
                base = {"id": rid, "object": "response", "status": "in_progress", "output": []}
                done = {
                    **base, "status": "completed", "output": [item],
                    "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                              "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}},
                }  # fmt: skip
                self._sse(
                    [
                        (None, {"type": "response.created", "response": base}),
                        (None, {"type": "response.output_item.done", "output_index": 0,
                                "item": item}),
                        (None, {"type": "response.completed", "response": done}),
                    ]
                )  # fmt: skip

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ModelStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the script ---------------------------------------------------------------------

    def _record(self, path: str, body: dict[str, Any]) -> None:
        with self.changed:
            self.requests.append({"path": path, "body": body})
            self.changed.notify_all()

    def main_requests(self) -> list[dict[str, Any]]:
        """The bodies of the requests that offered tools (the agent's own turns)."""
        with self.lock:
            return [r["body"] for r in self.requests if r["body"].get("tools")]

    def wait_for(self, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
        """Block until a main request satisfies ``predicate``; return its body."""
        import time

        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for r in self.requests:
                    if r["body"].get("tools") and predicate(r["body"]):
                        return r["body"]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
                self.changed.wait(left)

    @staticmethod
    def _decide(last_texts: list[str], is_result: bool) -> tuple[str, str]:
        if is_result:
            return "text", "done"
        called = _CALL.search("\n".join(last_texts))
        if called:
            return "call", f"{called.group(1)} {called.group(2)}"
        found = _RUN.search("\n".join(last_texts))
        if found:
            return "tool", found.group(1).strip()
        return "text", "ok"

    def plan_anthropic(self, body: dict[str, Any]) -> tuple[str, str]:
        messages = body.get("messages") or []
        if not body.get("tools"):
            whole = request_text(body).lower()
            return "text", "summary" if "summar" in whole else "ok"
        # The newest user message decides (this API's later versions put system
        # messages among the messages, after it).
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        last = users[-1] if users else {}
        content = last.get("content")
        blocks = content if isinstance(content, list) else []
        is_result = any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)
        # Only the newest user text decides (a reminder, a prompt), not tool results.
        texts = [] if is_result else _texts(content)
        return self._decide(texts, is_result)

    def plan_responses(self, body: dict[str, Any]) -> tuple[str, str]:
        items = body.get("input") or []
        if not body.get("tools"):
            return "text", "ok"
        tail: list[dict[str, Any]] = []
        for item in reversed(items):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call_output":
                return self._decide([], True)
            if item.get("role") == "assistant" or item.get("type") == "function_call":
                break
            tail.append(item)
        texts = [t for item in tail for t in _texts(item.get("content"))]
        return self._decide(texts, False)
