"""``GET /metrics``: the server's totals in Prometheus' text format, under the names vLLM uses for
speculative decoding (``spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total``) with the ``omnidraft:`` prefix, plus what only OmniDraft has:
copies from the context, recalls from the memory of earlier answers, the adapter version drafting
now, the conversation slots, the memory's size, the target's runtime and exactness, and where the
process's resident memory is (measure/resident.py).

Knows the Runner's counters; nothing about HTTP.
"""

from __future__ import annotations

from omnidraft.measure.resident import resident
from omnidraft.pairs.build import exactness


COUNTERS = [  # (name, help, the Counters field)
    ("spec_decode_num_drafts_total", "Rounds that verified a draft of the drafter.", "drafts"),
    ("spec_decode_num_draft_tokens_total", "Target tokens the drafter proposed.", "draft_tokens"),
    ("spec_decode_num_accepted_tokens_total", "Proposed drafter tokens the target accepted.", "accepted"),
    ("spec_decode_num_copies_total", "Rounds that verified a continuation copied from the context.", "copies"),
    ("spec_decode_num_copy_tokens_total", "Tokens copied from the context and proposed.", "copy_tokens"),
    ("spec_decode_num_accepted_copy_tokens_total", "Copied tokens the target accepted.", "copied"),
    ("spec_decode_num_recalls_total", "Rounds that verified a continuation recalled from the memory of earlier "
     "answers.", "recalls"),
    ("spec_decode_num_recall_tokens_total", "Tokens recalled from the memory and proposed.", "recall_tokens"),
    ("spec_decode_num_accepted_recall_tokens_total", "Recalled tokens the target accepted.", "recalled"),
    ("target_forwards_total", "Target forward passes (one per round).", "target_forwards"),
    ("prompt_tokens_total", "Prompt tokens of finished requests.", "prompt_tokens"),
    ("prompt_tokens_cached_total", "Prompt tokens a slot's cache already held.", "prompt_cached"),
    ("prompt_tokens_restored_ram_total", "Prompt tokens whose caches a conversation state saved in RAM gave back "
     "(--cache-ram).", "prompt_restored_ram"),
    ("prompt_tokens_restored_disk_total", "Prompt tokens whose caches a conversation state saved on disk gave back.",
     "prompt_restored_disk"),
    ("generation_tokens_total", "Tokens generated.", "generation_tokens"),
    ("requests_rejected_total", "Requests refused with 429: the queue was full.", "rejected"),
]


def prometheus(runner, model: str) -> str:
    c = runner.counters
    session = runner.session
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP omnidraft:{name} {help_}", f"# TYPE omnidraft:{name} {kind}"])
        lines.extend(f"omnidraft:{name}{labels} {value:g}" for labels, value in samples)

    m = f'model_name="{model}"'
    for name, help_, value in COUNTERS:
        metric(name, "counter", help_, [(f"{{{m}}}", getattr(c, value))])
    metric("request_success_total", "counter", "Requests by how they ended.",
           [(f'{{{m},finished_reason="{k}"}}', v) for k, v in sorted(c.requests.items())] or [(f"{{{m}}}", 0)])
    metric("num_requests_running", "gauge", "Requests generating now.", [(f"{{{m}}}", runner.running)])
    metric("num_requests_waiting", "gauge", "Requests waiting for their turn.", [(f"{{{m}}}", runner.waiting)])
    if session is not None:
        metric("slots", "gauge", "Conversation slots (loaded caches kept between requests).",
               [(f"{{{m}}}", session.slots)])
        metric("target_runtime_info", "gauge", "The runtime the latest generation's target ran on, and how exactly "
               "its output is the target alone's (bit-exact, or exact with respect to the logits its calls compute).",
               [(f'{{{m},runtime="{session.target_runtime}",exactness="{exactness(session.target)}"}}', 1)])
        version = session.version or "none"
        metric("adapter_info", "gauge", "The drafter's adapter version drafting now.",
               [(f'{{{m},version="{version}"}}', 1)])
        if session.runtime.max_memory_mib is not None:
            metric("memory_budget_bytes", "gauge", "The most the server may hold resident (--max-memory).",
                   [(f"{{{m}}}", session.runtime.max_memory_mib << 20)])
        states = session.conversations.states
        if states is not None:
            metric("saved_states_bytes", "gauge", "Conversations' saved cache states held, by where (--cache-ram, "
                   "--state-disk bound them).", [(f'{{{m},where="{k}"}}', n) for k, n in states.held().items()])
        if session.memories is not None:
            metric("memory_index_bytes", "gauge", "RAM the memory's loaded indexes hold.",
                   [(f"{{{m}}}", session.memories.rss_bytes)])
    held = resident()
    if held:
        metric("resident_bytes", "gauge", "The server's resident memory by what holds it: each model file mapped in "
               "place, anonymous memory (packed weights, KV caches, tensors), other files; total and peak (VmHWM).",
               [(f'{{{m},part="{part}"}}', n) for part, n in sorted(held.items())])
    return "\n".join(lines) + "\n"
