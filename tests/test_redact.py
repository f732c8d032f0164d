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


# --- shapes added with issue 18, linear time, JSON safety ---------------------------------------

import json  # noqa: E402

from faulthunt.redact import redact_json  # noqa: E402

GHP = "ghp_" + "T0k3n" * 8


@pytest.mark.parametrize("text,secret", [
    ("ASIA" + "Q" * 16, "ASIA"),
    ("https://hooks.slack.com/services/T000/B000/" + "x" * 24, "/B000/"),
    ("stripe sk_live_" + "a1" * 12, "sk_live_"),
    ("oauth ya29." + "z" * 30, "ya29."),
    ("glrt-" + "r" * 24, "glrt-"),
    ("dckr_pat_" + "d" * 27, "dckr_pat_"),
    ("GET https://s3.example/obj?X-Amz-Credential=a&sig=abcdef123&x=1", "abcdef123"),
    ("https://api.example/v1?api_key=k3y-value", "k3y-value"),
    ("headers: Bearer abcdefghijklmnop.qrstuv", "abcdefghijklmnop"),
    ("Authorization:     Bearer s3cretvalue", "s3cretvalue"),
    ('export API_TOKEN="quoted-value"', "quoted-value"),
])
def test_more_secret_shapes(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and REDACTED in out, out


def test_private_key_block_is_redacted_whole() -> None:
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n"
    text = f"before\n-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\nafter: done."
    out = redact_text(text)
    assert "MIIEvQ" not in out and "BKcwgg" not in out and "END RSA" not in out
    assert out.startswith("before\n") and out.endswith("after: done.")


def test_argv_redacts_secret_options_urls_and_assignments() -> None:
    argv = ["faulthunt", "stress", "--", f"--api-token={GHP}", "--service-url=https://user:pa55@host/x",
            "API_KEY=plain", "--faulthunt-id=t.py::test_password[x]", "-k", "token"]
    out = redact_argv(argv)
    joined = " ".join(out)
    for secret in (GHP, "pa55", "plain"):
        assert secret not in joined
    assert out[:3] == argv[:3] and out[-3:] == argv[-3:]
    assert out[3] == f"--api-token={REDACTED}" and out[4] == f"--service-url=https://user:{REDACTED}@host/x"


def test_redact_json_walks_strings_and_secret_keys() -> None:
    doc = {"argv": ["x", f"--token={GHP}", "--password", "opaque2", "-k", "x"],
           "env": {"MY_API_KEY": "opaque", "PATH": "/bin"},
           "n": 3, "nested": [{"message": f"E  AssertionError: {GHP}"}], "empty_token": ""}
    out = redact_json(doc)
    assert GHP not in json.dumps(out) and "opaque" not in json.dumps(out)
    assert out["env"]["PATH"] == "/bin" and out["n"] == 3 and out["empty_token"] == ""
    assert out["argv"][2:] == ["--password", REDACTED, "-k", "x"]


_JSONISH = st.lists(st.sampled_from([
    "a", "Z", "0", " ", "\n", "\t", '"', "'", "\\", "=", ":", "/", "@", "-", "_", ".", "?", "&",
    GHP, "npm_", "npm_" + "n" * 36, "rk_live_" + "r" * 16, "API_TOKEN=", "--token ", "https://u:p@h",
    "Authorization: Bearer ", "eyJ", "AKIA", "-----BEGIN PRIVATE KEY-----",
]), max_size=40).map("".join)


@given(_JSONISH)
def test_redacting_json_text_keeps_it_json(text: str) -> None:
    for separators in ((", ", ": "), (",", ":")):
        line = json.dumps({"message": text, "k": [text]}, separators=separators)
        out = json.loads(redact_text(line))
        assert GHP not in out["message"]


# Inputs on which the patterns before issue 18 backtracked quadratically: "-a" * 20,000
# took 44 s, 40,000 letters 2.9 s, "eyJ" * 13,000 3.6 s, "authorization:" + 20,000 spaces 6.3 s.
ADVERSARIAL = {
    "dash-a": "-a", "dashes": "-", "letters": "a", "jwt-heads": "eyJ", "spaces": " ",
    "auth": "authorization: ", "bearer": "Bearer ", "url": "a://b:", "assign": "a=",
    "pem": "-----BEGIN PRIVATE KEY-----", "option": "--a_", "query": "?key=&",
}


def test_linear_time_on_adversarial_input() -> None:
    """Every shape at 400,000 characters, in a child process killed at a generous limit: linear
    patterns take about 6 s here in all, the old quadratic ones hours (catastrophe, not speed)."""
    import subprocess
    import sys

    code = f"""
from faulthunt.redact import redact_argv, redact_text
for name, unit in {ADVERSARIAL!r}.items():
    prefix = "authorization:" if name == "spaces" else ("http://u:" if name == "letters" else "")
    text = prefix + unit * (400_000 // len(unit))
    redact_text(text)
    redact_argv([text])
print("done")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "done", proc.stderr


def test_redact_json_of_a_deep_record_does_not_overflow() -> None:
    deep: object = GHP
    for _ in range(100_000):
        deep = [deep]
    out = redact_json({"x": deep})["x"]
    for _ in range(100_000):
        out = out[0]
    assert out == REDACTED


# `py-spy dump --native --locals --pid PID` of a sleeping function (py-spy 0.4, CPython 3.11.7,
# x86_64 Linux), its locals planted
PYSPY_LOCALS = '''Thread 30482 (idle)
    clock_nanosleep (libc.so.6)
    f (spyme.py:7)
        Arguments:
            session_token: "abc-plain-value-1"
        Locals:
            api_token: "hunter2plainvalue"
            password: "pw-not-a-shape"
            gh: "ghp_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
            my_secret_key: {"a": 1}
            count: 3
    <module> (spyme.py:8)
'''


def test_stack_dump_hides_secret_named_locals_and_secret_shapes() -> None:
    from faulthunt.redact import redact_stack_dump

    out = redact_stack_dump(PYSPY_LOCALS)
    for secret in ("abc-plain-value-1", "hunter2plainvalue", "pw-not-a-shape", "ghp_AAAA", '"a": 1'):
        assert secret not in out
    assert "            password: <redacted>" in out
    assert '            gh: "<redacted>"' in out
    assert "            count: 3" in out and "f (spyme.py:7)" in out and "Locals:" in out


def test_kit_copy_of_a_hang_dump_hides_secret_named_locals(tmp_path) -> None:
    from faulthunt.scrub import copy_scrubbed

    (tmp_path / "run" / "hangs").mkdir(parents=True)
    (tmp_path / "run" / "hangs" / "gw0-1.py-spy.txt").write_text(PYSPY_LOCALS)
    assert copy_scrubbed(tmp_path / "run", tmp_path / "kit") == []
    dump = (tmp_path / "kit" / "hangs" / "gw0-1.py-spy.txt").read_text()
    assert "hunter2plainvalue" not in dump and "api_token: <redacted>" in dump


@pytest.mark.parametrize("text", [
    "E   AssertionError: leak ghp_abcdefg...",          # pytest's short summary cuts the message
    "FAILED t.py::test_x - leak ghp_abcdefg…",          # the one-character ellipsis
    "key sk-proj12...", "xoxb-1234...", "hf_AbCd...", "token github_pat_11AB...", "sk_live_4eC3...",
])
def test_a_token_cut_short_is_still_redacted(text):
    out = redact_text(text)
    assert REDACTED in out and not any(p in out for p in ("ghp_a", "sk-p", "xoxb-1", "hf_A", "github_pat_1", "sk_live_4"))


def test_a_token_cut_in_the_middle_leaves_neither_end():
    # pytest's assertion repr of a long string keeps its head and its tail around "..."
    out = redact_text("E       AssertionError: assert 'ghp_a1B2c3D4...2m3N4o5P6q7R8' == 'x'")
    assert out == "E       AssertionError: assert '<redacted>' == 'x'"


@pytest.mark.parametrize("text", ["disk-1...", "ask-me...", "ghp_...", "shelf_x...", "risk-2…"])
def test_words_that_end_like_a_token_prefix_are_left_alone(text):
    assert redact_text(text) == text
