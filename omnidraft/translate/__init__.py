"""Translation between vocabularies (omnidraft.translate): the vocabulary map, token-level
mapping rules (1)(2) with the n-gram cache, string-level re-tokenisation, and reverse translation
of committed target tokens into the drafter's tokens."""
