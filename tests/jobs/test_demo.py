"""The demo's claims: its shown prompts are unseen by pairing, and it calls a round an
improvement only when the drafter measurably caused one."""

from omnidraft.jobs.demo import _verdict, copy_work, held_out_prompts
from omnidraft.jobs.pairing import builtin_prompts

ROUND = {"record_ids": list(range(16))}


def phase(ratio: float, proposed: int, accepted: int, alone: float = 30.0) -> dict:
    """One phase's totals as the demo keeps them: before (``ratio``) and after (tokens/s)."""
    return {"speedup": ratio, "tokens_per_target_forward": 1.0 + accepted / 40 if proposed else 1.0,
            "tokens_per_s": ratio * alone, "ar_tokens_per_s": alone, "proposed": proposed, "accepted": accepted}


def test_the_demo_shows_prompts_the_pairing_did_not_see():
    shown, work = held_out_prompts(6), copy_work(6)
    assert len(shown) == 6 and not set(shown) & set(builtin_prompts())
    assert len(set(work)) == 6 and not set(work) & set(builtin_prompts() + shown)
    assert "```python" in work[0] and "Read this passage" in work[1] and "\n\n" in work[2]  # edit, quote, rewrite


def test_a_drafter_that_accepts_more_and_pays_is_an_improvement():
    better = _verdict(phase(1.0, 200, 100), phase(1.10, 200, 140), ROUND)
    assert better.startswith("a measured improvement") and "(1.10x)" in better and "0.500 -> 0.700" in better


def test_noise_before_with_the_target_alone_in_both_phases_is_not_an_improvement():
    # a fresh machine: the cost model ran the target alone in both phases; one slow prompt made
    # the "before" ratio 0.76x, and after training only probe rounds drafted, without paying
    said = _verdict(phase(0.76, 0, 0), phase(1.00, 12, 4), ROUND)
    assert said.startswith("no measured improvement") and "ran the target alone in the phase before" in said
    both = _verdict(phase(0.76, 0, 0), phase(1.00, 0, 0), ROUND)
    assert both.startswith("no measured improvement") and "in both phases" in both


def test_acceptance_within_noise_is_not_an_improvement_whatever_the_speed():
    said = _verdict(phase(1.0, 60, 30), phase(1.3, 60, 33), ROUND)
    assert said.startswith("no measured improvement") and "did not rise beyond noise" in said


def test_acceptance_that_rose_without_a_speed_gain_is_not_an_improvement():
    said = _verdict(phase(1.0, 400, 200), phase(1.02, 400, 280), ROUND)
    assert said.startswith("no measured improvement") and "did not gain 5%" in said


def test_a_quieter_machine_after_training_is_not_called_an_improvement():
    # the target alone went 21.7 -> 29.2 tokens/s between the phases and the pair 21.8 -> 25.7:
    # the pair lost ground to the target although both got faster
    said = _verdict(phase(1.005, 100, 50, alone=21.7), phase(25.7 / 29.2, 100, 80, alone=29.2), ROUND)
    assert said.startswith("no measured improvement") and "(0.88x)" in said


def test_the_memory_phase_says_what_the_memory_did_or_that_nothing_matched():
    from omnidraft.jobs.demo import _remembered

    cold = {**phase(1.0, 0, 0), "recalled": 0, "recalls_kept": 0}
    none = _remembered(cold, {**phase(1.02, 0, 0), "recalled": 0, "recalls_kept": 0})
    assert none.startswith("nothing matched here") and "1.00x -> 1.02x" in none
    warm = {**phase(1.6, 0, 0), "recalled": 300, "recalls_kept": 240, "tokens_per_target_forward": 2.5}
    said = _remembered(cold, warm)
    assert "proposed 300 ids" in said and "kept 240" in said and "1.00x -> 1.60x" in said and "(1.60x with use)" in said
