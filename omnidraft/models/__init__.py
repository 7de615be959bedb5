"""Models (omnidraft.models): the catalog of packaged weights, loading, and the eager runtime
(``CausalLM``) behind the ``LM`` protocol the decode loop drives."""
