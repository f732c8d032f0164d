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
