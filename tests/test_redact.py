"""Secrets are replaced by `[redacted:<kind>]` and counted; prose that merely mentions them is left alone."""

from __future__ import annotations

import pytest

from cairn_cli.core.redact import names_secret, redact

# all fake: shaped like the real thing, never issued
ANT = "sk-ant-api03-" + "Ab3_" * 20 + "xyzAA"
OAI_LEGACY = "sk-" + "a1B2c3D4" * 6
OAI_PROJ = "sk-proj-" + "Zz9_-Yy8" * 10
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GOOGLE = "AIza" + "SyA-1b2C3d4E5f6G7h8I9j0K_lMnOpQrStU"[:35]
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
PEM = """-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun
VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK
-----END RSA PRIVATE KEY-----"""


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        (f"key {ANT} here", "key [redacted:anthropic-key] here", "anthropic-key"),
        (f"key {OAI_LEGACY}.", "key [redacted:openai-key].", "openai-key"),
        (f"({OAI_PROJ})", "([redacted:openai-key])", "openai-key"),
        (f"id {AWS_ID} ok", "id [redacted:aws-key] ok", "aws-key"),
        (
            f"aws_secret_access_key = {AWS_SECRET}",
            "aws_secret_access_key = [redacted:aws-secret]",
            "aws-secret",
        ),
        (
            f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
            "AWS_SECRET_ACCESS_KEY=[redacted:aws-secret]",
            "aws-secret",
        ),
        ("ghp_" + "A1b2" * 9, "[redacted:github-token]", "github-token"),
        ("gho_" + "A1b2" * 9, "[redacted:github-token]", "github-token"),
        ("ghu_" + "A1b2" * 9, "[redacted:github-token]", "github-token"),
        ("ghs_" + "A1b2" * 9, "[redacted:github-token]", "github-token"),
        ("ghr_" + "A1b2" * 9, "[redacted:github-token]", "github-token"),
        ("github_pat_11ABCDEFG0" + "x1Y2" * 15, "[redacted:github-token]", "github-token"),
        ("slack xoxb-1234567890-0987654321-AbCdEfGh", "slack [redacted:slack-token]", "slack-token"),
        ("xoxp-1234567890-abcdef", "[redacted:slack-token]", "slack-token"),
        (f"maps {GOOGLE} end", "maps [redacted:gcp-key] end", "gcp-key"),
        (f"session={JWT}", "session=[redacted:jwt]", "jwt"),
        (
            "Authorization: Bearer abc123.def_456-ghi",
            "Authorization: Bearer [redacted:authorization]",
            "authorization",
        ),
        (
            'curl -H "authorization: bearer tok_live_123" https://x',
            'curl -H "authorization: bearer [redacted:authorization]" https://x',
            "authorization",
        ),
        (
            '{"Authorization": "Bearer opaque-token-42"}',
            '{"Authorization": "Bearer [redacted:authorization]"}',
            "authorization",
        ),
        (
            "postgres://alice:s3cr3t!pw@db.internal:5432/app",
            "postgres://alice:[redacted:url-password]@db.internal:5432/app",
            "url-password",
        ),
        (
            "git clone https://bob:hunter2@git.example.com/repo.git",
            "git clone https://bob:[redacted:url-password]@git.example.com/repo.git",
            "url-password",
        ),
        ("DB_PASSWORD=hunter2", "DB_PASSWORD=[redacted:secret]", "secret"),
        ("password: correct horse", "password: [redacted:secret] horse", "secret"),
        ("passwd = 'p@ss w0rd'", "passwd = '[redacted:secret]'", "secret"),
        ("pwd=letmein", "pwd=[redacted:secret]", "secret"),
        ('secret: "shh"', 'secret: "[redacted:secret]"', "secret"),
        ("GITHUB_TOKEN=abc123", "GITHUB_TOKEN=[redacted:secret]", "secret"),
        ('{"api_key": "abc123"}', '{"api_key": "[redacted:secret]"}', "secret"),
        ("APIKEY=abc123", "APIKEY=[redacted:secret]", "secret"),
        ("access_key: AbC123", "access_key: [redacted:secret]", "secret"),
        ('"client_secret":"q1w2e3"', '"client_secret":"[redacted:secret]"', "secret"),
        ("private_key = 0xdeadbeef", "private_key = [redacted:secret]", "secret"),
        ("accessToken: ya29.a0AfH6SMBx", "accessToken: [redacted:secret]", "secret"),
        ("x-api-key: abcd1234", "x-api-key: [redacted:secret]", "secret"),
        ('Token := "t0k"', 'Token := "[redacted:secret]"', "secret"),
        (
            "GET /cb?access_token=abc123&state=9",
            "GET /cb?access_token=[redacted:secret]&state=9",
            "secret",
        ),
        (
            '{\\"password\\": \\"hunter2\\"}',  # JSON escaped inside a JSON string
            '{\\"password\\": \\"[redacted:secret]\\"}',
            "secret",
        ),
        ('"secret": "a\\"b c"', '"secret": "[redacted:secret]"', "secret"),
    ],
)
def test_each_pattern_redacts_and_counts(text, expected, kind):
    assert redact(text) == (expected, {kind: 1})


@pytest.mark.parametrize(
    "text",
    [
        "the token budget is tight this week",
        "implement the password reset flow",
        "rotate the secret before Friday; the api key lives in the vault",
        "Authorization uses a bearer scheme",
        '{"max_tokens": 1024, "input_tokens": 12, "output_tokens": 3}',
        "token_budget = 4000",
        "password_reset_url: https://example.com/reset",
        "scikit-learn is imported as sklearn; sk-learn is not a key",
        "http://localhost:8080/path and https://example.com:443/x",
        "AKIA is the prefix of an AWS key id",
        "eyJ alone is not a JWT",
        "ghp_ is how a GitHub token starts",
        "-----BEGIN PUBLIC KEY-----",
        "PWD=/home/me/project",
        'password = ""',
        "token: str",
        "password: Optional[str] = None",
        "token = get_token()",
        'password = os.environ["DB_PASSWORD"]',
        "password = settings.db_password",
        "token = self.token",
        "const token = process.env.TOKEN;",
        "TOKEN=$GITHUB_TOKEN",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "password: null",
        "secret: ***",
        "risk-assessment-framework-document-v2-final",
    ],
)
def test_prose_and_code_that_only_mention_secrets_are_left_alone(text):
    assert redact(text) == (text, {})


def test_private_key_block_spanning_lines():
    text = f"before\n{PEM}\nafter"
    assert redact(text) == ("before\n[redacted:private-key]\nafter", {"private-key": 1})


@pytest.mark.parametrize("label", ["PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"])
def test_private_key_labels(label):
    block = f"-----BEGIN {label}-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\n-----END {label}-----"
    assert redact(f"x {block} y") == ("x [redacted:private-key] y", {"private-key": 1})


def test_private_key_cut_short_is_redacted_over_its_base64_lines():
    text = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEAu1SU1Lf\nVTLw7onLRnrq0/IzW7==\n\nthe rest is prose."
    assert redact(text) == ("[redacted:private-key]\n\nthe rest is prose.", {"private-key": 1})


def test_private_key_in_escaped_json():
    text = '{"file": "' + PEM.replace("\n", "\\n") + '\\nmore"}'
    assert redact(text) == ('{"file": "[redacted:private-key]\\nmore"}', {"private-key": 1})


def test_counts_per_kind_over_a_mixed_text():
    text = "\n".join(
        [
            f"ANTHROPIC_API_KEY={ANT}",  # the shaped key wins: counted once, as anthropic_key
            f"OPENAI_API_KEY={OAI_PROJ}",
            f"other {OAI_LEGACY}",
            f"aws {AWS_ID} and {AWS_ID}",
            f"Authorization: Bearer {JWT}",  # the JWT inside the header: counted once, as jwt
            "DB_PASSWORD=hunter2",
            '{"token": "t1", "max_tokens": 5, "api_key": "k2"}',
            PEM,
            "redis://default:pw123@cache:6379",
        ]
    )
    redacted, counts = redact(text)
    assert counts == {
        "private-key": 1,
        "anthropic-key": 1,
        "openai-key": 2,
        "aws-key": 2,
        "jwt": 1,
        "url-password": 1,
        "secret": 3,
    }
    for secret in (ANT, OAI_PROJ, OAI_LEGACY, AWS_ID, JWT, "hunter2", "t1", "k2", "MIIEowIBAAKCAQEA", "pw123"):
        assert secret not in redacted
    assert '"max_tokens": 5' in redacted
    assert "ANTHROPIC_API_KEY=[redacted:anthropic-key]" in redacted
    assert "Authorization: Bearer [redacted:jwt]" in redacted
    assert "redis://default:[redacted:url-password]@cache:6379" in redacted


def test_redacting_twice_changes_nothing():
    text = f"DB_PASSWORD=hunter2 {ANT} {PEM} https://u:p@h"
    once, _ = redact(text)
    assert redact(once) == (once, {})


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("DB_PASSWORD", True),
        ("clientSecret", True),
        ("aws-secret", True),
        ("x-api-key", True),
        ("SECRET_KEY", True),
        ("max_tokens", False),
        ("token_budget", False),
        ("password_reset", False),
        ("keyboard", False),
    ],
)
def test_names_secret(key, secret):
    assert names_secret(key) is secret
