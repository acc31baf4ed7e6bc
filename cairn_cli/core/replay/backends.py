"""Where `cairn replay` gets its answers: the Anthropic API, any OpenAI-compatible server, or a local command. More
in docs/learning.md."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cairn_cli.core.redact import redact
from cairn_cli.errors import CairnError, ConfigError, InvalidInput, MissingDependency

BACKENDS = ("anthropic", "openai", "command")
BACKOFF_BASE_S = 1.0  # first retry waits this long, then twice as long each time
BACKOFF_MAX_S = 30.0
MALFORMED_RETRIES = 1  # a body that is not the protocol's JSON is tried again once at most
STDERR_TAIL = 200  # characters of a failed command's stderr kept in its error
CHARS_PER_TOKEN = 4  # the command backend's token estimate
OPENAI_PLACEHOLDER_KEY = "not-needed"  # a local OpenAI-compatible server given no OPENAI_API_KEY
EXTRA_HINT = "pip install 'cairn_cli[replay]'"


@dataclass
class Answer:
    text: str
    input_tokens: int
    output_tokens: int
    model: str


class BackendError(CairnError):
    """A call that failed after its retries (or at once, when no retry could help). One line, never the key."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        backend: str,
        model: str,
        attempts: int,
        status: int | None = None,
    ):
        super().__init__(message, hint)
        self.backend = backend
        self.model = model
        self.attempts = attempts
        self.status = status


class Backend(Protocol):
    name: str

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> Answer: ...


@dataclass
class _Failure(Exception):
    """One failed attempt, as the retry loop sees it."""

    what: str
    retryable: bool
    malformed: bool = False
    status: int | None = None
    hint: str | None = None


def backoff_s(attempt: int) -> float:
    """The wait before retry number `attempt + 1` (attempt counts from 0)."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**attempt)


def _with_retries(
    backend: str,
    model: str,
    once: Callable[[], Answer],
    *,
    retries: int,
    sleep: Callable[[float], None],
    secret: str | None = None,
) -> Answer:
    malformed = 0
    attempt = 0
    while True:
        try:
            return once()
        except _Failure as failure:
            attempts = attempt + 1
            malformed += failure.malformed
            if failure.retryable and attempt < retries and malformed <= MALFORMED_RETRIES:
                sleep(backoff_s(attempt))
                attempt += 1
                continue
            what = failure.what.replace(secret, "[REDACTED]") if secret else failure.what
            plural = "attempt" if attempts == 1 else "attempts"
            raise BackendError(
                f"{backend} backend, model {model}: {what} after {attempts} {plural}",
                failure.hint,
                backend=backend,
                model=model,
                attempts=attempts,
                status=failure.status,
            ) from None


def _status_failure(status: int, key_var: str) -> _Failure:
    if status in (401, 403):
        return _Failure(
            f"HTTP {status} (authentication refused)",
            retryable=False,
            status=status,
            hint=f"check that {key_var} holds a valid key for this server",
        )
    if status == 429:
        return _Failure("HTTP 429 (rate limited)", retryable=True, status=status)
    if status >= 500:
        return _Failure(f"HTTP {status} (server error)", retryable=True, status=status)
    return _Failure(
        f"HTTP {status} (request refused)",
        retryable=False,
        status=status,
        hint="check the model name, the token limit and the base URL",
    )


def _malformed(what: str) -> _Failure:
    return _Failure(f"malformed response ({what})", retryable=True, malformed=True)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sdk_call(sdk: Any, base_error: type[BaseException], key_var: str, shape: str, call: Callable[[], Any]) -> Any:
    """call() through an official SDK (anthropic and openai raise the same family of errors), each failure as a
    _Failure: HTTP statuses by their code, timeouts and dropped connections retryable, a body that is not
    `shape` or not JSON malformed, any other client error by its class only (never its text: it may hold the key)."""
    try:
        return call()
    except sdk.APIStatusError as exc:
        raise _status_failure(exc.status_code, key_var) from None
    except sdk.APITimeoutError:
        raise _Failure("request timed out", retryable=True) from None
    except sdk.APIConnectionError:
        raise _Failure("connection failed", retryable=True) from None
    except sdk.APIResponseValidationError:
        raise _malformed(shape) from None
    except json.JSONDecodeError:
        raise _malformed("invalid JSON") from None
    except base_error as exc:
        raise _Failure(f"client error ({type(exc).__name__})", retryable=False) from None


class AnthropicBackend:
    name = "anthropic"
    key_var = "ANTHROPIC_API_KEY"

    def __init__(self, *, base_url: str | None, timeout_s: float, retries: int, sleep: Callable[[float], None]):
        try:
            import anthropic
        except ImportError:
            raise MissingDependency("the anthropic backend needs the anthropic package", EXTRA_HINT) from None
        key = os.environ.get(self.key_var)
        if not key:
            raise ConfigError(f"{self.key_var} is not set", f"export {self.key_var} to use --backend anthropic")
        self._sdk = anthropic
        self._key = key
        self._client = anthropic.Anthropic(api_key=key, base_url=base_url or None, max_retries=0, timeout=timeout_s)
        self._retries = retries
        self._sleep = sleep

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> Answer:
        def once() -> Answer:
            message = _sdk_call(
                self._sdk,
                self._sdk.AnthropicError,
                self.key_var,
                "not a message",
                lambda: self._client.messages.create(
                    model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}]
                ),
            )
            return _anthropic_answer(message, model)

        return _with_retries(self.name, model, once, retries=self._retries, sleep=self._sleep, secret=self._key)


def _anthropic_answer(message: Any, model: str) -> Answer:
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        raise _malformed("no content list")
    text = "".join(
        block.text for block in content if getattr(block, "type", None) == "text" and isinstance(block.text, str)
    )
    usage = getattr(message, "usage", None)
    served = getattr(message, "model", None)
    return Answer(
        text=text,
        input_tokens=_int(getattr(usage, "input_tokens", 0)),
        output_tokens=_int(getattr(usage, "output_tokens", 0)),
        model=served if isinstance(served, str) and served else model,
    )


class OpenAIBackend:
    name = "openai"
    key_var = "OPENAI_API_KEY"

    def __init__(self, *, base_url: str | None, timeout_s: float, retries: int, sleep: Callable[[float], None]):
        try:
            import openai
        except ImportError:
            raise MissingDependency("the openai backend needs the openai package", EXTRA_HINT) from None
        key = os.environ.get(self.key_var)
        if not key:
            if not base_url:
                raise ConfigError(
                    f"{self.key_var} is not set",
                    f"export {self.key_var}, or give --base-url for a local server that needs no key",
                )
            key = OPENAI_PLACEHOLDER_KEY
        self._sdk = openai
        self._key = key
        kwargs: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": timeout_s}
        if base_url:
            kwargs["base_url"] = base_url
        self._client = openai.OpenAI(**kwargs)
        # OpenAI's own API wants max_completion_tokens (newer models refuse max_tokens); compatible servers
        # (vLLM, llama.cpp, Ollama) have long taken max_tokens
        self._limit_param = limit_param(str(self._client.base_url))
        self._retries = retries
        self._sleep = sleep

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> Answer:
        def once() -> Answer:
            messages: Any = [{"role": "user", "content": prompt}]
            limit: Any = {self._limit_param: max_tokens}
            completion = _sdk_call(
                self._sdk,
                self._sdk.OpenAIError,
                self.key_var,
                "not a chat completion",
                lambda: self._client.chat.completions.create(model=model, messages=messages, **limit),
            )
            return _openai_answer(completion, model)

        secret = None if self._key == OPENAI_PLACEHOLDER_KEY else self._key
        return _with_retries(self.name, model, once, retries=self._retries, sleep=self._sleep, secret=secret)


def limit_param(base_url: str) -> str:
    """The chat-completions field that caps the answer's length at this base URL."""
    return "max_completion_tokens" if "//api.openai.com" in base_url else "max_tokens"


def _openai_answer(completion: Any, model: str) -> Answer:
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise _malformed("no choices")
    content = getattr(getattr(choices[0], "message", None), "content", None)
    if content is not None and not isinstance(content, str):
        raise _malformed("message content is not text")
    usage = getattr(completion, "usage", None)
    served = getattr(completion, "model", None)
    return Answer(
        text=content or "",
        input_tokens=_int(getattr(usage, "prompt_tokens", 0)),
        output_tokens=_int(getattr(usage, "completion_tokens", 0)),
        model=served if isinstance(served, str) and served else model,
    )


class CommandBackend:
    """A local command: the prompt on stdin (UTF-8), the answer on stdout.

    The command also sees CAIRN_REPLAY_MODEL and CAIRN_REPLAY_MAX_TOKENS in its environment. Token counts are an
    estimate (a token per CHARS_PER_TOKEN characters).
    """

    name = "command"

    def __init__(self, *, cmd: str | None, timeout_s: float, retries: int, sleep: Callable[[float], None]):
        if not cmd or not cmd.strip():
            raise InvalidInput("the command backend needs a command", "give --cmd 'PROGRAM ARGS'")
        try:
            argv = shlex.split(cmd)
        except ValueError as exc:
            raise InvalidInput(f"--cmd cannot be parsed: {exc}", "check the quoting in --cmd") from None
        if not argv:
            raise InvalidInput("the command backend needs a command", "give --cmd 'PROGRAM ARGS'")
        self.argv = argv
        self._timeout_s = timeout_s
        self._retries = retries
        self._sleep = sleep

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> Answer:
        env = {**os.environ, "CAIRN_REPLAY_MODEL": model, "CAIRN_REPLAY_MAX_TOKENS": str(max_tokens)}

        def once() -> Answer:
            code, out, err = self._run(prompt.encode("utf-8"), env)
            if code is None:
                raise _Failure(f"command timed out after {self._timeout_s:g} s{_tail(err)}", retryable=True)
            if code != 0:
                raise _Failure(f"command exited {code}{_tail(err)}", retryable=True)
            text = out.decode("utf-8", errors="replace").rstrip("\r\n")
            return Answer(
                text=text, input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text), model=model
            )

        return _with_retries(self.name, model, once, retries=self._retries, sleep=self._sleep)

    def _run(self, stdin: bytes, env: dict[str, str]) -> tuple[int | None, bytes, bytes]:
        """Run the command once: (exit code or None on timeout, stdout, stderr). A timed-out command is killed
        with everything it started (its own process group), so a grandchild holding the pipes cannot hang us."""
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise InvalidInput(
                f"--cmd cannot be run: {self.argv[0]}: {exc.strerror or exc}", "check the program named in --cmd"
            ) from None
        try:
            out, err = proc.communicate(stdin, timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            return None, out, err
        return proc.returncode, out, err


def _tail(stderr: bytes) -> str:
    text = " ".join(stderr.decode("utf-8", errors="replace").split())
    if not text:
        return ""
    tail, _ = redact(text[-STDERR_TAIL:])
    return f": stderr ...{tail}" if len(text) > STDERR_TAIL else f": stderr {tail}"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def make_backend(
    kind: str,
    *,
    cmd: str | None = None,
    base_url: str | None = None,
    timeout_s: float = 120.0,
    retries: int = 3,
    sleep: Callable[[float], None] = time.sleep,
) -> Backend:
    """The backend named `kind`, ready to call (its key read, its SDK imported, its command parsed)."""
    if timeout_s <= 0:
        raise InvalidInput(f"timeout must be positive, got {timeout_s}", "give --timeout in seconds, above 0")
    if retries < 0:
        raise InvalidInput(f"retries must be 0 or more, got {retries}", "give --retries 0 or more")
    if kind == "anthropic":
        return AnthropicBackend(base_url=base_url, timeout_s=timeout_s, retries=retries, sleep=sleep)
    if kind == "openai":
        return OpenAIBackend(base_url=base_url, timeout_s=timeout_s, retries=retries, sleep=sleep)
    if kind == "command":
        return CommandBackend(cmd=cmd, timeout_s=timeout_s, retries=retries, sleep=sleep)
    raise InvalidInput(f"unknown backend {kind!r}", f"give --backend one of: {', '.join(BACKENDS)}")
