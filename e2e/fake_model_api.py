"""A fake model API for the e2e runs: Anthropic Messages, OpenAI Responses and Gemini, on 127.0.0.1. Stdlib only.

Every request is appended to a JSONL log (method, path, headers without credentials, JSON body, what was
answered). Every model call is answered with a scripted reply that grades the newest cairn injection block seen
in the request and writes one memory:

    The fake model answered through the real CLI. (fake model; saw memory ids ['7', '3'])

    [cm]{"m": [{"content": "E2E codex: the webshop's /api proxy needs ...", ...}], "rg": ["7:3", "3:1"]}[/cm]

A request that carries a JSON schema (Gemini's router classifier, its next-speaker check) gets a JSON instance of
that schema instead.

    python e2e/fake_model_api.py --log /tmp/requests.jsonl --port-file /tmp/port
    # prints "fake-model-api listening on 127.0.0.1:PORT" and serves until SIGTERM / Ctrl-C

``--marker TEXT`` (repeatable) makes the reply say which markers it saw in the request, which shows where a hook's
output landed.
"""

from __future__ import annotations

import argparse
import gzip
import html
import itertools
import json
import re
import signal
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOST = "127.0.0.1"
SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "cookie", "proxy-authorization"}
# Which API a request belongs to decides the agent named in the memory it writes.
AGENT_OF_API = {"anthropic": "claude-code", "openai": "codex", "gemini": "gemini"}

MEMORIES_BLOCK = re.compile(r"<cairn-memories\b[^>]*>(.*?)(?:</cairn-memories>|\Z)", re.DOTALL)
HOOK_CONTEXT = re.compile(r"<hook_context>(.*?)(?:</hook_context>|\Z)", re.DOTALL)
MEMORY_ID = re.compile(r"<memory\b[^>]*?\bid=[\"']([^\"']+)[\"']")
MEMORY_SCOPE = re.compile(r"<memory\b[^>]*?\bscope=[\"']([^\"']+)[\"']")
RULES_SCOPE = re.compile(r"scope \"([^\"]+)\" for this project")


# --------------------------------------------------------------------------------------------------------------
# The scripted reply


@dataclass
class Script:
    """What the fake model says; the same for every API."""

    markers: list[str] = field(default_factory=list)
    default_scope: str = "global"
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))

    def reply(self, api: str, text: str) -> dict[str, Any]:
        """The reply to a request whose text (all its messages, in order) is ``text``."""
        plain = unescape(text)
        ids, scope = newest_block(plain)
        scope = scope or self.default_scope
        seen = [m for m in self.markers if m in text or m in plain]
        n = next(self.counter)
        agent = AGENT_OF_API[api]
        topic = newest_topic(plain)
        memory = {
            "content": f"E2E {agent}: {LEARNED[topic][agent]}",
            "keywords": ["e2e", agent, *TOPIC_WORDS[topic]],
            "scope": scope,
            "kind": "fact",
        }
        grades = [f"{mid}:{3 if i == 0 else 1}" for i, mid in enumerate(ids)]
        cm = json.dumps({"m": [memory], "rg": grades})
        note = f"call {n}, saw memory ids {ids}" + (f"; saw {', '.join(seen)}" if seen else "")
        reply = f"The fake model answered through the real CLI. (fake model; {note})\n\n[cm]{cm}[/cm]"
        return {"text": reply, "ids": ids, "markers": seen, "scope": scope, "memory": memory["content"]}


# What each agent's fake model "learns" answering each of the two e2e prompts: one fact per agent and topic, each
# new to the store and distinct from the others (none is a duplicate the store would merge), each relevant to the
# prompt it answered, so a later agent asking the same question is shown what an earlier agent wrote.
TOPIC_WORDS = {"proxy": ["proxy", "api", "vite"], "tests": ["tests", "pytest"]}
LEARNED = {
    "proxy": {
        "claude-code": "the webshop's /api proxy drops websocket upgrades unless vite.config.ts sets ws: true",
        "codex": "the webshop's /api proxy needs changeOrigin: true, else Flask rejects the forwarded Host header",
        "gemini": "the webshop's /api proxy gives up after 30 s, so the long CSV export calls port 8000 directly",
    },
    "tests": {
        "claude-code": "in the webshop tests, pytest --lf reruns only the tests that failed last time",
        "codex": "the webshop tests need WEBSHOP_FAKE_PAYMENTS=1 so that no test calls the real payment provider",
        "gemini": "make test-fast runs the webshop tests without the slow browser tests",
    },
}


def newest_topic(text: str) -> str:
    """Which e2e prompt the request answers: the one whose words come last in it (proxy when neither shows)."""
    return "tests" if text.rfind("run the webshop tests") > text.rfind("proxy forward") else "proxy"


def unescape(text: str) -> str:
    """Undo HTML escaping (Gemini's ``&lt;memory id=&quot;1&quot;&gt;``), twice for doubly escaped text."""
    for _ in range(2):
        if "&" not in text:
            break
        text = html.unescape(text)
    return text


def newest_block(text: str) -> tuple[list[str], str | None]:
    """The memory ids of the last ``<cairn-memories>`` block in ``text``, and the project scope if one shows."""
    blocks = MEMORIES_BLOCK.findall(text) or HOOK_CONTEXT.findall(text)  # a bare Gemini hook context: its items
    if not blocks:
        return [], _rules_scope(text)
    body = blocks[-1]
    ids = list(dict.fromkeys(MEMORY_ID.findall(body)))
    scope = _rules_scope(text) or next((s for s in MEMORY_SCOPE.findall(body) if s != "global"), None)
    return ids, scope


def _rules_scope(text: str) -> str | None:
    found = RULES_SCOPE.findall(text)
    return found[-1] if found else None


def schema_instance(schema: Any) -> Any:
    """A small valid instance of a JSON schema (also Gemini's upper-case ``Type`` names)."""
    if not isinstance(schema, dict):
        return None
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_instance(schema[key][0])
    if schema.get("enum"):
        # the next-speaker check offers ["user", "model"]: "model" would make the CLI loop
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "string")
    kind = str(kind).lower()
    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(sub) for name, sub in props.items()}
    if kind == "array":
        return [schema_instance(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return "e2e fake model"
    if kind in ("integer", "number"):
        # Gemini's numerical router asks for a "complexity_score" of 1-100 without saying so in the schema
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return None


# --------------------------------------------------------------------------------------------------------------
# Reading request text, per API


def texts_of(value: Any) -> list[str]:
    """Every string under the keys that hold message text (``text``, ``content`` as a string, Gemini parts)."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for item in value:
            out.extend(texts_of(item))
    elif isinstance(value, dict):
        for key in ("text", "content", "parts", "input", "output", "system", "systemInstruction", "instructions"):
            if key in value:
                out.extend(texts_of(value[key]))
    return out


def request_text(api: str, body: dict) -> str:
    if api == "anthropic":
        return "\n".join(texts_of(body.get("system")) + texts_of(body.get("messages")))
    if api == "openai":
        return "\n".join(texts_of(body.get("instructions")) + texts_of(body.get("input")))
    return "\n".join(texts_of(body.get("systemInstruction")) + texts_of(body.get("contents")))


def gemini_schema(body: dict) -> Any:
    config = body.get("generationConfig") or {}
    return config.get("responseJsonSchema") or config.get("responseSchema")


# --------------------------------------------------------------------------------------------------------------
# Wire formats


def sse(event: str | None, data: dict) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def chunks(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def anthropic_message(model: str, text: str) -> dict:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": max(1, len(text) // 4)},
    }


def anthropic_stream(model: str, text: str) -> list[bytes]:
    message = anthropic_message(model, "")
    message.update(content=[], stop_reason=None, usage={"input_tokens": 100, "output_tokens": 1})
    events = [
        sse("message_start", {"type": "message_start", "message": message}),
        sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        sse("ping", {"type": "ping"}),
    ]
    for piece in chunks(text):
        delta = {"type": "text_delta", "text": piece}
        events.append(sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    events += [
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": max(1, len(text) // 4)},
            },
        ),
        sse("message_stop", {"type": "message_stop"}),
    ]
    return events


def openai_usage(text: str) -> dict:
    out = max(1, len(text) // 4)
    return {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 100 + out,
    }


def openai_stream(model: str, text: str) -> list[bytes]:
    """The Responses API event sequence Codex consumes (it reads items from ``output_item.done``)."""
    resp_id = f"resp_{uuid.uuid4().hex[:24]}"
    item_id = f"msg_{uuid.uuid4().hex[:24]}"
    base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model, "output": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    item = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
    seq = itertools.count()

    def ev(kind: str, **data: Any) -> bytes:
        return sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    events = [
        ev("response.created", response={**base, "status": "in_progress"}),
        ev("response.in_progress", response={**base, "status": "in_progress"}),
        ev("response.output_item.added", output_index=0, item=item),
        ev("response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part),
    ]
    for piece in chunks(text):
        events.append(ev("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=piece))
    done_part = {**part, "text": text}
    done_item = {**item, "status": "completed", "content": [done_part]}
    events += [
        ev("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=text),
        ev("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=done_part),
        ev("response.output_item.done", output_index=0, item=done_item),
        ev(
            "response.completed",
            response={**base, "status": "completed", "output": [done_item], "usage": openai_usage(text)},
        ),
    ]
    return events


def gemini_response(model: str, text: str, finished: bool = True) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
    if finished:
        candidate["finishReason"] = "STOP"
        out["usageMetadata"] = {
            "promptTokenCount": 100,
            "candidatesTokenCount": max(1, len(text) // 4),
            "totalTokenCount": 100 + max(1, len(text) // 4),
        }
    return out


def gemini_stream(model: str, text: str) -> list[bytes]:
    pieces = chunks(text)
    return [sse(None, gemini_response(model, p, finished=i == len(pieces) - 1)) for i, p in enumerate(pieces)]


# --------------------------------------------------------------------------------------------------------------
# The server


class FakeModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, log_path: Path, script: Script) -> None:
        super().__init__((HOST, 0), Handler)
        self.log_path = log_path
        self.script = script
        self.lock = threading.Lock()
        self.seq = itertools.count(1)

    def record(self, entry: dict) -> None:
        with self.lock:
            entry = {"seq": next(self.seq), "ts": round(time.time(), 3), **entry}
            with self.log_path.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    server: FakeModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the JSONL log is the record
        pass

    # -- plumbing

    def _body(self) -> tuple[Any, str | None]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        try:
            if encoding == "gzip":
                raw = gzip.decompress(raw)
            elif encoding == "deflate":
                raw = zlib.decompress(raw)
            elif encoding:
                return None, f"undecoded Content-Encoding {encoding}, {len(raw)} bytes"
            return (json.loads(raw) if raw else None), None
        except ValueError as exc:
            return None, f"unparsed body ({exc}): {raw[:200]!r}"

    def _headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in SECRET_HEADERS}

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading; its log entry is written
            pass

    # -- verbs

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_HEAD(self) -> None:
        self.server.record({"method": "HEAD", "path": self.path, "headers": self._headers(), "answer": "200 empty"})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _handle(self, method: str) -> None:
        body, body_error = self._body() if method == "POST" else (None, None)
        entry: dict[str, Any] = {"method": method, "path": self.path, "headers": self._headers(), "body": body}
        if body_error:
            entry["body_error"] = body_error
        try:
            answer = self._route(method, urlsplit(self.path).path, body if isinstance(body, dict) else {})
        except Exception as exc:  # a bug here must show in the log, not hang the CLI
            entry["answer"] = f"500 {exc!r}"
            self.server.record(entry)
            self._send_json(500, {"error": {"type": "fake_model_error", "message": repr(exc)}})
            return
        entry.update(answer.pop("log"))
        self.server.record(entry)
        if "events" in answer:
            self._send_sse(answer["events"])
        else:
            self._send_json(answer.get("status", 200), answer["json"])

    def _route(self, method: str, path: str, body: dict) -> dict:
        script = self.server.script
        model = str(body.get("model") or "fake-model")
        # Anthropic
        if method == "POST" and path == "/v1/messages":
            reply = script.reply("anthropic", request_text("anthropic", body))
            if body.get("stream"):
                return {"events": anthropic_stream(model, reply["text"]), "log": {"api": "anthropic", "reply": reply}}
            return {"json": anthropic_message(model, reply["text"]), "log": {"api": "anthropic", "reply": reply}}
        if method == "POST" and path == "/v1/messages/count_tokens":
            tokens = max(1, len(request_text("anthropic", body)) // 4)
            return {"json": {"input_tokens": tokens}, "log": {"api": "anthropic", "answer": "count_tokens"}}
        # OpenAI Responses
        if method == "POST" and path.endswith("/responses"):
            reply = script.reply("openai", request_text("openai", body))
            return {"events": openai_stream(model, reply["text"]), "log": {"api": "openai", "reply": reply}}
        # Gemini: /v1beta/models/<model>:generateContent or :streamGenerateContent
        match = re.search(r"/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$", path)
        if method == "POST" and match:
            model, action = match.groups()
            if action == "countTokens":
                tokens = max(1, len(request_text("gemini", body)) // 4)
                return {"json": {"totalTokens": tokens}, "log": {"api": "gemini", "answer": "countTokens"}}
            schema = gemini_schema(body)
            if schema is not None:
                text = json.dumps(schema_instance(schema))
                log = {"api": "gemini", "answer": "schema", "reply": {"text": text}}
            else:
                reply = script.reply("gemini", request_text("gemini", body))
                text, log = reply["text"], {"api": "gemini", "reply": reply}
            if action == "streamGenerateContent":
                return {"events": gemini_stream(model, text), "log": log}
            return {"json": gemini_response(model, text), "log": log}
        # Model listings (Anthropic and OpenAI share the path; Gemini lists under /v1beta/models)
        if method == "GET" and path.rstrip("/").endswith("/models"):
            listing = {
                "object": "list",
                "data": [{"id": "fake-model", "object": "model", "type": "model", "display_name": "Fake model"}],
                "models": [],
                "has_more": False,
                "first_id": "fake-model",
                "last_id": "fake-model",
            }
            return {"json": listing, "log": {"answer": "model list"}}
        if method == "GET":
            return {"json": {}, "log": {"answer": "200 {}"}}
        return {
            "status": 404,
            "json": {"error": {"type": "not_found_error", "message": f"fake model API: no route {method} {path}"}},
            "log": {"answer": "404"},
        }


def serve(log_path: Path, script: Script, port_file: Path | None = None) -> FakeModelServer:
    """Start the server on a free loopback port in a daemon thread and return it (``server.server_port``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    server = FakeModelServer(log_path, script)
    if port_file:
        port_file.write_text(str(server.server_port))
    threading.Thread(target=server.serve_forever, name="fake-model-api", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True, help="JSONL file every request is appended to")
    parser.add_argument("--port-file", type=Path, help="write the chosen port here once listening")
    parser.add_argument("--marker", action="append", default=[], help="text the reply reports seeing (repeatable)")
    parser.add_argument("--scope", default="global", help="memory scope when the request names none")
    args = parser.parse_args(argv)
    server = serve(args.log, Script(markers=args.marker, default_scope=args.scope), args.port_file)
    print(f"fake-model-api listening on {HOST}:{server.server_port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
