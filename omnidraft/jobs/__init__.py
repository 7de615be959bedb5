"""The product's long jobs, built on the Session: pairing a drafter with a target (`omnidraft
pair`) and the demo (`omnidraft demo`). Above the pair's parts (omnidraft.pairs) and the Session,
below the CLI."""
