"""Assembling a pair within a memory budget: the other target runtime loads only where it fits."""

from omnidraft.models.budget import rss_bytes
from omnidraft.pairs import assemble
from omnidraft.pairs.settings import Runtime
from omnidraft.pairs.spec import PairSpec
from omnidraft.pairs.routing import Route


def test_the_other_runtime_is_not_loaded_past_the_budget_and_loads_within_it(monkeypatch):
    loaded, notes = [], []
    monkeypatch.setattr(assemble, "load_choice", lambda _name: {"predicted_tokens_per_s": {"llamacpp": 9.0}})
    monkeypatch.setattr(assemble, "resident_estimate", lambda _name, _runtime: 512 << 20)

    def load(name, runtime, **_kw):
        loaded.append((name, runtime))
        raise assemble.OmniDraftError("not here")  # the load was tried: enough for this test

    monkeypatch.setattr(assemble, "local_target", load)
    first = Route("executorch", None, None)
    spec = PairSpec("smollm2-135m", "qwen2.5-coder-0.5b")
    tight = Runtime(max_memory_mib=(rss_bytes() >> 20) + 256)  # 256 MiB of room for a 512 MiB runtime
    assert assemble._routes(first, spec, None, tight, False, notes.append) == [first]
    assert loaded == [] and "llamacpp not loaded (~0.50 GiB would pass the memory budget)" in notes[0]
    roomy = Runtime(max_memory_mib=(rss_bytes() >> 20) + 1024)
    assert assemble._routes(first, spec, None, roomy, False, notes.append) == [first]
    assert loaded == [("qwen2.5-coder-0.5b", "llamacpp")]


def test_where_the_budget_holds_one_runtime_the_program_runs_the_target_alone(monkeypatch):
    notes = []
    monkeypatch.setattr(assemble, "load_choice",
                        lambda _name: {"predicted_tokens_per_s": {"executorch": 9.0, "llamacpp": 10.0}})
    monkeypatch.setattr(assemble, "resident_estimate", lambda _name, _runtime: 512 << 20)
    spec = PairSpec("smollm2-135m", "qwen2.5-coder-1.5b")
    mib = rss_bytes() >> 20

    def alone(**kw) -> bool:
        return assemble._program_alone(spec, Runtime(**kw), notes.append)

    assert alone(target="llamacpp", max_memory_mib=mib + 768)  # one fits, not both
    assert "the program alone runs the target" in notes[-1]
    assert not alone(target="llamacpp", max_memory_mib=mib + 2048)  # both fit: the router keeps both
    assert not alone(target="llamacpp", max_memory_mib=mib + 256)  # not even the program: as it was
    assert not alone(target="llamacpp") and not alone(target="executorch", max_memory_mib=mib + 768)
    assert len(notes) == 1
