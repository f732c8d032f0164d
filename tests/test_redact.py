from __future__ import annotations

from faulthunt.redact import REDACTED, is_secret_name, redact_env, redact_text


def test_names_that_suggest_secrets() -> None:
    for name in ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "HF_TOKEN", "NPM_AUTH",
                 "MY_API_KEY", "PGPASSWORD", "SLACK_WEBHOOK_URL"]:
        assert is_secret_name(name), name
    for name in ["PATH", "CUDA_VISIBLE_DEVICES", "HOME", "SSH_AUTH_SOCK", "PYTEST_XDIST_WORKER"]:
        assert not is_secret_name(name), name


def test_env_redaction_keeps_the_useful_rest() -> None:
    env = {
        "GITHUB_TOKEN": "ghp_" + "a" * 36,
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PIP_INDEX_URL": "https://user:hunter2@pypi.example/simple",
        "NOTE": "token is ghp_" + "b" * 36,
        "EMPTY_TOKEN": "",
    }
    out = redact_env(env)
    assert out["GITHUB_TOKEN"] == REDACTED
    assert out["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert out["PIP_INDEX_URL"] == f"https://user:{REDACTED}@pypi.example/simple"
    assert "ghp_" not in out["NOTE"]
    assert out["EMPTY_TOKEN"] == ""


def test_text_redaction() -> None:
    text = "HF_TOKEN=hf_" + "x" * 34 + " CUDA_LAUNCH_BLOCKING=1 AKIAABCDEFGHIJKLMNOP"
    out = redact_text(text)
    assert "HF_TOKEN=<redacted>" in out and "CUDA_LAUNCH_BLOCKING=1" in out
    assert "AKIA" not in out


def test_more_secret_names() -> None:
    for name in ["CI_JOB_JWT", "MYSQL_PWD", "REDIS_PASS", "BEARER_TOKEN", "TWINE_PASSWORD",
                 "GOOGLE_APPLICATION_CREDENTIALS", "ACTIONS_RUNTIME_TOKEN"]:
        assert is_secret_name(name), name
    for name in ["KEYTIMEOUT", "MONKEY", "CUDA_LAUNCH_BLOCKING", "PYTEST_ADDOPTS"]:
        assert not is_secret_name(name), name


import pytest  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from faulthunt.redact import redact_argv, redact_value  # noqa: E402


@pytest.mark.parametrize("text,secret", [
    ("Authorization: Bearer abcdefghijklmnopqrstuvwx123456", "abcdefghijklmnopqrstuvwx123456"),
    ("curl -H 'Authorization: token ghp_" + "q" * 36 + "'", "ghp_"),
    ("key AIza" + "b" * 35, "AIza"),
    ("npm_" + "c" * 36, "npm_"),
    ("twine upload -p pypi-AgEIcHlwaS5vcmc" + "d" * 30, "pypi-AgE"),
    ("pip --index-url https://me:s3cret@pypi.corp/simple", "s3cret"),
    ("tool --api-key=zzzsecretzzz --verbose", "zzzsecretzzz"),
    ("tool --hf-token hf_notlongenough", "hf_notlongenough"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "BEGIN OPENSSH PRIVATE KEY"),
])
def test_secret_values_in_text(text: str, secret: str) -> None:
    out = redact_value(text)
    assert secret not in out and REDACTED in out


def test_argv_redaction_keeps_pytest_options() -> None:
    argv = ["faulthunt", "stress", "-p", "no:cacheprovider", "--token", "abc123", "--password=pw",
            "-k", "test_token_refresh", "tests/test_auth.py::test_password[x]"]
    out = redact_argv(argv)
    assert out[:4] == argv[:4]
    assert out[5] == REDACTED and out[6] == f"--password={REDACTED}"
    assert out[7:] == argv[7:]  # test names that merely mention tokens are not secrets


def test_redaction_keeps_ordinary_text() -> None:
    text = "NVRM: Xid (PCI:0000:00:06): 31, pid=617, name=faults, channel 0x0000000a"
    assert redact_text(text) == text


@given(st.text())
def test_redaction_is_idempotent_and_total(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once
