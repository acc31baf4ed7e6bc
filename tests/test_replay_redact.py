"""Secrets are replaced by `[REDACTED:<kind>]` and counted; prose that merely mentions them is left alone."""

from __future__ import annotations

import pytest

from cairn_cli.core.replay.redact import names_secret, redact

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
        (f"key {ANT} here", "key [REDACTED:anthropic_key] here", "anthropic_key"),
        (f"key {OAI_LEGACY}.", "key [REDACTED:openai_key].", "openai_key"),
        (f"({OAI_PROJ})", "([REDACTED:openai_key])", "openai_key"),
        (f"id {AWS_ID} ok", "id [REDACTED:aws_access_key_id] ok", "aws_access_key_id"),
        (
            f"aws_secret_access_key = {AWS_SECRET}",
            "aws_secret_access_key = [REDACTED:aws_secret_access_key]",
            "aws_secret_access_key",
        ),
        (
            f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
            "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]",
            "aws_secret_access_key",
        ),
        ("ghp_" + "A1b2" * 9, "[REDACTED:github_token]", "github_token"),
        ("gho_" + "A1b2" * 9, "[REDACTED:github_token]", "github_token"),
        ("ghu_" + "A1b2" * 9, "[REDACTED:github_token]", "github_token"),
        ("ghs_" + "A1b2" * 9, "[REDACTED:github_token]", "github_token"),
        ("ghr_" + "A1b2" * 9, "[REDACTED:github_token]", "github_token"),
        ("github_pat_11ABCDEFG0" + "x1Y2" * 15, "[REDACTED:github_token]", "github_token"),
        ("slack xoxb-1234567890-0987654321-AbCdEfGh", "slack [REDACTED:slack_token]", "slack_token"),
        ("xoxp-1234567890-abcdef", "[REDACTED:slack_token]", "slack_token"),
        (f"maps {GOOGLE} end", "maps [REDACTED:google_api_key] end", "google_api_key"),
        (f"session={JWT}", "session=[REDACTED:jwt]", "jwt"),
        (
            "Authorization: Bearer abc123.def_456-ghi",
            "Authorization: Bearer [REDACTED:authorization]",
            "authorization",
        ),
        (
            'curl -H "authorization: bearer tok_live_123" https://x',
            'curl -H "authorization: bearer [REDACTED:authorization]" https://x',
            "authorization",
        ),
        (
            '{"Authorization": "Bearer opaque-token-42"}',
            '{"Authorization": "Bearer [REDACTED:authorization]"}',
            "authorization",
        ),
        (
            "postgres://alice:s3cr3t!pw@db.internal:5432/app",
            "postgres://alice:[REDACTED:url_password]@db.internal:5432/app",
            "url_password",
        ),
        (
            "git clone https://bob:hunter2@git.example.com/repo.git",
            "git clone https://bob:[REDACTED:url_password]@git.example.com/repo.git",
            "url_password",
        ),
        ("DB_PASSWORD=hunter2", "DB_PASSWORD=[REDACTED:secret_assignment]", "secret_assignment"),
        ("password: correct horse", "password: [REDACTED:secret_assignment] horse", "secret_assignment"),
        ("passwd = 'p@ss w0rd'", "passwd = '[REDACTED:secret_assignment]'", "secret_assignment"),
        ("pwd=letmein", "pwd=[REDACTED:secret_assignment]", "secret_assignment"),
        ('secret: "shh"', 'secret: "[REDACTED:secret_assignment]"', "secret_assignment"),
        ("GITHUB_TOKEN=abc123", "GITHUB_TOKEN=[REDACTED:secret_assignment]", "secret_assignment"),
        ('{"api_key": "abc123"}', '{"api_key": "[REDACTED:secret_assignment]"}', "secret_assignment"),
        ("APIKEY=abc123", "APIKEY=[REDACTED:secret_assignment]", "secret_assignment"),
        ("access_key: AbC123", "access_key: [REDACTED:secret_assignment]", "secret_assignment"),
        ('"client_secret":"q1w2e3"', '"client_secret":"[REDACTED:secret_assignment]"', "secret_assignment"),
        ("private_key = 0xdeadbeef", "private_key = [REDACTED:secret_assignment]", "secret_assignment"),
        ("accessToken: ya29.a0AfH6SMBx", "accessToken: [REDACTED:secret_assignment]", "secret_assignment"),
        ("x-api-key: abcd1234", "x-api-key: [REDACTED:secret_assignment]", "secret_assignment"),
        ('Token := "t0k"', 'Token := "[REDACTED:secret_assignment]"', "secret_assignment"),
        (
            "GET /cb?access_token=abc123&state=9",
            "GET /cb?access_token=[REDACTED:secret_assignment]&state=9",
            "secret_assignment",
        ),
        (
            '{\\"password\\": \\"hunter2\\"}',  # JSON escaped inside a JSON string
            '{\\"password\\": \\"[REDACTED:secret_assignment]\\"}',
            "secret_assignment",
        ),
        ('"secret": "a\\"b c"', '"secret": "[REDACTED:secret_assignment]"', "secret_assignment"),
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
    assert redact(text) == ("before\n[REDACTED:private_key]\nafter", {"private_key": 1})


@pytest.mark.parametrize("label", ["PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"])
def test_private_key_labels(label):
    block = f"-----BEGIN {label}-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\n-----END {label}-----"
    assert redact(f"x {block} y") == ("x [REDACTED:private_key] y", {"private_key": 1})


def test_private_key_cut_short_is_redacted_over_its_base64_lines():
    text = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEAu1SU1Lf\nVTLw7onLRnrq0/IzW7==\n\nthe rest is prose."
    assert redact(text) == ("[REDACTED:private_key]\n\nthe rest is prose.", {"private_key": 1})


def test_private_key_in_escaped_json():
    text = '{"file": "' + PEM.replace("\n", "\\n") + '\\nmore"}'
    assert redact(text) == ('{"file": "[REDACTED:private_key]\\nmore"}', {"private_key": 1})


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
        "private_key": 1,
        "anthropic_key": 1,
        "openai_key": 2,
        "aws_access_key_id": 2,
        "jwt": 1,
        "url_password": 1,
        "secret_assignment": 3,
    }
    for secret in (ANT, OAI_PROJ, OAI_LEGACY, AWS_ID, JWT, "hunter2", "t1", "k2", "MIIEowIBAAKCAQEA", "pw123"):
        assert secret not in redacted
    assert '"max_tokens": 5' in redacted
    assert "ANTHROPIC_API_KEY=[REDACTED:anthropic_key]" in redacted
    assert "Authorization: Bearer [REDACTED:jwt]" in redacted
    assert "redis://default:[REDACTED:url_password]@cache:6379" in redacted


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
        ("aws_secret_access_key", True),
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
