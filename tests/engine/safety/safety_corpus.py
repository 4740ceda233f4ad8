"""The labelled corpus for precision/recall: per detector category, positives as (text, the
substring that must be found) and negatives as plain texts, with deliberate near-misses."""

from __future__ import annotations

import safety_corpus_personal
import safety_corpus_secrets
from safety_samples import BLOCKLIST_POLICY, RNG  # noqa: F401 - the policy the corpus assumes

# The same corpus whichever test modules drew samples before this one was imported.
RNG.seed(20240601)
POSITIVES = safety_corpus_secrets.positives() | safety_corpus_personal.positives()
NEGATIVES = safety_corpus_secrets.negatives() | safety_corpus_personal.negatives()
