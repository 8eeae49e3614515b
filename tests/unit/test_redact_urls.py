"""The URL masking scans only where a scheme can end (``://``), and finds exactly what the
regex's own scan of the whole text finds: the same URLs, masked the same way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from k3rollout.evidence import redact

# the characters that decide where a URL begins and ends, two that case-fold to ASCII
# letters under re.IGNORECASE (KELVIN SIGN, LATIN SMALL LETTER LONG S), and whole pieces
PIECES = st.one_of(
    st.sampled_from(list("ab:/?@=&#.-+1 \n\"'<>_%\u212a\u017f")),
    st.sampled_from(["http://", "https://u:pw@h/p?token=t&x=1", "s3://b/k?X-Amz-Signature=zz", "://", ":///",
                     "a+b.c-d://", "sig=", "?", "@", "user:pass@", "1http://h", "-://x", "a://b://c@d?pass=p"]))


def _scan_all(text: str) -> str:
    return redact._URL.sub(redact._url, text)


@settings(max_examples=600, deadline=None)
@given(st.lists(PIECES, max_size=40).map("".join))
def test_url_scan_matches_the_regex_over_the_whole_text(text):
    assert redact._urls(text) == _scan_all(text)


def test_url_scan_masks_every_url_in_a_long_text():
    words = ("token" * 40 + " ") * 500
    text = words + "see https://ops:hunter2@registry.example/v2?sig=abc&x=1 and ftp://a@b " + words
    out = redact._urls(text)
    assert out == _scan_all(text)
    assert "hunter2" not in out and "sig=abc" not in out and "x=1" in out
    assert out.startswith(words) and out.endswith(words)
    assert redact._urls("no url here: a=b") == "no url here: a=b"
