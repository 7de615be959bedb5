"""The demo's claims: its shown prompts are unseen by pairing, and what it says after training
follows the measurement."""

from omnidraft.pairs.calibrate import builtin_prompts
from omnidraft.pairs.demo import _verdict, held_out_prompts


def test_the_demo_shows_prompts_the_pairing_did_not_see():
    shown = held_out_prompts(6)
    assert len(shown) == 6 and not set(shown) & set(builtin_prompts())


def test_the_demo_claims_an_improvement_only_when_it_measured_one():
    before = {"pair": 30.0, "tokens_per_forward": 2.1}
    rnd = {"record_ids": list(range(16))}
    better = _verdict(before, {"tokens_per_s": 33.0, "proposed": 40}, rnd)
    assert better.startswith("a measured improvement: 1.10x")
    noise = _verdict(before, {"tokens_per_s": 30.6, "proposed": 40}, rnd)
    assert noise.startswith("no measured improvement") and "(1.02x" in noise
    worse = _verdict(before, {"tokens_per_s": 29.0, "proposed": 40}, rnd)
    assert worse.startswith("no measured improvement") and "16 records" in worse and "target alone" not in worse
    alone = _verdict({"pair": 38.0, "tokens_per_forward": 1.0}, {"tokens_per_s": 38.5, "proposed": 0}, rnd)
    assert alone.startswith("no measured improvement") and "runs the target alone" in alone
