"""Statistical losslessness: for every strategy and every verify mode modes.py calls lossless, at
T=1, T=0.7 and top-p 0.9, with a seed per draw and without one, and with rounds that verify ids
copied from the context mixed in (the default), the first three generated tokens are distributed
as the target's own sampling.

The pair is a cross-vocabulary one (SmolLM2 tokenizer -> Qwen2.5 tokenizer) of random neural
bigram LMs (tests/bigram.py) that favour the same strings, including a drafter token with no
translation (empty proposals), n-gram merges ("):\\n") and splits ("\\n    "). Position j's exact
distribution given x_{j-1} is known in closed form; the test pools Pearson's chi-square over the
contexts x_{j-1} (cells with expected count >= 5, the rest in one tail cell) and fails at
p < ALPHA. Any draw the target gives probability 0 (e.g. outside the top-p nucleus) fails at once.
Each test draws as many generations as position 1 needs to detect a total-variation shift of
0.05 between its two likeliest cells with power 0.8 (750-950 here), prints the shift each
position detects, and asserts position 1's is <= 0.05.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
import torch
from scipy import optimize, stats

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_speculative
from omnidraft.decode.modes import VERIFY_MODES, default_verify_mode, is_lossless
from omnidraft.decode.target import LocalTarget
from omnidraft.translate.state import PairState
from omnidraft.sampling import SamplingConfig, probs
from omnidraft.propose.config import DRAFT_CONFIDENCE, SpecConfig
from omnidraft.propose.lookup import LookupConfig
from omnidraft.propose.registry import STRATEGIES

from ..bigram import BigramLM
from ..conftest import UNTRANSLATABLE, vocab_len

ALPHA = 1e-4  # per position; seeded tests are deterministic, unseeded ones flake < 0.3% per run
TV = 0.05  # the shift position 1 must detect with power POWER: sets each test's number of draws
POWER = 0.8
PROMPT = "def add(a, b):"
COPY_PROMPT = "a = b\nb = a\na = b\nb = a\na ="  # its suffixes recur: lookup rounds copy what followed them
PREFERENCES = {" the": 0.8, "\n": 0.72, "(": 0.6, "\n    ": 0.56, " x": 0.48, ")": 0.4, " =": 0.4,
               "):\n": 0.4, "    ": 0.32, " Eiffel": 0.28, " return": 0.24, ":": 0.2, "é": 0.16,
               "def": 0.12, " a": 0.4, " b": 0.4, " +": 0.32, "1": 0.24, " if": 0.2, " in": 0.28,
               ",": 0.36, " for": 0.16}
SAMPLINGS = {"T1": (1.0, 1.0), "T0.7": (0.7, 1.0), "top-p0.9": (1.0, 0.9)}


def _favour(tok, extra: dict[int, float] | None = None) -> dict[int, float]:
    out: dict[int, float] = dict(extra or {})
    for piece, pref in PREFERENCES.items():
        for i in tok.encode(piece, add_special_tokens=False):
            out[i] = max(out.get(i, -1.0), pref)
    return out


@pytest.fixture(scope="module")
def bigram_pair(smollm_tok, qwen_tok):
    vd, vt = vocab_len(smollm_tok), vocab_len(qwen_tok)
    d = BigramLM(vd, _favour(smollm_tok, {UNTRANSLATABLE: 0.4}), seed=11, noise=0.4, name="draft")
    t = BigramLM(vt, _favour(qwen_tok), seed=12, noise=0.4, name="target")
    pair = PairState(smollm_tok, qwen_tok, vd, vt)
    assert pair.vmap.d2t[UNTRANSLATABLE] < 0 and pair.cache.longest([UNTRANSLATABLE], 0, 1) is None
    return d, t, pair


def lossless_cases():
    """Every strategy x every mode modes.py calls lossless: the three samplings with a seed per
    draw and T=1 without one. slrs (a drafter forward per lookahead branch: ~45 ms a draw here)
    runs its default mode seeded in full and point-mass, shared with every other strategy, at
    T=1 only."""
    for strategy in STRATEGIES:
        if strategy == "ar":
            continue
        for mode in VERIFY_MODES:
            if not is_lossless(strategy, mode, SamplingConfig(temperature=1.0)):
                continue
            full = strategy != "slrs" or mode == default_verify_mode(strategy)
            for name in (SAMPLINGS if full else ["T1"]):
                yield strategy, mode, name, True
            if strategy != "slrs":
                yield strategy, mode, "T1", False  # unseeded: OS entropy per draw


def _power_lambda(dof: int) -> float:
    """Noncentrality at which the chi-square test with ``dof`` rejects at ALPHA with POWER."""
    crit = stats.chi2.isf(ALPHA, dof)
    return optimize.brentq(lambda x: stats.ncx2.sf(crit, dof, x) - POWER, 1e-6, 1e6)


def _detectable_tv(n_by_ctx: list[tuple[int, torch.Tensor]], dof: int) -> float:
    """Smallest shift of mass between the two likeliest cells of every context that the pooled
    chi-square test detects with power 0.8 at ALPHA: lambda = delta^2 * sum n (1/p_1 + 1/p_2)."""
    if dof < 1:
        return math.inf
    weight = sum(n * float(1 / p[0] + 1 / p[1]) for n, p in n_by_ctx)
    return math.sqrt(_power_lambda(dof) / weight) if weight else math.inf


def _draws_for(p: torch.Tensor) -> int:
    """Draws for which position 1 (distribution ``p`` [V]) detects a TV shift with power 0.8."""
    top = torch.sort(p, descending=True).values
    n = 1000
    for _ in range(3):  # the number of cells grows a little with n
        dof = int((p * n >= 5).sum())
        n = math.ceil(1.02 * _power_lambda(dof) / (TV ** 2 * float(1 / top[0] + 1 / top[1])))
    return n


def _position_test(target, sampling, contexts: dict[int, list[int]]) -> tuple[float, float, int]:
    """(p-value, detectable TV, draws) for one position: ``contexts`` maps x_{j-1} to the tokens
    drawn at position j after it."""
    chi, dof, power = 0.0, 0, []
    for prev, drawn in contexts.items():
        p = probs(target.logits_after([prev])[0], sampling)  # [V] the exact distribution
        impossible = [t for t in drawn if float(p[t]) == 0.0]
        assert not impossible, f"drew tokens the target gives probability 0: {impossible[:5]}"
        n = len(drawn)
        if n < 20:
            continue
        counts = Counter(drawn)
        cells = [i for i in torch.nonzero(p * n >= 5).flatten().tolist()]
        obs = [counts.get(i, 0) for i in cells]
        exp = [float(p[i]) * n for i in cells]
        rest_obs, rest_exp = n - sum(obs), n - sum(exp)
        if rest_exp > 1e-9:
            obs.append(rest_obs)
            exp.append(rest_exp)
        elif rest_obs:
            pytest.fail(f"{rest_obs} draws outside cells holding all the mass")
        chi += sum((o - e) ** 2 / e for o, e in zip(obs, exp))
        dof += len(obs) - 1
        power.append((n, torch.sort(p, descending=True).values[:2]))
    pvalue = float(stats.chi2.sf(chi, dof)) if dof else 1.0
    return pvalue, _detectable_tv(power, dof), sum(len(v) for v in contexts.values())


def _record(positions: list[dict[int, list[int]]], last: int, ids: list[int]) -> None:
    """Each generated token under its position and the token before it (``last``: the prompt's)."""
    prev = last
    for j, x in enumerate(ids):
        positions[j][prev].append(x)
        prev = x


def cases():
    """Every lossless case, then rounds that mix copies from the context with drafts (the
    default): a point mass under both verify rules, seeded and not; then drafts stopping at the
    drafter's own confidence (a Session's default rule) under both rules."""
    for case in lossless_cases():
        yield *case, False, None
    yield "omnidraft", "point-mass", "T0.7", True, True, None
    yield "omnidraft", "point-mass", "top-p0.9", False, True, None
    yield "tli", "rejection", "T1", True, True, None
    yield "omnidraft", "point-mass", "T1", False, True, DRAFT_CONFIDENCE
    yield "tli", "rejection", "T0.7", True, False, DRAFT_CONFIDENCE


@pytest.mark.parametrize("strategy,mode,sampling_name,seeded,copies,confidence", list(cases()))
def test_first_three_tokens_follow_the_target(bigram_pair, strategy, mode, sampling_name, seeded, copies,
                                               confidence):
    d, t, pair = bigram_pair
    temperature, top_p = SAMPLINGS[sampling_name]
    prompt = COPY_PROMPT if copies or strategy == "lookup" else PROMPT
    last = pair.target_tok(prompt)["input_ids"][-1]
    draws = _draws_for(probs(t.logits_after([last])[0], SamplingConfig(temperature=temperature, top_p=top_p)))
    positions = [defaultdict(list) for _ in range(3)]  # position j: x_{j-1} -> draws
    proposed = accepted = copied = 0
    for s in range(draws):
        sampling = SamplingConfig(temperature=temperature, top_p=top_p, seed=s if seeded else None)
        out = generate_speculative(d, LocalTarget(t, sampling, mode), pair, prompt,
                                   cfg=SpecConfig(strategy, confidence=confidence),
                                   k=FixedK(3), max_new_tokens=3, lookup=LookupConfig() if copies else None)
        assert out.lossless
        proposed += out.metrics["proposed"]
        accepted += out.metrics["accepted"]
        copied += out.metrics["rounds_by_kind"].get("lookup", {}).get("accepted", 0)
        _record(positions, last, out.token_ids)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p)
    report = []
    for j, contexts in enumerate(positions):
        pvalue, tv, n = _position_test(t, sampling, contexts)
        report.append((j + 1, pvalue, tv, n))
        print(f"{strategy}/{mode}/{sampling_name}/{'seeded' if seeded else 'unseeded'}/stop {confidence} "
              f"position {j + 1}: "
              f"{n} draws, p = {pvalue:.3g}, detects TV >= {tv:.3f}")
    assert accepted >= 20, (accepted, proposed)  # acceptance and bonus paths were exercised
    assert (copied >= 20) == (copies or strategy == "lookup"), copied  # copies verified and accepted where asked
    assert report[0][2] <= TV * 1.01, report
    bad = [r for r in report if r[1] < ALPHA]
    assert not bad, report


@pytest.mark.parametrize("sampling_name", ["T0.7", "top-p0.9"])
def test_the_target_alone_samples_its_own_distribution(bigram_pair, sampling_name):
    """Strategy `ar`, the k = 0 path of every entry point: an empty proposal per step, drawn by the
    verifier's point-mass rule, is the target's own sampling."""
    from omnidraft.decode.generate import generate_ar

    _, t, pair = bigram_pair
    temperature, top_p = SAMPLINGS[sampling_name]
    last = pair.target_tok(PROMPT)["input_ids"][-1]
    sampling = SamplingConfig(temperature=temperature, top_p=top_p)
    positions = [defaultdict(list) for _ in range(3)]
    for s in range(_draws_for(probs(t.logits_after([last])[0], sampling))):
        out = generate_ar(LocalTarget(t, SamplingConfig(temperature=temperature, top_p=top_p, seed=s)), pair.target_tok,
                          PROMPT, max_new_tokens=3)
        _record(positions, last, out.token_ids)
    report = [_position_test(t, sampling, contexts) for contexts in positions]
    assert report[0][1] <= TV * 1.01 and all(p >= ALPHA for p, _tv, _n in report), report


@pytest.mark.parametrize("strategy,mode,sampling_name,seeded",
                         [("omnidraft", "point-mass", "T1", True), ("tli", "rejection", "top-p0.9", False)])
def test_recalls_from_the_memory_keep_the_targets_distribution(bigram_pair, tmp_path, strategy, mode, sampling_name,
                                                               seeded):
    """Rounds that verify continuations recalled from the pair's memory (earlier answers to the same
    prompt, the target's own samples) instead of drafts: a point mass under both verify rules, so
    the first three tokens are still the target's own distribution."""
    from omnidraft.decode.generate import generate_ar
    from omnidraft.memory.spaces import Memories

    d, t, pair = bigram_pair
    temperature, top_p = SAMPLINGS[sampling_name]
    prompt_ids = pair.target_tok(PROMPT)["input_ids"]
    memory = Memories(tmp_path).space()
    for s in range(40):  # earlier answers: the target's own samples at T=1
        earlier = generate_ar(LocalTarget(t, SamplingConfig(temperature=1.0, seed=10_000 + s)), pair.target_tok,
                              PROMPT, max_new_tokens=6)
        memory.generation().remember(prompt_ids + earlier.token_ids, {})
    memory.sync()
    last = prompt_ids[-1]
    draws = _draws_for(probs(t.logits_after([last])[0], SamplingConfig(temperature=temperature, top_p=top_p)))
    positions = [defaultdict(list) for _ in range(3)]
    recalled = 0
    for s in range(draws):
        sampling = SamplingConfig(temperature=temperature, top_p=top_p, seed=s if seeded else None)
        out = generate_speculative(d, LocalTarget(t, sampling, mode), pair, PROMPT, cfg=SpecConfig(strategy),
                                   k=FixedK(3), max_new_tokens=3, memory=memory.generation())
        assert out.lossless
        recalled += out.metrics["rounds_by_kind"].get("memory", {}).get("accepted", 0)
        _record(positions, last, out.token_ids)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p)
    report = [_position_test(t, sampling, contexts) for contexts in positions]
    print(f"memory {strategy}/{mode}/{sampling_name}: {recalled} recalled ids accepted; {report}")
    assert recalled >= 20, recalled
    assert report[0][1] <= TV * 1.01 and all(p >= ALPHA for p, _tv, _n in report), report
