"""Remote targets (omnidraft.remote): the target verified across the network. `omnidraft
serve-target`'s verification server and its gate, the device-side ``RemoteTarget`` with its local
fallback, and ``OpenAITarget`` verifying through a serving engine's OpenAI API. Not to be confused
with omnidraft/serve/, the pair's own OpenAI-compatible server (`omnidraft serve`)."""
