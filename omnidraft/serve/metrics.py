"""``GET /metrics``: the server's totals in Prometheus' text format, under the names vLLM uses for
speculative decoding (``spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total``) with the ``omnidraft:`` prefix, plus what only OmniDraft has:
copies from the context, the adapter version drafting now, the conversation slots.

Knows the Runner's counters; nothing about HTTP.
"""

from __future__ import annotations


def prometheus(runner, model: str) -> str:
    c = runner.counters
    session = runner.session
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP omnidraft:{name} {help_}", f"# TYPE omnidraft:{name} {kind}"])
        lines.extend(f"omnidraft:{name}{labels} {value:g}" for labels, value in samples)

    m = f'model_name="{model}"'
    metric("spec_decode_num_drafts_total", "counter", "Rounds that verified a draft of the drafter.",
           [(f"{{{m}}}", c.drafts)])
    metric("spec_decode_num_draft_tokens_total", "counter", "Target tokens the drafter proposed.",
           [(f"{{{m}}}", c.draft_tokens)])
    metric("spec_decode_num_accepted_tokens_total", "counter", "Proposed drafter tokens the target accepted.",
           [(f"{{{m}}}", c.accepted)])
    metric("spec_decode_num_copies_total", "counter", "Rounds that verified a continuation copied from the context.",
           [(f"{{{m}}}", c.copies)])
    metric("spec_decode_num_copy_tokens_total", "counter", "Tokens copied from the context and proposed.",
           [(f"{{{m}}}", c.copy_tokens)])
    metric("spec_decode_num_accepted_copy_tokens_total", "counter", "Copied tokens the target accepted.",
           [(f"{{{m}}}", c.copied)])
    metric("target_forwards_total", "counter", "Target forward passes (one per round).", [(f"{{{m}}}", c.target_forwards)])
    metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", [(f"{{{m}}}", c.prompt_tokens)])
    metric("prompt_tokens_cached_total", "counter", "Prompt tokens a slot's cache already held.",
           [(f"{{{m}}}", c.prompt_cached)])
    metric("generation_tokens_total", "counter", "Tokens generated.", [(f"{{{m}}}", c.generation_tokens)])
    metric("request_success_total", "counter", "Requests by how they ended.",
           [(f'{{{m},finished_reason="{k}"}}', v) for k, v in sorted(c.requests.items())] or [(f"{{{m}}}", 0)])
    metric("requests_rejected_total", "counter", "Requests refused with 429: the queue was full.",
           [(f"{{{m}}}", c.rejected)])
    metric("num_requests_running", "gauge", "Requests generating now.", [(f"{{{m}}}", runner.running)])
    metric("num_requests_waiting", "gauge", "Requests waiting for their turn.", [(f"{{{m}}}", runner.waiting)])
    if session is not None:
        metric("slots", "gauge", "Conversation slots (caches kept between requests).", [(f"{{{m}}}", session.slots)])
        version = session.version or "none"
        metric("adapter_info", "gauge", "The drafter's adapter version drafting now.",
               [(f'{{{m},version="{version}"}}', 1)])
    return "\n".join(lines) + "\n"
