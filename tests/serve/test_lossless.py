"""Statistical losslessness through the server: completions sampled over HTTP (the `openai` SDK,
a seed per request) at T=1 and at (T=0.7, top-p 0.9) draw their first three tokens from the
target's own distribution, by tests/decode/test_lossless.py's pooled chi-square. The pair is that
test's cross-vocabulary bigram pair, put in the served Session in place of its tiny models, so
the exact distribution of every position is known; drafts of 3 tokens every round, copies on."""

from __future__ import annotations

from collections import defaultdict

import pytest

from omnidraft.pairs.settings import Runtime
from omnidraft.sampling import SamplingConfig, probs

from ..decode.test_lossless import ALPHA, PROMPT, TV, _draws_for, _position_test, bigram_pair  # noqa: F401
from .conftest import KEY, serving


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_completions_follow_the_target(models, home, bigram_pair, temperature, top_p):  # noqa: F811
    import openai

    from omnidraft.session import Session

    d, t, pair = bigram_pair
    drafter, target = models

    def bigram_session():
        s = Session(drafter, target, k=3, runtime=Runtime(dtype="fp32"), log=False)
        s.target.model, s._pair.lm, s.pair = t, d, pair  # the same vocabularies as the tiny models
        return s

    sampling = SamplingConfig(temperature=temperature, top_p=top_p)
    last = pair.target_tok(PROMPT)["input_ids"][-1]
    draws = _draws_for(probs(t.logits_after([last])[0], sampling))
    positions = [defaultdict(list) for _ in range(3)]
    accepted = 0
    with serving(bigram_session) as (url, runner):
        c = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        for seed in range(draws):
            out = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, temperature=temperature,
                                       top_p=top_p, seed=seed)
            spec = out.usage.model_extra["speculative"]
            assert spec["lossless"]
            accepted += spec["accepted_tokens"] + spec["copied_tokens"]
            prev = last
            for j, x in enumerate(runner.session.last.token_ids):  # the ids behind the text just served
                positions[j][prev].append(x)
                prev = x
    report = [_position_test(t, sampling, contexts) for contexts in positions]
    print(f"T={temperature} top-p={top_p}: {draws} requests, accepted {accepted}; "
          + "; ".join(f"position {j + 1}: p = {p:.3g}, detects TV >= {tv:.3f}" for j, (p, tv, _n) in enumerate(report)))
    assert accepted >= 20  # acceptance and bonus paths were exercised
    assert report[0][1] <= TV * 1.01, report
    assert all(p >= ALPHA for p, _tv, _n in report), report
