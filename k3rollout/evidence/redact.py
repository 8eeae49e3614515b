"""Masking credentials in text k3rollout keeps: the journal, evidence, reports, events.

Two kinds of secret are found by their shape, whatever the run's variables are called:

- in URLs, the password of ``user:password@`` and the value of every query parameter whose
  name looks secret (``?token=``, ``&sig=``, ``api_key=``...);
- in captured environments and command lines (``docker inspect`` Env, ``NAME=value``,
  ``--api-key value``), the value of every variable or flag whose name holds TOKEN, KEY,
  SECRET, PASSWORD, PASSWD, PASSPHRASE or CREDENTIAL (a name ending in FILE, PATH or DIR
  names where a secret is, not the secret, and is kept).

A masked value reads ``[masked:sha256:<hex>]``: the digest of the value it replaces, so two
captures can still be compared (the serving container's environment before and after the
change is the same, or not) without the value itself being kept. Secrets known by their
variable names (engine/runner.py ``secret_values``) are masked as well, by value.
"""

from __future__ import annotations

import hashlib
import re

_WORDS = r"(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL)"
# the word ends the name or a part of it (HF_TOKEN, apiKey, SECRET_KEY_BASE; not
# StrictHostKeyChecking); a name ending in FILE/PATH/DIR points at a secret, and is kept
_SECRET_NAME = re.compile(rf"(?i)-*[A-Za-z0-9_-]*?{_WORDS}S?(?:[-_][A-Za-z0-9_-]*)?")
_POINTER = re.compile(r"(?i).*[-_]?(?:FILE|PATH|DIR)$")
_QUERY_NAMES = re.compile(rf"(?i)^(?:[a-z0-9_.-]*{_WORDS}[a-z0-9_.-]*|sig|signature|auth|authorization|pass|pwd|"
                          r"x-amz-signature|x-amz-credential|x-amz-security-token)$")
_HINT = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL")      # searched in the upper-cased text
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")

# NAME=value in an environment (docker inspect "Env": ["HF_TOKEN=..."], env output, a
# `docker run -e` argument); the value ends at whitespace, a quote, a comma or a bracket.
# Every NAME=value is found (greedy, linear) and the name checked afterwards.
_ENV = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z_][A-Za-z0-9_]*)=([^\s\"',\]\)]+)")
# --api-key VALUE, --api-key=VALUE, and in JSON argv: "--api-key", "VALUE"
_FLAG = re.compile(r"(?<![A-Za-z0-9_-])(--?[A-Za-z][A-Za-z0-9_-]*)(=|[ \t]+|\"\s*,\s*\")([^\s\"',\]\)-][^\s\"',\]\)]*)")
_URL = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)([^\s/?#@\"'<>]*@)?([^\s?#\"'<>]*)(\?[^\s#\"'<>]*)?")
_SCHEME_CHAR = re.compile(r"(?i)[a-z0-9+.-]")        # what the scheme of _URL is made of


def _secret_name(name: str) -> bool:
    return _SECRET_NAME.fullmatch(name) is not None and _POINTER.match(name) is None


def masked(value: str) -> str:
    """The stand-in for a secret value: its sha256, never the value."""
    return f"[masked:sha256:{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()}]"


def _done(value: str) -> bool:
    """Masked already: here, or by value as a known secret (``********``)."""
    return value.startswith(("[masked:", "********"))


def _userinfo(info: str) -> str:
    user, colon, password = info[:-1].partition(":")
    return f"{user}:{masked(password)}@" if colon and password and not _done(password) else info


def _query(q: str) -> str:
    parts = []
    for item in q[1:].split("&"):
        name, eq, value = item.partition("=")
        if eq and value and _QUERY_NAMES.match(name) and not _done(value):
            item = f"{name}={masked(value)}"
        parts.append(item)
    return "?" + "&".join(parts)


def _url(m: re.Match[str]) -> str:
    scheme, info, rest, query = m.group(1), m.group(2), m.group(3), m.group(4)
    return str(scheme) + (_userinfo(info) if info else "") + rest + (_query(query) if query else "")


def _env(m: re.Match[str]) -> str:
    name, value = m.group(1), m.group(2)
    return f"{name}={masked(value)}" if _secret_name(name) and not _done(value) else m.group(0)


def _flag(m: re.Match[str]) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    return f"{name}{sep}{masked(value)}" if _secret_name(name) and not _done(value) else m.group(0)


def _names(text: str) -> str:
    """Mask NAME=value and --flag value where NAME holds a secret word. Only the names
    around each occurrence of such a word are looked at (a linear scan of the text)."""
    out: list[str] = []
    last = 0
    for hit in _HINT.finditer(text.upper()):
        start = hit.start()
        if start < last:
            continue
        while start > last and text[start - 1] in _NAME_CHARS:
            start -= 1
        if start > 0 and text[start - 1] == ".":
            continue                    # a dotted key (kernel.keys.maxkeys=200), not a variable
        m = _FLAG.match(text, start) if text.startswith("-", start) else _ENV.match(text, start)
        if m is None:
            continue
        new = _flag(m) if text.startswith("-", start) else _env(m)
        if new != m.group(0):
            out.append(text[last:start])
            out.append(new)
            last = m.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _urls(text: str) -> str:
    """``_URL.sub(_url, text)``, in time linear in the text: the pattern is tried only where
    a scheme can end, at each ``://``. Run over the whole text, the regex engine tried the
    scheme at every letter of every word (a long token or a streamed reply took
    milliseconds: a sixth of the engine's CPU at 1,000 nodes). The match is the one the
    scan would find: it begins at the first position of the scheme characters before the
    ``://`` (none of them is a ``:``) where the pattern matches, and never before the end
    of the previous URL."""
    out: list[str] = []
    last = 0
    pos = text.find("://")
    while pos != -1:
        start = pos
        while start > last and _SCHEME_CHAR.match(text, start - 1):
            start -= 1
        m = next((m for s in range(start, pos) if (m := _URL.match(text, s)) is not None), None)
        if m is None:
            pos = text.find("://", pos + 1)
            continue
        out.append(text[last:m.start()])
        out.append(_url(m))
        last = m.end()
        pos = text.find("://", last)
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def mask_credentials(text: str) -> str:
    """``text`` with URL credentials and secret-named environment values and flags masked."""
    if "://" in text and ("@" in text or "?" in text):
        text = _urls(text)
    return _names(text)
