"""Secret redaction for everything faulthunt writes down: environments, command lines, output.

Run directories, repro kits, reports and ``doctor`` output end up pasted into issues and uploaded
as CI artifacts, so variables whose *names* suggest credentials, and values that *look* like
credentials whatever their name, are replaced by ``<redacted>``. What is and is not caught is
listed in docs/secrets.md.

Every pattern runs in linear time on adversarial input (long runs of ``-a``, letters, ``eyJ``,
spaces): a pattern that may scan far before failing starts only at a boundary, so two attempts
never rescan the same run. Replacements never consume a quote or a backslash, and a token that
starts with an escape letter (``npm_``, ``rk_``) never starts right after a backslash, so
redacting the text of a JSON line keeps its strings intact;
whole documents are redacted decoded (:func:`redact_json`). ``tests/test_redact.py`` checks both.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"


class _Lazy:
    """A pattern compiled at its first use (:attr:`rx`; later uses read it as a plain attribute).
    Compiling every pattern below costs about 20 M instructions (~6 ms), paid at import by each
    process that imports this module (every pytest worker of a stress run), while most of them
    never see a value with a :data:`SECRET_HINT`."""

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source, self._flags = source, flags

    @functools.cached_property
    def rx(self) -> re.Pattern[str]:
        return re.compile(self._source, self._flags)


_SECRET_NAME = _Lazy(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH|"
    r"COOKIE|SESSION_?ID|SIGNATURE|^PGPASS|_KEY$|_PAT$|^PAT$|WEBHOOK|DSN$|JWT|_PWD$|_PASS$|BEARER|"
    r"ACCOUNT_?KEY)",
    re.IGNORECASE,
)
# Names that match the pattern above but are not secrets in this field.
_SAFE_NAMES = frozenset({
    "SSH_AUTH_SOCK", "XAUTHORITY", "KEYTIMEOUT", "GPG_TTY", "CUDA_CACHE_MAXSIZE",
})
# Characters a value may not contain: whitespace, quotes and backslashes end it, so a
# replacement never eats a JSON string's closing quote or half an escape.
_VALUE = r"[^\s'\"\\]"
# Token shapes. Each alternative either has a fixed length or only fails early, except JWT (its
# first segment may run long before a missing dot fails it), which therefore starts at a boundary.
_SECRET_VALUE = _Lazy(
    r"(gh[pousr]_[A-Za-z0-9]{20,}"           # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|gl(?:pat|dt|rt|ptt|soat)-[A-Za-z0-9_\-]{20,}"  # GitLab personal/deploy/runner tokens
    r"|xox[abeprs]-[A-Za-z0-9-]{10,}"        # Slack
    r"|hooks\.slack\.com/services/[A-Za-z0-9/_\-]{20,}"  # Slack incoming webhooks
    r"|A(?:KIA|SIA)[0-9A-Z]{16}"             # AWS access key id (long-term, temporary)
    r"|hf_[A-Za-z0-9]{30,}"                  # Hugging Face
    r"|sk-[A-Za-z0-9_\-]{20,}"               # OpenAI / Anthropic-style keys
    r"|(?:(?<!\\)r|s)k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret / restricted keys
    r"|ya29\.[A-Za-z0-9_\-]{20,}"            # Google OAuth access token
    r"|(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"  # JWT
    r"|AIza[0-9A-Za-z_\-]{35}"                # Google API key
    r"|(?<!\\)npm_[A-Za-z0-9]{36}"           # npm (in JSON text, \npm_ is "\n" + "pm_")
    r"|pypi-AgE[A-Za-z0-9_\-]{20,}"          # PyPI upload token
    r"|dckr_pat_[A-Za-z0-9_\-]{20,}"         # Docker Hub
    # a token cut short by whoever printed it ("ghp_abcdefg..." in pytest's short summary, or
    # cut in the middle, "ghp_a1B2c3D4...2m3N4o5P6q7R8", as pytest's assertion repr shows a long
    # string): the parts shown are still part of the secret. Prefixes only where no word character
    # precedes them ("disk-1..." is not an "sk-" key); the runs are bounded: no backtracking.
    r"|(?<![A-Za-z0-9_])(?:gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt|soat)-|xox[abeprs]-|hf_|sk-|ya29\.|pypi-AgE"
    r"|dckr_pat_|(?:r|s)k_(?:live|test)_)[A-Za-z0-9_\-]{1,60}(?:\.\.\.|…)[A-Za-z0-9_\-]{0,60}"
    # a PEM private key: the header, the base64 body (it stops at the first '-'), the footer
    r"|-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[A-Za-z0-9+/=\s]*(?:-----END [A-Z ]{0,40}PRIVATE KEY-----)?)"
)
# "Authorization: Bearer <token>", "Authorization: Basic <b64>" in logged headers / curl lines.
# The scheme word needs whitespace after it, so the two runs of spaces cannot trade characters.
_AUTH_HEADER = _Lazy(r"(?i)\b(?P<head>(?:authorization|proxy-authorization)\s*[:=]\s*"
                     r"(?:(?:bearer|basic|token)\s+)?)(?P<value>" + _VALUE + "+)")
# a bare "Bearer <token>" (a logged header value, an exception message)
_BEARER = _Lazy(r"\b(?P<head>[Bb]earer\s+)(?P<value>[A-Za-z0-9._~+/\-]{16,}=*)")
# "--token VALUE", "--password=VALUE"; "-p" is too common to touch (pytest -p plugin). It starts
# only where an option can start (not inside a word or a run of dashes): linear on "-a-a-a...".
_SECRET_OPTION = _Lazy(r"(?i)(?<![\w-])(?P<opt>--?(?:[a-z0-9]+[-_])*"
                       r"(?:token|password|passwd|secret|api[-_]?key|access[-_]?key))"
                       r"(?P<sep>[= ]+)(?P<value>" + _VALUE + "+)")
# user:password@host in URLs; the scheme starts at a boundary (linear on long runs of letters)
_URL_CREDENTIALS = _Lazy(r"(?<![a-zA-Z0-9+.\-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)"
                         r"(?P<user>[^:/@\s'\"\\]+):(?P<pw>[^@/\s'\"\\]+)@")
# ?access_token=..., &sig=... in URLs (presigned URLs, API keys in query strings)
_URL_QUERY = _Lazy(r"(?i)(?<=[?&])(?P<key>(?:access_?token|token|api_?key|key|sig|signature|"
                   r"password|passwd|secret|client_secret|auth)=)(?P<value>[^&#\s'\"\\]+)")
# NAME=value and NAME="value" assignments (shell lines, env dumps, logged settings). A quoted
# value holds none of JSON's ,:{}[] and needs its closing quote, so the end of a JSON string
# ("API_TOKEN=", "next") never reads as an opening quote.
_ASSIGNMENT = _Lazy(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)=(?:(?P<quote>['\"])"
                    r"(?P<quoted>[^\s'\"\\,:{}\[\]]+)(?P=quote)|(?P<value>" + _VALUE + "+))")


#: What every pattern above (and redact_text's NAME=value) needs to match: text without it is
#: returned at the cost of one scan. Keep it a superset of every pattern's start when adding one.
SECRET_HINT = re.compile(
    r"\w=|://|(?i:authoriz|bearer|token|passw|secret|api[-_]?key|access[-_]?key)"
    r"|gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt|soat)-|xox[abeprs]-|hooks\.slack\.com|A(?:KIA|SIA)"
    r"|hf_|sk-|[rs]k_(?:live|test)_|ya29\.|eyJ|AIza|npm_|pypi-|dckr_pat_|-----BEGIN")


#: What a name must hold (lower-cased) for _SECRET_NAME to match it: each alternative of the
#: pattern contains one of these words, or ends the name (``_PAT``, ``DSN``, ``_PWD``; the
#: end-anchored ``_KEY`` and ``_PASS`` hold "key" and "pass"). Keep it in step with the pattern.
_NAME_WORDS = ("token", "secret", "pass", "credential", "key", "auth", "cookie", "session",
               "signature", "webhook", "jwt", "bearer")
_NAME_ENDS = ("_pat", "dsn", "_pwd")


def _may_be_secret_name(name: str) -> bool:
    """False only where _SECRET_NAME cannot match ``name``: an ASCII name (``re.IGNORECASE``
    folds a few non-ASCII letters onto ASCII ones, so those go to the pattern) holding none of
    :data:`_NAME_WORDS` and not ending in one of :data:`_NAME_ENDS` (nor being ``PAT``), a
    final newline aside."""
    if not name.isascii():
        return True
    low = name.lower()
    end = low[:-1] if low.endswith("\n") else low  # the pattern's `$` also matches before a final newline
    return end == "pat" or end.endswith(_NAME_ENDS) or any(w in low for w in _NAME_WORDS)


def is_secret_name(name: str) -> bool:
    """True for variable names that suggest a credential (``GITHUB_TOKEN``, ``AWS_SECRET_...``)."""
    return (name not in _SAFE_NAMES and _may_be_secret_name(name)
            and bool(_SECRET_NAME.rx.search(name)))


def _is_secret_name_fully(name: str) -> bool:
    """is_secret_name without the word shortcut (the tests check the shortcut against it)."""
    return name not in _SAFE_NAMES and bool(_SECRET_NAME.rx.search(name))


def redact_value(value: str) -> str:
    """Redact credential-looking parts of a value (tokens, URL passwords), keep the rest."""
    if not SECRET_HINT.search(value):  # an environment's paths and flags: no pattern compiled
        return value
    return _redact_value_gated(value)


#: What _SECRET_VALUE needs to match (it is case-sensitive): every alternative starts with one
#: of these. Keep it in step with the pattern.
_TOKEN_STARTS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "glrt-",
                 "glptt-", "glsoat-", "xox", "hooks.slack.com/services/", "AKIA", "ASIA", "hf_",
                 "sk-", "k_live_", "k_test_", "ya29.", "eyJ", "AIza", "npm_", "pypi-AgE",
                 "dckr_pat_", "-----BEGIN ")
#: What _SECRET_OPTION's option name needs (lower-cased): token, password/passwd, secret,
#: api-key/access-key
_OPTION_WORDS = ("token", "passw", "secret", "key")


def _redact_value_gated(value: str) -> str:
    """:func:`_redact_value_fully`, each pattern run (and compiled) only where the text holds
    what that pattern needs to match, checked on the text as the previous steps left it. Text
    with a non-ASCII character takes every pattern: ``re.IGNORECASE`` folds a few such letters
    (the Kelvin sign, the long s) onto ASCII ones, which lower() does not. Pytest's output hits
    SECRET_HINT on lines such as ``pip install 'x==1'`` (a word character before ``=``): none
    of these needs a pattern compiled."""
    if not value.isascii():
        return _redact_value_fully(value)
    if "://" in value:
        value = _URL_CREDENTIALS.rx.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    if "=" in value and ("?" in value or "&" in value):
        value = _URL_QUERY.rx.sub(lambda m: f"{m['key']}{REDACTED}", value)
    if "authorization" in value.lower():
        value = _AUTH_HEADER.rx.sub(lambda m: f"{m['head']}{REDACTED}", value)
    if "earer" in value:  # [Bb]earer
        value = _BEARER.rx.sub(lambda m: f"{m['head']}{REDACTED}", value)
    low = value.lower()
    if any(w in low for w in _OPTION_WORDS):
        value = _SECRET_OPTION.rx.sub(lambda m: f"{m['opt']}{m['sep']}{REDACTED}", value)
    if any(t in value for t in _TOKEN_STARTS):
        value = _SECRET_VALUE.rx.sub(REDACTED, value)
    return value


def _redact_value_fully(value: str) -> str:
    """redact_value without the SECRET_HINT shortcut."""
    if "://" in value:  # a substring test first: the regex tries every letter of the text
        value = _URL_CREDENTIALS.rx.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    value = _URL_QUERY.rx.sub(lambda m: f"{m['key']}{REDACTED}", value)
    value = _AUTH_HEADER.rx.sub(lambda m: f"{m['head']}{REDACTED}", value)
    value = _BEARER.rx.sub(lambda m: f"{m['head']}{REDACTED}", value)
    value = _SECRET_OPTION.rx.sub(lambda m: f"{m['opt']}{m['sep']}{REDACTED}", value)
    return _SECRET_VALUE.rx.sub(REDACTED, value)


def _takes_value(arg: str) -> bool:
    """``--token`` / ``--password`` without ``=``: the next word is its (secret) value."""
    return ("=" not in arg and SECRET_HINT.search(arg) is not None
            and bool(_SECRET_OPTION.rx.fullmatch(arg + " x")))


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """A command line safe to record: ``--token X`` / ``--password=X`` values, ``NAME=secret``
    words and secret-looking values redacted (run.json's argv, session_start, reports, kits)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if _takes_value(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` safe to write down: secret names blanked, secret-looking values cut."""
    out: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        out[name] = REDACTED if (is_secret_name(name) and value) else redact_value(value)
    return out


def _assignment(match: re.Match[str]) -> str:
    name, quote = match["name"], match["quote"] or ""
    return f"{name}={quote}{REDACTED}{quote}" if is_secret_name(name) else match[0]


def redact_text(text: str) -> str:
    """Redact ``NAME=value`` assignments with secret names, and secret-looking values, in text."""
    if not SECRET_HINT.search(text):  # most captured output: progress lines, tracebacks
        return text
    return _redact_value_gated(_redact_assignments_gated(text))


def _redact_assignments_gated(text: str) -> str:
    """The NAME=value step of :func:`_redact_text_fully`, skipped (its pattern not compiled)
    where no assignment's name can be a secret one: the name ends right before the ``=``, so in
    ASCII text a secret name shows as one of :data:`_NAME_WORDS`, or an end of
    :data:`_NAME_ENDS` (or ``pat``) followed by ``=``."""
    if "=" not in text:
        return text
    if text.isascii():
        low = text.lower()
        if not (any(w in low for w in _NAME_WORDS) or "pat=" in low or "dsn=" in low
                or "_pwd=" in low):
            return text
    return _ASSIGNMENT.rx.sub(_assignment, text)


def _redact_text_fully(text: str) -> str:
    """redact_text without the SECRET_HINT shortcut (the tests check the shortcut against it)."""
    return _redact_value_fully(_ASSIGNMENT.rx.sub(_assignment, text))


# py-spy --locals lines: "            api_token: \"hunter2\"" (an indented name, a colon, the value's
# repr to the end of the line). Anchored at a line's indentation: linear on any input.
_STACK_LOCAL = _Lazy(r"(?m)^(?P<head>[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*): )(?P<value>.*)$")


def redact_stack_dump(text: str) -> str:
    """A py-spy ``dump --locals`` text safe to write down: the value of every argument or local
    with a secret name (``api_token``, ``password``, ``db_secret``) replaced whole, and
    secret-looking values anywhere (:func:`redact_text`)."""
    def local(m: re.Match[str]) -> str:
        return f"{m['head']}{REDACTED}" if is_secret_name(m["name"]) and m["value"] else m[0]

    return redact_text(_STACK_LOCAL.rx.sub(local, text))


def redact_json(data: Any) -> Any:
    """A copy of decoded JSON with every string redacted, the string value of a key with a
    secret name (``"api_token": "..."``) replaced whole, and in a list the word after
    ``--token`` / ``--password`` (an argv as :func:`redact_argv` sees it). Keys and non-strings
    are kept.

    Iterative, so a record nested 100,000 deep (a damaged or hostile line) cannot overflow the stack.
    """
    if not isinstance(data, (str, list, dict)):
        return data
    if isinstance(data, str):
        return redact_text(data)
    root: Any = [] if isinstance(data, list) else {}
    stack: list[tuple[Any, Any]] = [(data, root)]
    while stack:
        src, dst = stack.pop()
        hide_next = False
        for key, value in (enumerate(src) if isinstance(src, list) else src.items()):
            if isinstance(value, str):
                secret = hide_next or (isinstance(key, str) and value and is_secret_name(key))
                new: Any = REDACTED if secret else redact_text(value)
                hide_next = isinstance(src, list) and _takes_value(value)
            elif isinstance(value, (list, dict)):
                new = [] if isinstance(value, list) else {}
                stack.append((value, new))  # filled later; its place in dst is kept now
            else:
                new = value
            if isinstance(dst, list):
                dst.append(new)
            else:
                dst[key] = new
    return root
