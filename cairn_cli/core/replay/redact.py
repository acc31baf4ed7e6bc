"""Secrets out of text before it leaves the machine: `redact(text)` -> (redacted text, count per kind). More in
docs/learning.md."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

PRIVATE_KEY = "private_key"
ANTHROPIC_KEY = "anthropic_key"
OPENAI_KEY = "openai_key"
AWS_ACCESS_KEY_ID = "aws_access_key_id"
AWS_SECRET_ACCESS_KEY = "aws_secret_access_key"
GITHUB_TOKEN = "github_token"
SLACK_TOKEN = "slack_token"
GOOGLE_API_KEY = "google_api_key"
JWT = "jwt"
AUTHORIZATION = "authorization"
URL_PASSWORD = "url_password"
SECRET_ASSIGNMENT = "secret_assignment"


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# not inside a longer token: these characters may not stand just before a shaped secret
_START = r"(?<![A-Za-z0-9_\-])"
_END = r"(?![A-Za-z0-9_\-])"

_PEM_LABEL = r"-----BEGIN (?P<label>[A-Z0-9 ]*?PRIVATE KEY)-----"
# an END line closes the block; a block cut short (no END) runs over its base64 and header lines
_PRIVATE_KEY = re.compile(
    _PEM_LABEL + r"(?:[\s\S]{0,16384}?-----END (?P=label)-----"
    r"|(?:(?:\r?\n|\\n)[ \t]*(?:[A-Za-z-]+: [^\r\n\\]*|[A-Za-z0-9+/=]+)(?=\r?\n|\\n|\Z))*)"
)

# (kind, pattern): the whole match is the secret
_SHAPED: list[tuple[str, re.Pattern[str]]] = [
    (ANTHROPIC_KEY, re.compile(_START + r"sk-ant-[A-Za-z0-9_\-]{8,}" + _END)),
    (OPENAI_KEY, re.compile(_START + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}" + _END)),
    (AWS_ACCESS_KEY_ID, re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")),
    (GITHUB_TOKEN, re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,})" + _END)),
    (SLACK_TOKEN, re.compile(_START + r"xox[abposr]-[A-Za-z0-9\-]{10,}" + _END)),
    (GOOGLE_API_KEY, re.compile(_START + r"AIza[0-9A-Za-z_\-]{35}" + _END)),
    (JWT, re.compile(_START + r"eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*" + _END)),
]

# (kind, pattern): group "keep" stays, group "secret" goes
_KEYED: list[tuple[str, re.Pattern[str]]] = [
    (
        AWS_SECRET_ACCESS_KEY,
        re.compile(
            r"(?P<keep>(?<![A-Za-z0-9_])aws_secret_access_key[\"']?\s*[:=]\s*[\"']?)(?P<secret>[A-Za-z0-9/+=]{16,})",
            re.IGNORECASE,
        ),
    ),
    # scheme://user:password@host: the user and host stay
    (
        URL_PASSWORD,
        re.compile(
            r"(?P<keep>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*+://[^:/?#@\s]+:)(?!\[REDACTED:)(?P<secret>[^@/?#\s]+)(?=@)"
        ),
    ),
    (
        AUTHORIZATION,
        re.compile(
            r"(?P<keep>\bAuthorization\\?[\"']?\s*:\s*\\?[\"']?(?:Bearer|Basic|Token)\s+)(?P<secret>[A-Za-z0-9._~+/=\-]+)",
            re.IGNORECASE,
        ),
    ),
]

# key = value, key: value, key := value, "key": "value" (also inside JSON that was itself escaped into a string)
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<kq>\\?[\"']?)(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*+)(?P=kq)(?P<sep>\s*(?::=|[:=])[ \t]*)"
    r"(?:\\\"(?P<esc>(?:(?!\\\")[^\r\n])*)\\\""
    r"|\"(?P<dq>(?:[^\"\\\r\n]|\\.)*)\""
    r"|'(?P<sq>[^'\r\n]*)'"
    r"|(?P<bare>[^\s'\"`,;&{}()\[\]<>]++)(?![(\[{]))"
)

_SECRET_WORDS = {"password", "passwd", "pwd", "secret", "token", "apikey", "passphrase"}
_SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("client", "secret"), ("secret", "key")}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# values that are not secrets: empty, null-ish, placeholders, type annotations, code
_NOT_A_VALUE = re.compile(
    r"(?:null|none|nil|true|false|undefined|str|string|int|bytes|bool|optional|any|secretstr"
    r"|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{\{.*|\*+|x+|\.\.\.|…|\[REDACTED[^\]]*\]?)",
    re.IGNORECASE,
)
# attribute access without digits (settings.db_password, process.env.TOKEN); a dotted token has digits (ya29.a0Af)
_DOTTED_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")


def names_secret(key: str) -> bool:
    """Whether a key names a secret: its last part (or last two) is one of the secret words, any case or style:
    `DB_PASSWORD`, `accessToken`, `x-api-key`, `client_secret`; not `max_tokens`, `token_budget`, `password_reset`."""
    parts = [p.lower() for p in re.split(r"[_.\-]+", _CAMEL.sub("_", key)) if p]
    if not parts:
        return False
    if parts[-1] in _SECRET_WORDS:
        return True
    return len(parts) >= 2 and (parts[-2], parts[-1]) in _SECRET_PAIRS


def _is_value(key: str, value: str, bare: bool) -> bool:
    if not value.strip() or _NOT_A_VALUE.fullmatch(value.strip()):
        return False
    if bare and (value.startswith("$") or _DOTTED_NAME.fullmatch(value)):  # $VAR, settings.password: references
        return False
    # PWD=/home/me is the shell's working directory
    return not (key.lower().rsplit("_", 1)[-1] == "pwd" and value.startswith("/"))


def redact(text: str) -> tuple[str, dict[str, int]]:
    """`text` with every secret replaced by `[REDACTED:<kind>]`, and how many of each kind were replaced."""
    counts: Counter[str] = Counter()

    def whole(kind: str) -> Callable[[re.Match[str]], str]:
        def sub(match: re.Match[str]) -> str:
            counts[kind] += 1
            return placeholder(kind)

        return sub

    def keyed(kind: str) -> Callable[[re.Match[str]], str]:
        def sub(match: re.Match[str]) -> str:
            counts[kind] += 1
            return match.group("keep") + placeholder(kind)

        return sub

    def assignment(match: re.Match[str]) -> str:
        key = match.group("key")
        if not names_secret(key):
            return match.group(0)
        for group, bare in (("esc", False), ("dq", False), ("sq", False), ("bare", True)):
            value = match.group(group)
            if value is None:
                continue
            if not _is_value(key, value, bare):
                return match.group(0)
            counts[SECRET_ASSIGNMENT] += 1
            start, end = match.span(group)
            offset = match.start()
            whole_text = match.group(0)
            return whole_text[: start - offset] + placeholder(SECRET_ASSIGNMENT) + whole_text[end - offset :]
        return match.group(0)

    text = _PRIVATE_KEY.sub(whole(PRIVATE_KEY), text)
    for kind, pattern in _SHAPED:
        text = pattern.sub(whole(kind), text)
    for kind, pattern in _KEYED:
        text = pattern.sub(keyed(kind), text)
    text = _ASSIGNMENT.sub(assignment, text)
    return text, dict(counts)
