"""The replay backends against real protocol traffic: the real anthropic and openai SDK clients talk to a loopback
server (127.0.0.1) that answers as the APIs do, and the command backend runs real scripts. No test sleeps: the
retry loop's sleep is a recorder, and a slow server blocks on an Event released after the client gave up."""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from cairn_cli.core.replay.backends import (
    Answer,
    BackendError,
    backoff_s,
    estimate_tokens,
    limit_param,
    make_backend,
)
from cairn_cli.errors import ConfigError, InvalidInput, MissingDependency

ANTHROPIC_KEY = "sk-ant-test-NOT-A-KEY"
OPENAI_KEY = "sk-test-openai-NOT-A-KEY"
ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture(scope="module")
def server() -> Iterator[HTTPServer]:
    srv = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    srv.start()
    yield srv
    srv.clear()
    srv.stop()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


Reply = Callable[[Request], Response]


def json_reply(body: object, status: int = 200) -> Reply:
    return lambda request: Response(json.dumps(body), status=status, content_type="application/json")


def raw_reply(data: str, status: int = 200, content_type: str = "application/json") -> Reply:
    return lambda request: Response(data, status=status, content_type=content_type)


@dataclass
class Api:
    """One protocol: where its requests go, what a good answer looks like, how its key is set."""

    kind: str
    path: str
    key_var: str
    key: str
    server: HTTPServer

    @property
    def base_url(self) -> str:
        return self.server.url_for("/v1") if self.kind == "openai" else self.server.url_for("/").rstrip("/")

    def ok(self, text: str = "four", input_tokens: int = 11, output_tokens: int = 3) -> Reply:
        if self.kind == "anthropic":
            return json_reply(
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test-served",
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
                }
            )
        return json_reply(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-test-served",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {
                    "prompt_tokens": input_tokens,
                    "completion_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                },
            }
        )

    def error(self, status: int) -> Reply:
        # the body echoes the key, as a careless proxy might: it must not reach our message
        return json_reply(
            {"type": "error", "error": {"type": "api_error", "message": f"bad key {self.key}"}}, status=status
        )

    def serve(self, *replies: Reply) -> list[Request]:
        """Answer the next requests with `replies` in turn (the last one repeats); the requests are recorded."""
        seen: list[Request] = []

        def handler(request: Request) -> Response:
            seen.append(request)
            return replies[min(len(seen), len(replies)) - 1](request)

        self.server.expect_request(self.path, method="POST").respond_with_handler(handler)
        return seen

    def backend(self, sleep: Sleeps, **kwargs):
        return make_backend(self.kind, base_url=self.base_url, sleep=sleep, **kwargs)


@pytest.fixture(params=["anthropic", "openai"])
def api(request, server, monkeypatch) -> Iterator[Api]:
    if request.param == "anthropic":
        chosen = Api("anthropic", "/v1/messages", "ANTHROPIC_API_KEY", ANTHROPIC_KEY, server)
    else:
        chosen = Api("openai", "/v1/chat/completions", "OPENAI_API_KEY", OPENAI_KEY, server)
    monkeypatch.setenv(chosen.key_var, chosen.key)
    yield chosen
    server.clear()


def assert_no_key(error: BackendError, key: str) -> None:
    assert key not in error.one_line()
    assert key not in str(error)
    assert error.__cause__ is None and error.__suppress_context__


# --- the SDK backends over HTTP -------------------------------------------------------------------------------------


def test_answer_text_and_tokens(api, sleeps):
    seen = api.serve(api.ok("The answer is four.", input_tokens=12, output_tokens=5))
    answer = api.backend(sleeps).complete("What is 2 + 2?", model="test-model", max_tokens=64)
    assert answer == Answer(
        text="The answer is four.",
        input_tokens=12,
        output_tokens=5,
        model="claude-test-served" if api.kind == "anthropic" else "gpt-test-served",
    )
    assert len(seen) == 1 and sleeps == []
    body = seen[0].get_json()
    assert body["model"] == "test-model"
    assert body["messages"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert body["max_tokens"] == 64  # a compatible server gets max_tokens
    assert any(api.key in value for value in seen[0].headers.values())  # the key came from the environment


def test_429_then_success_is_retried_once(api, sleeps):
    seen = api.serve(api.error(429), api.ok("fine"))
    answer = api.backend(sleeps).complete("q", model="m", max_tokens=8)
    assert answer.text == "fine"
    assert len(seen) == 2
    assert sleeps == [backoff_s(0)] == [1.0]


def test_500_every_time_fails_after_retries_plus_one_attempts(api, sleeps):
    seen = api.serve(api.error(500))
    with pytest.raises(BackendError) as caught:
        api.backend(sleeps, retries=2).complete("q", model="m-500", max_tokens=8)
    error = caught.value
    assert len(seen) == 3 and error.attempts == 3
    assert sleeps == [1.0, 2.0]
    assert error.one_line() == f"{api.kind} backend, model m-500: HTTP 500 (server error) after 3 attempts"
    assert error.status == 500 and error.backend == api.kind and error.model == "m-500"
    assert_no_key(error, api.key)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_fails_at_once_and_names_the_variable_not_the_key(api, sleeps, status):
    seen = api.serve(api.error(status), api.ok())
    with pytest.raises(BackendError) as caught:
        api.backend(sleeps).complete("q", model="m", max_tokens=8)
    error = caught.value
    assert len(seen) == 1 and sleeps == [] and error.attempts == 1
    assert f"HTTP {status}" in error.one_line() and "after 1 attempt " in error.one_line() + " "
    assert api.key_var in (error.hint or "")
    assert_no_key(error, api.key)


def test_other_4xx_fails_at_once(api, sleeps):
    seen = api.serve(api.error(400), api.ok())
    with pytest.raises(BackendError, match="HTTP 400") as caught:
        api.backend(sleeps).complete("q", model="m", max_tokens=8)
    assert len(seen) == 1 and sleeps == [] and caught.value.status == 400
    assert_no_key(caught.value, api.key)


@pytest.mark.parametrize(
    "reply",
    [
        raw_reply("{not json"),  # invalid JSON
        raw_reply("<html>gateway says hi</html>", content_type="text/html"),  # not JSON at all
        json_reply({"unexpected": True}),  # JSON, but not the protocol's
    ],
    ids=["invalid-json", "html", "wrong-shape"],
)
def test_malformed_body_is_retried_once_then_fails(api, sleeps, reply):
    seen = api.serve(reply)
    with pytest.raises(BackendError, match="malformed response") as caught:
        api.backend(sleeps, retries=3).complete("q", model="m", max_tokens=8)
    assert len(seen) == 2 and caught.value.attempts == 2
    assert sleeps == [1.0]
    assert_no_key(caught.value, api.key)


def test_malformed_then_good_recovers(api, sleeps):
    seen = api.serve(raw_reply("{not json"), api.ok("ok"))
    assert api.backend(sleeps).complete("q", model="m", max_tokens=8).text == "ok"
    assert len(seen) == 2 and sleeps == [1.0]


def test_timeout_is_retried_then_fails(api, sleeps):
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(1.5)  # far longer than the client waits; released as soon as the client gave up
        return api.ok()(request)

    seen = api.serve(slow)
    started = time.monotonic()
    try:
        with pytest.raises(BackendError, match="request timed out after 2 attempts") as caught:
            api.backend(sleeps, retries=1, timeout_s=0.3).complete("q", model="m", max_tokens=8)
    finally:
        release.set()
    assert time.monotonic() - started < 1.4  # two 0.3 s waits, not the handler's 1.5 s
    assert len(seen) == 2 and sleeps == [1.0]
    assert_no_key(caught.value, api.key)


def test_connection_refused_is_retried(api, sleeps):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if api.kind == "openai" else "")
    backend = make_backend(api.kind, base_url=base, retries=2, sleep=sleeps)
    with pytest.raises(BackendError, match="connection failed after 3 attempts"):
        backend.complete("q", model="m", max_tokens=8)
    assert sleeps == [1.0, 2.0]


def test_anthropic_joins_text_blocks_and_skips_others(server, monkeypatch, sleeps):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    api = Api("anthropic", "/v1/messages", "ANTHROPIC_API_KEY", ANTHROPIC_KEY, server)
    body = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-served",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Hello, "},
            {"type": "text", "text": "world."},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 4, "output_tokens": 9},
    }
    try:
        api.serve(json_reply(body))
        answer = api.backend(sleeps).complete("hi", model="m", max_tokens=8)
    finally:
        server.clear()
    assert (answer.text, answer.input_tokens, answer.output_tokens) == ("Hello, world.", 4, 9)


def test_openai_without_usage_counts_zero_tokens_and_needs_no_key_for_a_local_server(server, sleeps):
    api = Api("openai", "/v1/chat/completions", "OPENAI_API_KEY", OPENAI_KEY, server)
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "local-llm",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hey"}}],
    }
    try:
        seen = api.serve(json_reply(body))
        answer = api.backend(sleeps).complete("hi", model="m", max_tokens=8)  # OPENAI_API_KEY unset
    finally:
        server.clear()
    assert answer == Answer(text="hey", input_tokens=0, output_tokens=0, model="local-llm")
    assert len(seen) == 1


def test_openai_limit_field_depends_on_the_server():
    assert limit_param("https://api.openai.com/v1") == "max_completion_tokens"
    assert limit_param("http://127.0.0.1:8000/v1") == "max_tokens"


# --- making a backend -----------------------------------------------------------------------------------------------


def test_missing_anthropic_key_names_the_variable():
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        make_backend("anthropic")


def test_missing_openai_key_without_a_local_server_names_the_variable():
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set") as caught:
        make_backend("openai")
    assert "--base-url" in (caught.value.hint or "")


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_missing_sdk_names_the_extra(kind, monkeypatch):
    monkeypatch.setitem(sys.modules, kind, None)  # `import kind` now raises ImportError
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    with pytest.raises(MissingDependency) as caught:
        make_backend(kind)
    assert "pip install 'cairn_cli[replay]'" in caught.value.one_line()


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        ("bedrock", {}, "unknown backend 'bedrock'"),
        ("command", {}, "--cmd"),
        ("command", {"cmd": ""}, "--cmd"),
        ("command", {"cmd": "   "}, "--cmd"),
        ("command", {"cmd": "'unclosed"}, "--cmd"),
        ("command", {"cmd": "echo hi", "timeout_s": 0}, "--timeout"),
        ("command", {"cmd": "echo hi", "retries": -1}, "--retries"),
    ],
)
def test_bad_backend_arguments_are_invalid_input(kind, kwargs, message):
    with pytest.raises(InvalidInput) as caught:
        make_backend(kind, **kwargs)
    assert message in caught.value.one_line()
    assert caught.value.exit_code == 2


def test_backoff_doubles_and_caps():
    assert [backoff_s(n) for n in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


# --- the command backend --------------------------------------------------------------------------------------------


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return f"{sys.executable} {path}"


ECHO = """\
import os, sys
prompt = sys.stdin.buffer.read().decode("utf-8")
model = os.environ["CAIRN_REPLAY_MODEL"]
limit = os.environ["CAIRN_REPLAY_MAX_TOKENS"]
sys.stdout.buffer.write(f"{model}/{limit}: {prompt.upper()}\\n".encode("utf-8"))
"""


def test_command_answers_from_stdin(tmp_path, sleeps):
    backend = make_backend("command", cmd=script(tmp_path, "echo.py", ECHO), sleep=sleeps)
    prompt = "café – naïve ✓"
    answer = backend.complete(prompt, model="local", max_tokens=32)
    assert answer.text == "local/32: CAFÉ – NAÏVE ✓"
    assert answer.input_tokens == math.ceil(len(prompt) / 4) == estimate_tokens(prompt)
    assert answer.output_tokens == math.ceil(len(answer.text) / 4)
    assert answer.model == "local"
    assert sleeps == []


FLAKY = """\
import sys
from pathlib import Path
counter = Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
sys.stdin.read()
if n <= 2:
    sys.stderr.write("warming up " + "." * 300 + f" failure {n}")
    sys.exit(3)
print(f"ok on try {n}")
"""


def test_command_failing_twice_then_succeeding_is_retried(tmp_path, sleeps):
    counter = tmp_path / "count"
    backend = make_backend("command", cmd=script(tmp_path, "flaky.py", FLAKY) + f" {counter}", sleep=sleeps)
    answer = backend.complete("q", model="m", max_tokens=8)
    assert answer.text == "ok on try 3"
    assert counter.read_text() == "3"
    assert sleeps == [1.0, 2.0]


def test_command_failing_past_its_retries_names_exit_code_and_stderr_tail(tmp_path, sleeps):
    counter = tmp_path / "count"
    backend = make_backend("command", cmd=script(tmp_path, "flaky.py", FLAKY) + f" {counter}", retries=1, sleep=sleeps)
    with pytest.raises(BackendError) as caught:
        backend.complete("q", model="m", max_tokens=8)
    line = caught.value.one_line()
    assert line.startswith("command backend, model m: command exited 3: stderr ...")
    assert line.endswith("failure 2 after 2 attempts")
    assert "warming up" not in line  # only the last 200 characters of stderr
    assert caught.value.attempts == 2 and sleeps == [1.0]


def test_command_stderr_in_an_error_is_redacted(tmp_path, sleeps):
    leaky = script(
        tmp_path, "leaky.py", f"import sys; sys.stderr.write('auth failed for {ANTHROPIC_KEY}'); sys.exit(1)"
    )
    with pytest.raises(BackendError) as caught:
        make_backend("command", cmd=leaky, retries=0, sleep=sleeps).complete("q", model="m", max_tokens=8)
    assert ANTHROPIC_KEY not in caught.value.one_line()
    assert "[redacted:anthropic-key]" in caught.value.one_line()


HANG = """\
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a grandchild holding the pipes
time.sleep(60)
"""


def test_command_hanging_past_the_timeout_is_killed_and_fails(tmp_path, sleeps):
    backend = make_backend("command", cmd=script(tmp_path, "hang.py", HANG), timeout_s=0.5, retries=1, sleep=sleeps)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"command timed out after 0.5 s after 2 attempts"):
        backend.complete("q", model="m", max_tokens=8)
    assert time.monotonic() - started < 5  # two 0.5 s timeouts; the grandchild did not keep us waiting
    assert sleeps == [1.0]


def test_command_that_cannot_start_is_invalid_input(tmp_path, sleeps):
    backend = make_backend("command", cmd=str(tmp_path / "no-such-program"), sleep=sleeps)
    with pytest.raises(InvalidInput, match="--cmd cannot be run"):
        backend.complete("q", model="m", max_tokens=8)
    assert sleeps == []
