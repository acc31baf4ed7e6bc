"""The one redaction step every entrance takes (docs/privacy.md): `<private>…</private>` spans removed, then each
secret replaced by a typed placeholder (`[redacted:aws-key]`) so that ranking and engagement still see that
something was there. `scrub(text)` is what an entrance calls; `redact(text)` -> (text, count per kind) is the
counting form (replay's report, `cairn redact --scan`); `assess(text)` tells a memory that is mostly secret.

One set of patterns: shaped tokens first (the formats secret scanners document: cloud keys, GitHub / GitLab / Slack /
Stripe / OpenAI / Anthropic / Hugging Face / npm / PyPI tokens, JWTs, private-key blocks), then keyed values (a
connection URL's password, an `Authorization:` header, a SAS signature), then `name = value` assignments whose name
names a secret, then a high-entropy string next to a secret-like word ("my token is 8f3Kx…"). Stdlib only, each
pattern compiled the first time a text needs it: the prompt hook's hot path pays no heavy import."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from cairn_cli.core.private import same_length_lower, strip_private


class _Lazy:
    """A pattern compiled the first time it is used: the hook's process pays no compile for a text that never
    needs it (importing this module compiles nothing)."""

    __slots__ = ("_compiled", "flags", "source")

    def __init__(self, source: str, flags: int = 0):
        self.source, self.flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.source, self.flags)
        return self._compiled


PRIVATE_KEY = "private-key"
ANTHROPIC_KEY = "anthropic-key"
OPENAI_KEY = "openai-key"
AWS_KEY = "aws-key"
AWS_SECRET = "aws-secret"
GCP_KEY = "gcp-key"
GCP_OAUTH = "gcp-oauth-token"
AZURE_KEY = "azure-key"
AZURE_CLIENT_SECRET = "azure-client-secret"
AZURE_SAS = "azure-sas"
GITHUB_TOKEN = "github-token"
GITLAB_TOKEN = "gitlab-token"
SLACK_TOKEN = "slack-token"
SLACK_WEBHOOK = "slack-webhook"
STRIPE_KEY = "stripe-key"
HUGGINGFACE_TOKEN = "huggingface-token"
NPM_TOKEN = "npm-token"
PYPI_TOKEN = "pypi-token"
SENDGRID_KEY = "sendgrid-key"
DIGITALOCEAN_TOKEN = "digitalocean-token"
SHOPIFY_TOKEN = "shopify-token"
DATABRICKS_TOKEN = "databricks-token"
TELEGRAM_TOKEN = "telegram-bot-token"
JWT = "jwt"
AUTHORIZATION = "authorization"
URL_PASSWORD = "url-password"
SECRET = "secret"  # a value assigned to a secret-like name, or a high-entropy string next to one

PLACEHOLDER = _Lazy(r"\[(?:redacted|REDACTED):[A-Za-z0-9_\-]+\]")


def placeholder(kind: str) -> str:
    return f"[redacted:{kind}]"


# not inside a longer token: these characters may not stand just before or after a shaped secret
_START = r"(?<![A-Za-z0-9_\-])"
_END = r"(?![A-Za-z0-9_\-])"

_PEM_LABEL = r"-----BEGIN (?P<label>[A-Z0-9 ]*?PRIVATE KEY(?: BLOCK)?)-----"
# an END line closes the block; a block cut short (no END) runs over its base64 and header lines
_PRIVATE_KEY = (
    _PEM_LABEL + r"(?:[\s\S]{0,16384}?-----END (?P=label)-----"
    r"|(?:(?:\r?\n|\\n)[ \t]*(?:[A-Za-z-]+: [^\r\n\\]*|[A-Za-z0-9+/= ]*[A-Za-z0-9+/=])(?=\r?\n|\\n|\Z)){0,200})"
)


class _Rule(_Lazy):
    """One pattern, tried only on a text that holds one of its triggers (lower-case substrings every match
    contains): a prompt without them costs a substring test, not a regex scan."""

    __slots__ = ("kind", "mode", "triggers")

    def __init__(self, kind: str, triggers: tuple[str, ...], source: str, mode: str = "whole", flags: int = 0):
        super().__init__(source, flags)
        self.kind, self.triggers, self.mode = kind, triggers, mode

    def applies(self, lowered: str) -> bool:
        return any(t in lowered for t in self.triggers)


def _shaped(kind: str, triggers: tuple[str, ...], body: str, flags: int = 0) -> _Rule:
    return _Rule(kind, triggers, _START + body + _END, flags=flags)


# mode "whole": the match is the secret; "keyed": group "keep" stays, group "secret" goes. Order matters: a more
# specific shape first (an Anthropic key before an OpenAI one, a shaped token before the assignment that holds it).
_RULES: list[_Rule] = [
    _Rule(PRIVATE_KEY, ("-----begin",), _PRIVATE_KEY),
    _shaped(ANTHROPIC_KEY, ("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    _shaped(OPENAI_KEY, ("sk-",), r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"),
    _Rule(
        AWS_KEY,
        ("akia", "asia", "abia", "acca", "a3t"),
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])",
    ),
    _shaped(
        GITHUB_TOKEN,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    _shaped(
        GITLAB_TOKEN,
        ("gl", "gr1348941"),
        r"(?:gl(?:pat|dt|rt|cbt|oas|ft|imt|soat|sa|agent)-[A-Za-z0-9_\-]{20,}|glptt-[0-9a-f]{40}"
        r"|GR1348941[A-Za-z0-9_\-]{20,})",
    ),
    _shaped(SLACK_TOKEN, ("xox", "xapp-"), r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})"),
    _Rule(
        SLACK_WEBHOOK,
        ("hooks.slack.com/",),
        r"https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
    ),
    _shaped(
        STRIPE_KEY,
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
        r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})",
    ),
    _shaped(GCP_KEY, ("aiza",), r"AIza[0-9A-Za-z_\-]{35}"),
    _Rule(GCP_OAUTH, ("ya29.",), r"(?<![A-Za-z0-9_\-.])ya29\.[0-9A-Za-z_\-]{20,}" + _END),
    _shaped(HUGGINGFACE_TOKEN, ("hf_", "api_org_"), r"(?:hf_|api_org_)[A-Za-z0-9]{34}"),
    _shaped(NPM_TOKEN, ("npm_",), r"npm_[A-Za-z0-9]{36}"),
    _shaped(PYPI_TOKEN, ("pypi-age",), r"pypi-AgE[A-Za-z0-9_\-]{40,}"),
    _shaped(SENDGRID_KEY, ("sg.",), r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,64}"),
    _shaped(DIGITALOCEAN_TOKEN, ("_v1_",), r"do[opr]_v1_[a-f0-9]{64}"),
    _shaped(SHOPIFY_TOKEN, ("shpat_", "shpca_", "shppa_", "shpss_"), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _shaped(DATABRICKS_TOKEN, ("dapi",), r"dapi[a-f0-9]{32}(?:-\d)?"),
    _Rule(TELEGRAM_TOKEN, (":aa",), r"(?<![0-9:])\d{8,10}:AA[A-Za-z0-9_\-]{33}" + _END),
    _Rule(
        AZURE_CLIENT_SECRET,
        ("q~",),
        r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])",
    ),
    _shaped(JWT, ("eyj",), r"eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
    # scheme://user:password@host: the user and host stay
    _Rule(
        URL_PASSWORD,
        ("://",),
        r"(?P<keep>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*+://[^:/?#@\s\"'`<>]*:)(?!\[redacted:)"
        r"(?P<secret>[^@/?#\s\"'`<>]+)(?=@)",
        "keyed",
        re.IGNORECASE,
    ),
    _Rule(
        AUTHORIZATION,
        ("authorization",),
        r"(?P<keep>\bAuthorization\\?[\"']?\s*:\s*\\?[\"']?(?:(?:Bearer|Basic|Token|Digest|ApiKey)\s+)?)(?!\[redacted:)"
        r"(?P<secret>[A-Za-z0-9._~+/=\-]+)",
        "header",
        re.IGNORECASE,
    ),
    # a bearer token without its header (`-H "Bearer …"`, "use Bearer …"): long and with a digit
    _Rule(
        AUTHORIZATION,
        ("bearer",),
        r"(?P<keep>\bBearer\s+)(?P<secret>(?=[A-Za-z._~+/\-]*\d)[A-Za-z0-9._~+/\-]{16,}=*)" + _END,
        "keyed",
    ),
    _Rule(AZURE_SAS, ("sig=",), r"(?P<keep>[?&]sig=)(?P<secret>[A-Za-z0-9%+/=]{20,})", "keyed"),
    # curl -u user:password, --user "user:password": the user stays
    _Rule(
        AUTHORIZATION,
        ("-u", "--user"),
        r"(?P<keep>(?<!\S)(?:-u|--user)(?:\s+|=)[\"']?[^:\s\"'$<>]+:)(?!\[redacted:)(?P<secret>[^\s\"'<>]+)(?![^\s\"'])",
        "keyed",
    ),
    # `aws configure set aws_secret_access_key VALUE`, `aws_secret_access_key: VALUE`
    _Rule(
        AWS_SECRET,
        ("aws_secret_access_key", "aws_session_token"),
        r"(?P<keep>\b(?:aws_secret_access_key|aws_session_token)[\"']?\s*[:=\s]\s*[\"']?)(?!\[redacted:)"
        r"(?P<secret>[A-Za-z0-9/+=]{30,})",
        "keyed",
        re.IGNORECASE,
    ),
]

# key = value, key: value, key := value, "key": "value" (also inside JSON that was itself escaped into a string)
# the value is matched in a lookahead: a key that names no secret consumes only itself and its separator, so that
# the scan goes on inside its value ("runbook: aws_secret_access_key = …", a file's text quoted in JSON)
_ASSIGNMENT = (
    r"(?<![A-Za-z0-9_.\-])(?P<kq>\\?[\"']?)(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*+)(?P=kq)(?P<sep>\s*(?::=|[:=])[ \t]*)"
    r"(?=\\\"(?P<esc>(?:(?!\\\")[^\r\n])*)\\\""
    r"|\"(?P<dq>(?:[^\"\\\r\n]|\\.)*)\""
    r"|'(?P<sq>[^'\r\n]*)'"
    r"|(?P<bare>[^\s'\"`,;&{}()\[\]<>]++)(?![(\[{]))"
)
_SECRET_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "credential")

_SECRET_WORDS = {"password", "passwd", "pwd", "secret", "token", "apikey", "passphrase", "credential", "credentials"}
_SECRET_PAIRS = {
    ("api", "key"),
    ("access", "key"),
    ("private", "key"),
    ("client", "secret"),
    ("secret", "key"),
    ("account", "key"),
    ("signing", "key"),
    ("encryption", "key"),
    ("master", "key"),
    ("auth", "key"),
    ("subscription", "key"),
    ("session", "key"),
}
# a key that names what a secret is not: its hash, whether one is set
_NOT_SECRET_PARTS = {
    *("hashed", "hash", "has", "is", "use", "needs", "require", "requires", "length", "min", "max"),
    *("id", "name", "url", "path", "file", "arn", "type", "env", "var", "variable", "ref", "version", "count"),
}
_CAMEL = _Lazy(r"(?<=[a-z0-9])(?=[A-Z])")
# values that are not secrets: empty, null-ish, placeholders, type annotations, code
_NOT_A_VALUE = _Lazy(
    r"(?:null|none|nil|true|false|undefined|str|string|int|bytes|bool|optional|any|secretstr|required|redacted"
    r"|changeme|example|xxx+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{\{.*|%\(?[A-Za-z_]*\)?s?|\*+|x+|\.\.\.|…"
    r"|\[(?:redacted|REDACTED)[^\]]*\]?)",
    re.IGNORECASE,
)
# attribute access without digits (settings.db_password, process.env.TOKEN); a dotted token has digits (ya29.a0Af)
_DOTTED_NAME = _Lazy(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")

# a high-entropy string right after a secret-like word: "my token is 8f3Kx…", "api key: …", "password was Tr0ub4dor&3"
_NEAR_NAME = (
    r"(?i:\b(?P<name>pass(?:word|wd|phrase)?|secret|token|api[ _-]?key|access[ _-]?key|secret[ _-]?key"
    r"|private[ _-]?key|client[ _-]?secret|credentials?|pwd)\b)"
    r"(?:\s+(?i:is|was|are|of|here|for\s+[\w.\-]{1,40}\s+is))?[ \t]*[:=]?[ \t]+[\"'`]?"
    r"(?P<secret>[^\s\"'`<>()\[\]{},;]{6,})"
)
# setProperty("DB_PASSWORD", "…"), os.environ.setdefault('TOKEN', '…'): a call's name and value
_CALL_PAIR = (
    r"\(\s*(?P<q1>[\"'])(?P<key>[A-Za-z_][\w.\-]*)(?P=q1)\s*,\s*(?:\"(?P<dq>[^\"\\\r\n]+)\"|'(?P<sq>[^'\r\n]+)')"
)
# a Kubernetes env entry: `- name: REDIS_PASSWORD` and on the next line `value: …`
_NAME_VALUE = (
    r"\bname:[ \t]*[\"']?(?P<key>[A-Za-z_][\w.\-]*)[\"']?[ \t]*(?:\r?\n|\\n)[ \t\-]*value:[ \t]*"
    r"(?:\"(?P<dq>[^\"\r\n]+)\"|'(?P<sq>[^'\r\n]+)'|(?P<bare>[^\s'\"]+))"
)
_RULES += [
    _Rule(SECRET, _SECRET_TRIGGERS, _CALL_PAIR, "assignment"),
    _Rule(SECRET, _SECRET_TRIGGERS, _NAME_VALUE, "assignment"),
    _Rule(SECRET, _SECRET_TRIGGERS, _ASSIGNMENT, "assignment"),
    _Rule(SECRET, _SECRET_TRIGGERS, _NEAR_NAME, "near"),
]
_PASSWORDISH = _Lazy(r"(?i)pass|pwd")
_TRAILING = ".,:;!?"


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    import math

    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _high_entropy(name: str, value: str) -> bool:
    """Whether `value`, next to the secret-like word `name`, reads as a secret rather than a word or a path."""
    if (
        "://" in value
        or value[0] in "/~.$%"
        or PLACEHOLDER.pattern.fullmatch(value)
        or _DOTTED_NAME.pattern.fullmatch(value)
    ):
        return False
    if value.isalpha() or re.fullmatch(r"[a-z_]+|[A-Z_]+|[a-z]+(?:-[a-z]+)+", value):  # a word, a snake or kebab name
        return False
    classes = sum(bool(re.search(p, value)) for p in ("[a-z]", "[A-Z]", "[0-9]", r"[^A-Za-z0-9]"))
    if _PASSWORDISH.pattern.search(name):  # a password needs no length: letters with digits or symbols
        return classes >= 2 and not value.isdigit()
    return len(value) >= 16 and classes >= 2 and entropy(value) >= 3.0


def _key_parts(key: str) -> list[str]:
    """A key's words, lower case, whatever its style: `DB_PASSWORD`, `accessToken`, `x-api-key`."""
    return [p.lower() for p in re.split(r"[_.\-]+", _CAMEL.pattern.sub("_", key)) if p]


def names_secret(key: str) -> bool:
    """Whether a key names a secret: its last part (or last two) is one of the secret words, any case or style:
    `DB_PASSWORD`, `accessToken`, `x-api-key`, `client_secret`, `AccountKey`; not `max_tokens`, `token_budget`,
    `password_reset`."""
    parts = _key_parts(key)
    if not parts or any(p in _NOT_SECRET_PARTS for p in parts):
        return False
    if parts[-1] in _SECRET_WORDS:
        return True
    return len(parts) >= 2 and (parts[-2], parts[-1]) in _SECRET_PAIRS


def mentions_secret(key: str) -> bool:
    """Whether some part of a key is a secret word (`VERY_SECRET_TOO`, `SECRET_VALUE_2`): its value is a secret only
    when it also looks like one (high entropy)."""
    parts = _key_parts(key)
    return any(p in _SECRET_WORDS for p in parts) and not any(p in _NOT_SECRET_PARTS for p in parts)


def _assignment_kind(key: str) -> str:
    lowered = key.lower().replace("-", "_")
    if "aws" in lowered and "secret" in lowered:
        return AWS_SECRET
    if lowered in ("accountkey", "sharedaccesskey", "azure_storage_key", "azure_storage_account_key"):
        return AZURE_KEY
    return SECRET


def _is_value(key: str, value: str, bare: bool) -> bool:
    if len(value.strip()) < 2 or _NOT_A_VALUE.pattern.fullmatch(value.strip()):
        return False
    if bare and (value.startswith("$") or _DOTTED_NAME.pattern.fullmatch(value)):  # $VAR, settings.password: references
        return False
    # PWD=/home/me is the shell's working directory
    return not (key.lower().rsplit("_", 1)[-1] == "pwd" and value.startswith("/"))


class Redaction:
    """What one pass found: the redacted text, the count per kind, and how many characters were secret."""

    __slots__ = ("counts", "secret_chars", "text")

    def __init__(self, text: str, counts: dict[str, int], secret_chars: int):
        self.text, self.counts, self.secret_chars = text, counts, secret_chars


def _redact(text: str) -> Redaction:
    counts: Counter[str] = Counter()
    secret_chars = 0

    def whole(kind: str) -> Callable[[re.Match[str]], str]:
        def sub(match: re.Match[str]) -> str:
            nonlocal secret_chars
            counts[kind] += 1
            secret_chars += len(match.group(0))
            return placeholder(kind)

        return sub

    def keyed(kind: str) -> Callable[[re.Match[str]], str]:
        def sub(match: re.Match[str]) -> str:
            nonlocal secret_chars
            counts[kind] += 1
            secret_chars += len(match.group("secret"))
            return match.group("keep") + placeholder(kind)

        return sub

    def assignments(pattern: re.Pattern[str], text: str) -> str:
        """Each `key = value` whose key names a secret (or mentions one, with a value that looks like one) with its
        value replaced. A match whose value is a lookahead (_ASSIGNMENT) resumes the scan at the value."""
        nonlocal secret_chars
        out, pos = [], 0
        while (match := pattern.search(text, pos)) is not None:
            key, groups = match.group("key"), match.groupdict()
            named = names_secret(key)
            found = next(
                (
                    (g, bare)
                    for g, bare in (("esc", False), ("dq", False), ("sq", False), ("bare", True))
                    if groups.get(g) is not None
                ),
                None,
            )
            resume = max(match.end(), match.start() + 1)
            if found is not None and (named or mentions_secret(key)):
                group, bare = found
                value = groups[group]
                if _is_value(key, value, bare) and (named or _high_entropy("", value)):
                    kind = _assignment_kind(key)
                    counts[kind] += 1
                    secret_chars += len(value)
                    start, end = match.span(group)
                    out += [text[pos:start], placeholder(kind)]
                    pos = end
                    continue
            out.append(text[pos:resume])
            pos = resume
        out.append(text[pos:])
        return "".join(out)

    def header(match: re.Match[str]) -> str:
        """An Authorization header's credentials: a scheme's (Bearer, Basic, …) of any length, or without a scheme a
        long value with a digit; never a placeholder (`Basic ...`)."""
        keep, value = match.group("keep"), match.group("secret")
        schemed = not keep.rstrip().endswith(":") and not keep.rstrip().endswith(("'", '"'))
        if not re.search(r"[A-Za-z0-9]", value) or _NOT_A_VALUE.pattern.fullmatch(value):
            return match.group(0)
        if not schemed and (len(value) < 16 or not re.search(r"\d", value)):
            return match.group(0)
        return keyed(AUTHORIZATION)(match)

    def near(match: re.Match[str]) -> str:
        nonlocal secret_chars
        value = match.group("secret").rstrip(_TRAILING)
        if not value or not _high_entropy(match.group("name"), value):
            return match.group(0)
        counts[SECRET] += 1
        secret_chars += len(value)
        start = match.start("secret") - match.start()
        whole_text = match.group(0)
        return whole_text[:start] + placeholder(SECRET) + whole_text[start + len(value) :]

    lowered = text.lower()
    for rule in _RULES:
        if not rule.applies(lowered):
            continue
        if rule.mode == "whole":
            text = rule.pattern.sub(whole(rule.kind), text)
        elif rule.mode == "keyed":
            text = rule.pattern.sub(keyed(rule.kind), text)
        elif rule.mode == "header":
            text = rule.pattern.sub(header, text)
        else:
            pattern = rule.pattern
            if rule.mode == "assignment":
                text = _around(text, rule.triggers, lambda part, p=pattern: assignments(p, part))  # type: ignore[misc]
            else:
                text = _around(text, rule.triggers, lambda part, p=pattern: p.sub(near, part))  # type: ignore[misc]
    return Redaction(text, dict(counts), secret_chars)


_BEFORE, _AFTER = 160, 2048  # a secret-like word's key starts this close before it; its value ends this close after


def _around(text: str, triggers: tuple[str, ...], scan: Callable[[str], str]) -> str:
    """`scan` applied to the parts of `text` around its secret-like words (each from the start of the word before,
    up to _AFTER characters on), not to the whole: a key that names a secret holds one of these words, so a long
    text with a few of them costs a few short scans. Overlapping parts are merged; a part starts where a word
    starts, so that a key is never read from its middle."""
    lowered = same_length_lower(text)
    spans = []
    for word in triggers:
        at = lowered.find(word)
        while at >= 0:
            spans.append((max(0, at - _BEFORE), min(len(text), at + len(word) + _AFTER)))
            at = lowered.find(word, at + 1)
    if not spans:
        return text
    spans.sort()
    out, pos, start, end = [], 0, spans[0][0], spans[0][1]
    for s, e in [*spans[1:], (len(text) + 1, len(text) + 1)]:
        if s <= end:
            end = max(end, e)
            continue
        while start > pos and (text[start - 1].isalnum() or text[start - 1] in "_.-\\\"'"):
            start -= 1  # back to the start of the word (and its quote) the part would cut
        out += [text[pos:start], scan(text[start:end])]
        pos, start, end = end, s, e
    out.append(text[pos:])
    return "".join(out)


def redact(text: str) -> tuple[str, dict[str, int]]:
    """`text` with every secret replaced by `[redacted:<kind>]`, and how many of each kind were replaced."""
    found = _redact(text)
    return found.text, found.counts


def scrub(text: str) -> str:
    """What every entrance stores, logs or ranks: `<private>` spans removed, then secrets redacted."""
    return _redact(strip_private(text)).text


MOSTLY = 0.5  # a memory whose secret characters are at least this share of its text is refused


def assess(text: str) -> Redaction:
    """A memory's text scrubbed, with the share of it that was secret (placeholders already in the text count as
    the secrets they stand for): `mostly_secret(found, text)` decides whether it is refused."""
    found = _redact(strip_private(text))
    found.secret_chars += sum(len(m.group(0)) for m in PLACEHOLDER.pattern.finditer(text))
    return found


def mostly_secret(found: Redaction, original: str) -> bool:
    """Whether a memory is mostly secret: its secrets are at least MOSTLY of its characters, or what is left once
    they are out is fewer than three words."""
    if not found.counts and not PLACEHOLDER.pattern.search(found.text):
        return False
    left = re.findall(r"[A-Za-z]{2,}", PLACEHOLDER.pattern.sub(" ", found.text))
    return found.secret_chars >= MOSTLY * max(1, len(original.strip())) or len(left) < 3


def holds_placeholder(text: str) -> bool:
    return PLACEHOLDER.pattern.search(text) is not None


class ScrubbingStream:
    """A text stream that scrubs what is written to it: the daemon's stderr, which daemon.log receives (a warning or
    a traceback may quote a prompt)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(scrub(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def transform_strings(value, transform: Callable[[str], tuple[str, int]]) -> tuple[object, int]:
    """A JSON-like value (dicts, lists, strings) with each string transformed; how many replacements were made."""
    if isinstance(value, str):
        return transform(value)
    if isinstance(value, dict):
        total, out = 0, {}
        for k, v in value.items():
            out[k], n = transform_strings(v, transform)
            total += n
        return out, total
    if isinstance(value, list):
        total, items = 0, []
        for v in value:
            item, n = transform_strings(v, transform)
            items.append(item)
            total += n
        return items, total
    return value, 0


def scrub_tree(value):
    """`value` (JSON-like) with every string scrubbed: a record written whole (the spool, a replay run)."""
    return transform_strings(value, lambda text: (scrub(text), 0))[0]
