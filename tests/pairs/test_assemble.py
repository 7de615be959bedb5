"""Assembling a pair within a memory budget: the other target runtime loads only where it fits."""

from omnidraft.models.budget import rss_bytes
from omnidraft.pairs import assemble
from omnidraft.pairs.settings import Runtime
from omnidraft.pairs.spec import PairSpec
from omnidraft.pairs.routing import Route


def test_the_other_runtime_is_not_loaded_past_the_budget_and_loads_within_it(monkeypatch, tmp_path):
    loaded, notes = [], []
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))  # no cost model kept: loaded to be timed
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


def test_where_llamacpp_was_kept_first_the_program_loads_first_if_the_budget_holds_it(monkeypatch):
    monkeypatch.setattr(assemble, "load_choice",
                        lambda _name: {"predicted_tokens_per_s": {"executorch": 9.0, "llamacpp": 10.0}})
    monkeypatch.setattr(assemble, "resident_estimate", lambda _name, _runtime: 512 << 20)
    spec = PairSpec("smollm2-135m", "qwen2.5-coder-1.5b")
    mib = rss_bytes() >> 20

    def first(**kw) -> bool:
        return assemble._program_first(spec, Runtime(**kw))

    assert first(target="llamacpp") and first(target="llamacpp", max_memory_mib=mib + 768)
    assert not first(target="llamacpp", max_memory_mib=mib + 256)  # not even the program: llama.cpp, alone
    assert not first(target="executorch")  # the program was kept first anyway
    monkeypatch.setattr(assemble, "load_choice", lambda _name: {"predicted_tokens_per_s": {"llamacpp": 10.0}})
    assert not first(target="llamacpp")  # no program timed here


def test_llamacpp_beside_the_program_waits_to_be_loaded_where_its_cost_model_is_kept(monkeypatch, tmp_path):
    from omnidraft.decode.target import LocalTarget
    from omnidraft.pairs.cost import CostModel
    from omnidraft.pairs.cost_store import CostRecord, cost_file, write
    from omnidraft.pairs.deferred import waiting
    from omnidraft.pairs.timing import WIDTHS, measured_on

    loaded = []
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    monkeypatch.setattr(assemble, "load_choice", lambda _name: {"predicted_tokens_per_s": {"executorch": 9.0,
                                                                                          "llamacpp": 10.0}})
    monkeypatch.setattr(assemble, "resident_estimate", lambda _name, _runtime: 512 << 20)
    monkeypatch.setattr(assemble, "local_target", lambda *a, **_kw: loaded.append(a))
    spec = PairSpec("smollm2-135m", "qwen2.5-coder-0.5b")
    model = CostModel({w: 30.0 + w for w in WIDTHS}, drafter_ms=5.0, read_ms=1.0)
    write(cost_file(spec.name, "llama.cpp"), CostRecord(model, [], [], measured_on("llama.cpp qwen2 0.5B Q8_0",
                                                                                 "transformers fp32")))
    first = Route("executorch", LocalTarget(object()), None)
    routes = assemble._routes(first, spec, None, Runtime(), False, print)
    assert [r.runtime for r in routes] == ["executorch", "llamacpp"] and routes[0] is first
    assert waiting(routes[1].target.model) and loaded == []
    assert routes[1].draft_length.model.verify_ms == model.verify_ms  # the kept cost model, unloaded
