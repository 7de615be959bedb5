"""Pairing compares the target's runtimes in one sitting: the runtime the session runs is timed
again beside the others, so a timing saved in an earlier sitting (this machine is shared, its
speed drifts) never decides the choice, nor what rounds were learnt to cost beyond it."""

import json

from omnidraft.jobs.runtimes import compare
from omnidraft.pairs.settings import Runtime

from ..conftest import save_tiny, tiny, vocab_len


def test_the_sessions_own_runtime_is_timed_again_and_saved(tmp_path, monkeypatch, smollm_tok, qwen_tok):
    from omnidraft import Session

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    d = str(save_tiny(tiny("llama", vocab_len(smollm_tok), seed=1), smollm_tok, tmp_path / "drafter"))
    t = str(save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=2), qwen_tok, tmp_path / "target"))
    s = Session(d, t, runtime=Runtime(dtype="fp32"), log=False)
    dl = s.draft_length
    dl.model.verify_ms = {w: 1e6 for w in dl.model.verify_ms}  # a stale timing from another sitting
    dl.model.pace = 50.0  # and the pace rounds ran at against it then
    dl.reestimate()  # the session started from it
    assert dl.state()["predicted_tokens_per_s"] < 0.01
    lines: list[str] = []
    out = compare(s, exact=False, say=lines.append)
    assert dl.model.verify_ms[1] < 1e5 and out["one_token_ms"]["eager"] == dl.model.verify_ms[1]
    assert dl.state()["predicted_tokens_per_s"] > 1.0  # chosen again on the new timing (1e6 ms: 0.001)
    assert dl.model.pace == 1.0  # a pace against the old timing says nothing about the new one
    saved = json.loads(s.route.cost.path.read_text())["model"]["verify_ms"]
    assert float(saved["1"]) == dl.model.verify_ms[1]
    assert out["chosen"] == "eager" and any("timing the target on eager" in line for line in lines)
    s.close()
