"""Pairs (omnidraft.pairs): a drafter bound to a target with its state on disk, and the
`omnidraft pair` / `omnidraft demo` jobs."""
