"""The strategy registry and the Proposer protocol: every registered proposer keeps the protocol's
contract, a new strategy is one class plus one registry entry, and no library module tests a
strategy name outside the registry."""

import ast
from pathlib import Path

import pytest
import torch

import omnidraft
from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.loop import decode
from omnidraft.decode.modes import default_verify_mode, is_lossless
from omnidraft.sampling import SamplingConfig
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.propose import registry
from omnidraft.propose.base import DraftState
from omnidraft.propose.config import SpecConfig
from omnidraft.propose.registry import STRATEGIES, Strategy, get
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import DraftContext

SPECULATIVE = [s for s in STRATEGIES if get(s).speculative]
T1 = SamplingConfig(temperature=1.0, seed=5)


def _state(pair, prompt: str, needs_q: bool, vt: int) -> DraftState:
    ctx = DraftContext(pair.draft_tok, pair.vmap, pair.draft_tok.encode(prompt))
    return DraftState(ctx, pair.target_tok.encode(prompt), needs_q=needs_q, target_vocab=vt)


@pytest.mark.parametrize("strategy", SPECULATIVE)
@pytest.mark.parametrize("needs_q", [False, True])
def test_every_proposer_keeps_the_protocol(cross, strategy, needs_q):
    """At most k drafter tokens' worth of target ids, q' [m, Vt] exactly when the verifier needs
    it, the drafter forwards counted (none for copies from the context), and ``observe``
    accepting the committed ids."""
    d, t, pair = cross
    proposer = get(strategy).proposer(pair, d.fork(), T1, SpecConfig(strategy))
    state = _state(pair, "def add(a, b):\n", needs_q, t.vocab_size)
    prop = proposer.propose(state, 4)
    m = len(prop.target_ids)
    assert all(0 <= i < t.vocab_size for i in prop.target_ids)
    assert (prop.drafter_forwards >= 1) == (proposer.kind == "drafter")  # a copy from the context drafts nothing
    assert prop.translate_s >= 0.0
    if needs_q:
        assert tuple(prop.q.shape) == (m, t.vocab_size)
        assert torch.all(prop.q >= 0) and torch.all(prop.q.sum(-1) <= 1 + 1e-4)
    else:
        assert prop.q is None
    state.committed.extend(prop.target_ids[:1])
    state.generated.extend(prop.target_ids[:1])
    proposer.observe(state, 1)


def test_registry_names_every_choice_and_rejects_unknown_names():
    assert STRATEGIES[0] == "ar" and not get("ar").speculative
    with pytest.raises(OmniDraftError, match="choose one of ar, tli"):
        get("nope")
    with pytest.raises(OmniDraftError, match="unknown strategy"):
        SpecConfig("nope")


class _LastTokenProposer:
    """A strategy with no drafter at all: propose the last committed target token k times
    (prompt-lookup style). Not exact (q' is None), so it must verify by point mass."""

    kind = "lookup"

    def __init__(self, sampling):
        self.sampling = sampling

    def propose(self, state, k):
        prop = Proposal.direct([state.committed[-1]] * k)
        if state.needs_q:
            prop.q = torch.zeros(k, state.target_vocab)
        return prop

    def observe(self, state, fresh):
        pass

    def unread(self, state):
        return 0  # no drafter to catch up


def test_a_new_strategy_is_one_class_and_one_registry_line(cross, monkeypatch):
    d, t, pair = cross
    entry = Strategy("repeat", lambda pair, lm, sampling, head, cfg: _LastTokenProposer(sampling),
                     exact_q=False, summary="repeat the last token")
    monkeypatch.setitem(registry.REGISTRY, "repeat", entry)
    for prompt in ("aaaa", "def f(x):\n"):
        ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=16)
        out = generate_speculative(d, LocalTarget(t, SamplingConfig(), default_verify_mode("repeat")), pair, prompt,
                                   cfg=SpecConfig("repeat"), k=FixedK(3), max_new_tokens=16)
        assert out.token_ids == ref.token_ids
        assert out.metrics["proposed"] > 0 and out.metrics["strategy"] == "repeat"
    assert default_verify_mode("repeat") == "point-mass"
    assert is_lossless("repeat", "point-mass", T1) and not is_lossless("repeat", "rejection", T1)
    assert generate_speculative(d, LocalTarget(t, T1, default_verify_mode("repeat")), pair, "x",
                                cfg=SpecConfig("repeat"), k=FixedK(3), max_new_tokens=6).lossless


def test_rounds_fold_into_the_result(cross):
    """The loop yields one Round per verification; the committed ids of the rounds are the
    output, each round commits its accepted prefix plus one token, and the rows it records
    cover exactly the committed positions."""
    d, t, pair = cross
    prompt = "for i in range(10):\n"
    ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=20).token_ids
    cfg = SpecConfig("omnidraft")
    proposer = get("omnidraft").proposer(pair, d.fork(), SamplingConfig(), cfg)
    target = LocalTarget(t.fork(), SamplingConfig())
    ctx = DraftContext(pair.draft_tok, pair.vmap, pair.draft_tok.encode(prompt))
    rounds = list(decode(proposer, target, ctx, pair.target_tok.encode(prompt), k=FixedK(4), max_new_tokens=20,
                         stop={pair.target_tok.eos_token_id}, record_topk=8))
    assert [i for r in rounds for i in r.committed] == ref
    for r in rounds[:-1]:
        assert r.committed == r.proposal.target_ids[: r.verdict.accepted] + [r.verdict.token]
        assert r.rows[0].shape == (len(r.committed), 8)
    assert all(r.elapsed_s >= r.prefill_s for r in rounds)


def test_no_library_module_tests_a_strategy_name():
    """Strategy names are compared only in propose/registry.py (a new strategy touches no other
    module)."""
    root = Path(omnidraft.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "registry.py" and path.parent.name == "propose":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    names = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    if any(isinstance(n, ast.Constant) and n.value in STRATEGIES for n in names):
                        found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []
