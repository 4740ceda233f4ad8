"""User text → FTS5 queries that never raise: every term is quoted, operators become words."""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
MAX_TERMS = 24  # a pasted page must not become a 2,000-term query

# Words that carry no topic: matching on them ranks every memory that says "I" or "what".
STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during", "each", "else", "ever", "few", "for", "from", "further", "get", "gets", "got", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "just", "know", "let", "let's", "lot", "me", "might", "more", "most", "much", "must", "mustn't", "my", "myself", "need", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "please", "really", "same", "shall", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "tell", "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "thing", "things", "this", "those", "through", "to", "too", "under", "until", "up", "upon", "us", "very", "want", "was", "wasn't", "way", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom", "why", "why's", "will", "with", "won't", "would", "wouldn't", "yes", "yet", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "remember", "remind", "recall", "think", "any", "anything", "something", "give", "show", "suggest", "recommend", "help", "best", "good", "make", "sure", "say", "said", "again", "kind", "sort", "ok", "okay", "hey", "hi", "hello", "thanks", "thank", "usually", "often", "always", "never", "sometimes", "normally", "generally", "typically", "currently", "actually", "maybe", "perhaps", "probably", "also", "even", "still", "already"])


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_terms(text: str, limit: int = MAX_TERMS) -> list[str]:
    """Distinct topic words of `text`, in order of first appearance."""
    seen: dict[str, None] = {}
    for w in words(text):
        w = w.split("'")[0] if w.endswith(("'s", "'d", "'ll", "'re", "'ve", "'m")) else w
        if w in STOPWORDS or (len(w) < 2 and not w.isdigit()):
            continue
        seen.setdefault(w, None)
        if len(seen) >= limit:
            break
    return list(seen)


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def any_of(text: str) -> str:
    """Matches rows with at least one topic word of `text`; "" when it has none."""
    return " OR ".join(_quoted(t) for t in content_terms(text))


def all_of(text: str) -> str:
    """Matches rows containing every topic word of `text`; "" when it has none."""
    return " AND ".join(_quoted(t) for t in content_terms(text))
