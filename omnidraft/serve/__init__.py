"""The pair's own server (`omnidraft serve`): the drafter and target behind OpenAI's API, for any
app, chat UI or IDE plugin that speaks it, with a chat page at /. Not the remote-target side:
that is omnidraft/remote/ (`omnidraft serve-target`, engines verified over their APIs)."""
