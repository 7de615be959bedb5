"""The pairing job's calibration measures the pair beside the target alone and llama.cpp's row,
interleaved per prompt on the same prompt ids, and reports both ratios."""

from omnidraft.decode.text import encode_prompt
from omnidraft.jobs.compare import measure
from omnidraft.jobs.pairing import format_report
from omnidraft.pairs.settings import Runtime

from ..test_session import FP32, PROMPTS, home, models  # noqa: F401 - fixtures


def test_calibration_reports_the_pair_against_llama_cpp_on_the_same_prompts(home, models):  # noqa: F811
    from omnidraft import Session

    s = Session(*models, runtime=FP32, log=False, k=2)
    seen = []

    def llama(ids, new):
        seen.append((ids, new))
        return 10, 0.5

    c = measure(s, PROMPTS[:3], max_new_tokens=12, ar=True, say=lambda *a, **k: None, llamacpp=llama)
    s.close()
    assert seen == [(encode_prompt(s.target_tok, p, chat=False), 12) for p in PROMPTS[:3]]
    assert c["llamacpp_tokens_per_s"] == 20.0 and c["vs_llamacpp"] == round(c["tokens_per_s"] / 20.0, 3)
    assert "ar_tokens_per_s" in c
    report = {"pair": "p", "adapter": "v1", "adapter_start": "fresh", "calibration": c,
              "vocabulary": {"drafter": 1, "target": 1, "shared": 1, "shared_of_drafter": 1.0, "shared_of_target": 1.0},
              "ngrams": {"seeded": 0, "learned": 0}, "runtimes": {"drafter": "eager", "target": "eager"}}
    assert f"vs llama.cpp alone 20.00 tokens/s ({c['vs_llamacpp']:.2f}x)" in format_report(report)
    s = Session(*models, runtime=FP32, log=False, k=2)
    without = measure(s, PROMPTS[:1], max_new_tokens=4, ar=True, say=lambda *a, **k: None)
    s.close()
    assert "vs_llamacpp" not in without


def test_no_prompt_starts_that_the_prompts_so_far_predict_to_end_past_the_budget(home, models):  # noqa: F811
    import time

    from omnidraft import Session

    s = Session(*models, runtime=FP32, log=False, k=2)

    def slow_llama(ids, new):  # each prompt takes > 0.4 s: a second one would end past 0.6 s
        time.sleep(0.4)
        return new, 0.4

    c = measure(s, PROMPTS[:3], max_new_tokens=4, ar=False, say=lambda *a, **k: None, budget_s=0.6,
                llamacpp=slow_llama)
    roomy = measure(s, PROMPTS[:3], max_new_tokens=4, ar=False, say=lambda *a, **k: None, budget_s=60,
                    llamacpp=slow_llama)
    s.close()
    assert c["prompts"] == 1 and roomy["prompts"] == 3


def test_an_inexact_runtime_asked_with_exact_is_refused_before_the_programs_are_built(home, models,  # noqa: F811
                                                                                         monkeypatch):
    import pytest

    from omnidraft.errors import OmniDraftError
    from omnidraft.jobs.pairing import pair
    from omnidraft.pairs import programs

    monkeypatch.setattr(programs, "ensure", lambda *a, **k: pytest.fail("programs built before the check"))
    with pytest.raises(OmniDraftError, match="not bit-exact"):
        pair(models[1], models[0], target_runtime="llamacpp", exact=True, say=lambda *a, **k: None)


def test_a_near_tie_goes_to_llama_cpp_when_the_pair_measured_slower_than_it(home, models, monkeypatch):  # noqa: F811
    """llama.cpp predicted 4% faster than the session's runtime, and far faster alone in the
    calibration: the session reopens on it and `auto` loads it (the other outcomes: test_runtime_choice.py)."""
    from omnidraft import Session
    from omnidraft.jobs import pairing, runtimes
    from omnidraft.pairs import programs
    from omnidraft.pairs.runtime_choice import resolve

    monkeypatch.setattr(programs, "ensure", lambda *a, **k: {})
    monkeypatch.setattr(runtimes, "compare", lambda s, exact, say: {
        "predicted_tokens_per_s": {s.target_runtime: 25.0, "llamacpp": 26.0}, "k": {s.target_runtime: 2, "llamacpp": 0},
        "one_token_ms": {s.target_runtime: 40.0, "llamacpp": 38.0}, "chosen": s.target_runtime})
    monkeypatch.setattr(pairing, "baseline", lambda s, say: lambda ids, new: (new, 1e-4))
    reopened = []

    def reopen(session, drafter, target, runtime):
        reopened.append(runtime)
        session.close()
        return Session(drafter, target, runtime=Runtime(target="eager", dtype="fp32"), log=False)  # a stand-in

    monkeypatch.setattr(pairing, "_reopen", reopen)
    report = pairing.pair(models[1], models[0], calibration_s=4.0, max_new_tokens=6, say=lambda *a, **k: None)
    compared = report["runtimes"]["compared"]
    assert compared["measured_vs_llamacpp"] < 1.0 and compared["chosen"] == "llamacpp" and reopened == ["llamacpp"]
    assert resolve(report["pair"], "auto", exact=False) == "llamacpp"
    assert "llama.cpp alone: not kept" in format_report(report)


def test_a_runtime_named_at_pairing_is_what_auto_runs_after_it(home, models, monkeypatch):  # noqa: F811
    """A pairing on a named runtime keeps it for `auto` on this machine (a GGUF paired on llama.cpp
    is not converted for PyTorch by the next run: tests/device/test_llamacpp.py), with its
    prediction and no other runtime to route to; `exact` still refuses an inexact choice."""
    import json

    from omnidraft import Session
    from omnidraft.jobs import pairing
    from omnidraft.pairs import programs
    from omnidraft.pairs.runtime_choice import FILE, resolve
    from omnidraft.pairs.spec import pair_dir

    monkeypatch.setattr(programs, "ensure", lambda *a, **k: {})
    report = pairing.pair(models[1], models[0], calibration_s=4.0, max_new_tokens=6, llamacpp=False,
                          target_runtime="eager", say=lambda *a, **k: None)
    assert report["runtimes"]["kept"] == "eager" and resolve(report["pair"], "auto", exact=False) == "eager"
    kept = json.loads((pair_dir(report["pair"]) / FILE).read_text())
    assert kept["predicted_tokens_per_s"] == {"eager": round(report["cost_model"]["predicted_tokens_per_s"], 3)}
    assert "target eager (kept for this machine: --target-runtime auto runs it)" in format_report(report)
    s = Session(models[0], models[1], log=False)
    assert s.target_runtime == "eager" and not s.router.routed
    s.close()
    kept["target"] = "llamacpp"
    (pair_dir(report["pair"]) / FILE).write_text(json.dumps(kept))
    assert resolve(report["pair"], "auto", exact=True) == "auto"
