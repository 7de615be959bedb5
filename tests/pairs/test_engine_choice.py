"""The pair-or-engine figures (pairs/engine_choice.py) that Sessions of one pair keep in one file."""

import pytest

from omnidraft.pairs.engine_choice import WEIGHT, EngineChoice


def test_sessions_open_at_once_fold_their_generations_into_the_same_figures(tmp_path):
    path = tmp_path / "engine.json"
    app, cli = EngineChoice.load(path), EngineChoice.load(path)  # both open before either measured
    app.observe(False, 10, 1.0)  # the pair: 10 tokens/s
    cli.observe(True, 40, 2.0)  # the engine alone: 20 tokens/s
    cli.observe(False, 30, 1.0)  # the pair again, folded into the app's 10
    kept = EngineChoice.load(path)
    assert kept.pair_tokens_per_s == pytest.approx((1 - WEIGHT) * 10 + WEIGHT * 30)
    assert kept.engine_tokens_per_s == pytest.approx(20.0) and kept.since_probe == 0
    app.observe(True, 20, 1.0)  # the app reads the CLI's figures before folding its own in
    assert app.pair_tokens_per_s == kept.pair_tokens_per_s and app.since_probe == 1
    assert app.engine_tokens_per_s == pytest.approx((1 - WEIGHT) * 20 + WEIGHT * 20)
