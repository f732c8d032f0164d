"""Secret redaction for everything faulthunt records about the environment.

Run directories, repro kits and ``doctor`` output end up pasted into issues and uploaded as CI
artifacts, so variables whose *names* suggest credentials, and values that *look* like
credentials whatever their name, are replaced by ``<redacted>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH|"
    r"COOKIE|SESSION_?ID|SIGNATURE|^PGPASS|_KEY$|_PAT$|^PAT$|WEBHOOK|DSN$|JWT|_PWD$|_PASS$|BEARER)",
    re.IGNORECASE,
)
# Names that match the pattern above but are not secrets in this field.
_SAFE_NAMES = frozenset({
    "SSH_AUTH_SOCK", "XAUTHORITY", "KEYTIMEOUT", "GPG_TTY", "CUDA_CACHE_MAXSIZE",
})
_SECRET_VALUE = re.compile(
    r"(gh[pousr]_[A-Za-z0-9]{20,}"           # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"            # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"         # Slack
    r"|AKIA[0-9A-Z]{16}"                     # AWS access key id
    r"|hf_[A-Za-z0-9]{30,}"                  # Hugging Face
    r"|sk-[A-Za-z0-9_\-]{20,}"               # OpenAI-style keys
    r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"  # JWT
    r"|AIza[0-9A-Za-z_\-]{35}"                # Google API key
    r"|npm_[A-Za-z0-9]{36}"                  # npm
    r"|pypi-AgE[A-Za-z0-9_\-]{20,}"          # PyPI upload token
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
# "Authorization: Bearer <token>", "Authorization: Basic <b64>" in logged headers / curl lines
_AUTH_HEADER = re.compile(r"(?i)\b(?P<head>(?:authorization|proxy-authorization)\s*[:=]\s*(?:bearer|basic|token)?\s*)"
                          r"(?P<value>[^\s'\"]+)")
# "--token VALUE", "--password=VALUE", "-p" is too common to touch (pytest -p plugin)
_SECRET_OPTION = re.compile(r"(?i)(?P<opt>--?(?:[a-z0-9]+[-_])*(?:token|password|passwd|secret|api[-_]?key|access[-_]?key)"
                            r")(?P<sep>[= ]+)(?P<value>[^\s'\"]+)")
# user:password@host in URLs. The scheme is bounded (schemes are short): unbounded, a long
# word with no "://" (a test printing a 100 MB line) was scanned to its end from every letter.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]{0,31}://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")


#: What every pattern above (and redact_text's NAME=value) needs to match: text without it is
#: returned at the cost of one scan. Keep it a superset of every pattern's start when adding one.
SECRET_HINT = re.compile(
    r"\w=|://|(?i:authoriz|token|passw|secret|api[-_]?key|access[-_]?key)"
    r"|gh[pousr]_|github_pat_|glpat-|xox[abprs]-|AKIA|hf_|sk-|eyJ|AIza|npm_|pypi-|-----BEGIN")


def is_secret_name(name: str) -> bool:
    """True for variable names that suggest a credential (``GITHUB_TOKEN``, ``AWS_SECRET_...``)."""
    return name not in _SAFE_NAMES and bool(_SECRET_NAME.search(name))


def redact_value(value: str) -> str:
    """Redact credential-looking parts of a value (tokens, URL passwords), keep the rest."""
    if "://" in value:  # a substring test first: the regex tries every letter of the text
        value = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    value = _AUTH_HEADER.sub(lambda m: f"{m['head']}{REDACTED}", value)
    value = _SECRET_OPTION.sub(lambda m: f"{m['opt']}{m['sep']}{REDACTED}", value)
    return _SECRET_VALUE.sub(REDACTED, value)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line safe to record: ``--token X`` / ``--password=X`` values and secret-looking
    words redacted (run.json's argv, kit scripts' comments)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if _SECRET_OPTION.fullmatch(arg + " x") and "=" not in arg:
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_value(arg))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` safe to write down: secret names blanked, secret-looking values cut."""
    out: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        out[name] = REDACTED if (is_secret_name(name) and value) else redact_value(value)
    return out


def redact_text(text: str) -> str:
    """Redact ``NAME=value`` assignments with secret names, and secret-looking values, in text."""
    if not SECRET_HINT.search(text):  # most captured output: progress lines, tracebacks
        return text
    return _redact_text_fully(text)


def _redact_text_fully(text: str) -> str:
    """redact_text without the SECRET_HINT shortcut (the tests check the shortcut against it)."""

    def _assignment(match: re.Match[str]) -> str:
        name = match["name"]
        return f"{name}={REDACTED}" if is_secret_name(name) else match[0]

    text = re.sub(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S+)", _assignment, text)
    return redact_value(text)
