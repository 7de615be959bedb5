"""The product layer: Session (stream, log, hot-swap adapters), the verification log, tuning
rounds with the regression guard, and the daemon surviving kill -9."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from omnidraft.errors import OmniDraftError
from omnidraft.sampling import SamplingConfig

from omnidraft.decode.generate import generate_ar
from omnidraft.decode.text import drained
from omnidraft.decode.target import LocalTarget
from omnidraft.models.eager import CausalLM
from omnidraft.pairs.settings import Runtime, TargetRef
from omnidraft.train.verlog import VerificationLog

from .conftest import save_tiny, tiny, vocab_len

FP32 = Runtime(dtype="fp32")  # the eager target in fp32: greedy equality is exact
PROMPTS = ["def add(a, b):\n", "The weather today is", "Liste des courses: ", "x = [1, 2, 3]\n",
           "import os\n", "Dear team,", "for i in range(", "SELECT * FROM", "Once upon", "class Foo:"]


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm_tok, qwen_tok):
    d = tmp_path_factory.mktemp("models")
    drafter = save_tiny(tiny("llama", vocab_len(smollm_tok), seed=11), smollm_tok, d / "drafter")
    target = save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=12), qwen_tok, d / "target")
    return str(drafter), str(target)


def test_log_appends_reads_and_prunes_oldest_first(tmp_path):
    log = VerificationLog(tmp_path / "log.sqlite", max_bytes=1000)
    ids = [log.append("p", f"prompt {i}", bytes(300)) for i in range(5)]
    assert ids == sorted(ids)
    kept = [r[0] for r in log.read("p")]
    assert kept == ids[-3:] and log.size("p") == 900  # the two oldest went
    assert log.count("p", after=ids[-2]) == 1 and log.read("other") == []
    log.append("q", "x", bytes(10))
    assert log.pairs() == ["p", "q"] and log.size("p") == 900  # bounds are per pair
    with pytest.raises(ValueError):
        VerificationLog(tmp_path / "x.sqlite", max_bytes=0)


def test_session_streams_the_targets_output_logs_and_hot_swaps(home, models, qwen_tok):
    from omnidraft import Session
    from omnidraft.jobs.pairing import fresh_adapter

    drafter, target = models
    s = Session(drafter, target, runtime=FP32)
    t = LocalTarget(CausalLM(s.target.model.model))
    ref = generate_ar(t, qwen_tok, PROMPTS[0], max_new_tokens=24)
    pieces = list(s.stream(PROMPTS[0], max_new_tokens=24))
    assert "".join(pieces) == ref.text and s.last.token_ids == ref.token_ids
    assert s.log.count(s.spec.name) == 1 and s.version is None
    # a published version (LoRA B perturbed so the drafter really changes) is picked up live
    v1 = fresh_adapter(s.store, s.spec.name, s.spec.drafter, s.base.model)
    assert s.generate(PROMPTS[1], max_new_tokens=24).token_ids == generate_ar(t, qwen_tok, PROMPTS[1], max_new_tokens=24).token_ids
    assert s.version == v1
    from omnidraft.train.trainer import TrainConfig, attach_lora

    from omnidraft.models.loading import load_model

    m = attach_lora(load_model(drafter).model, TrainConfig())
    torch.manual_seed(0)
    for n, p in m.named_parameters():
        if "lora_B" in n:
            p.data.normal_(std=0.5)
    v2 = s.store.publish(s.spec.name, m)
    before = s.drafter.extend([1, 2, 3]).logits.clone()
    s.drafter.reset()
    res = s.generate(PROMPTS[2], max_new_tokens=24)
    assert s.version == v2 and res.token_ids == generate_ar(t, qwen_tok, PROMPTS[2], max_new_tokens=24).token_ids
    s.drafter.reset()
    assert not torch.allclose(s.drafter.extend([1, 2, 3]).logits, before)  # the new adapter is live
    assert s.log.count(s.spec.name) == 3
    s.close()


def _refs(model_dir: str, tok, prompts: list[str], n: int) -> list[list[int]]:
    """The target's own greedy output of each prompt (its own model, loaded apart)."""
    from omnidraft.models.loading import load_model

    t = LocalTarget(load_model(model_dir, dtype="fp32"))
    return [generate_ar(t, tok, p, max_new_tokens=n).token_ids for p in prompts]


def test_a_local_target_starts_holding_the_chat_preamble(home, models, qwen_tok):
    """A Session's local target reads the chat template's preamble once, when it loads (as both
    routes' do), paired or alone: a chat prompt then reads only its own turn, and the answer is
    still the target's own greedy output."""
    from omnidraft import Session
    from omnidraft.decode.text import chat_preamble
    from omnidraft.models.loading import load_model

    drafter, target = models
    preamble = chat_preamble(qwen_tok)
    t = LocalTarget(load_model(target, dtype="fp32"))
    ref = generate_ar(t, qwen_tok, PROMPTS[1], max_new_tokens=12, chat=True).token_ids
    for s in (Session(drafter, target, runtime=FP32, log=False), Session(None, target, runtime=FP32)):
        assert len(preamble) > 10 and s.target_model.tokens == preamble
        assert s.generate(PROMPTS[1], max_new_tokens=12, chat=True).token_ids == ref
        assert s.target_model.tokens[:len(preamble)] == preamble
        s.close()


def test_a_session_serves_an_apps_worker_threads_in_turn(home, models, qwen_tok):
    """Made on the main thread, used from a worker (what an app with a UI does) and from two
    threads at once: every generation is the target's own greedy output, returns its own Result,
    and lands in the log; nothing is raised at the end of a stream."""
    from concurrent.futures import ThreadPoolExecutor

    from omnidraft import Session

    drafter, target = models
    refs = _refs(target, qwen_tok, PROMPTS[:4], 20)
    s = Session(drafter, target, runtime=FP32, k=3)
    with ThreadPoolExecutor(1) as one:
        first = one.submit(s.generate, PROMPTS[0], max_new_tokens=20).result()
    assert first.token_ids == refs[0] and s.log.count(s.spec.name) == 1

    def streamed(prompt: str) -> str:
        return "".join(s.stream(prompt, max_new_tokens=20))

    with ThreadPoolExecutor(3) as pool:  # six calls from three threads at once: each waits its turn
        texts = [pool.submit(streamed, p) for p in PROMPTS[1:4]]
        results = [pool.submit(s.generate, p, max_new_tokens=20) for p in PROMPTS[1:4]]
        texts, results = [f.result() for f in texts], [f.result() for f in results]
    assert [r.token_ids for r in results] == refs[1:4]  # each call's own Result, not the session's last
    assert texts == [qwen_tok.decode(r, skip_special_tokens=True) for r in refs[1:4]]
    assert s.log.count(s.spec.name) == 7
    s.close()


def test_a_second_stream_on_the_same_thread_is_refused_and_a_closed_stream_leaves_the_next_exact(
        home, models, qwen_tok, monkeypatch):
    """Two open streams on one thread cannot take turns (the second would wait on the first
    forever): a clear error. A stream closed after its first piece leaves the caches consistent:
    the next generation is the target's own, with models that keep one cache across generations
    (as programs do: no fork)."""
    from omnidraft import Session
    from omnidraft.errors import OmniDraftError

    monkeypatch.setattr(CausalLM, "fork", None)  # one cache per model, as an ExecuTorch program has
    drafter, target = models
    refs = _refs(target, qwen_tok, PROMPTS[:2], 20)
    s = Session(drafter, target, runtime=FP32, k=4, log=False)
    first = s.stream(PROMPTS[0], max_new_tokens=20)
    next(first)
    with pytest.raises(OmniDraftError, match="earlier generation on this Session is still open"):
        next(s.stream(PROMPTS[1], max_new_tokens=20))
    first.close()  # early: the next generation finds the caches mid-answer
    assert s.generate(PROMPTS[1], max_new_tokens=20).token_ids == refs[1]
    assert s.generate(PROMPTS[0], max_new_tokens=20).token_ids == refs[0]
    sampled = Session(drafter, target, runtime=FP32, log=False, sampling=SamplingConfig(temperature=0.7, seed=1))
    assert sampled.verify == "point-mass" and sampled.lossless
    assert sampled.generate(PROMPTS[0], max_new_tokens=8).lossless
    s.close()
    sampled.close()


def test_k0_is_the_target_alone_on_every_entry_point(home, models, qwen_tok, capsys):
    """k=0, no drafter, or the `ar` strategy: the target decodes alone, no drafter is loaded and
    nothing is logged; the CLI's -k 0 likewise."""
    import json

    from omnidraft import Session, cli
    from omnidraft.propose.config import SpecConfig

    drafter, target = models
    ref = _refs(target, qwen_tok, PROMPTS[:1], 16)[0]
    for s in (Session(drafter, target, runtime=FP32, k=0), Session(None, target, runtime=FP32),
              Session(drafter, target, runtime=FP32, spec=SpecConfig("ar"))):
        r = s.generate(PROMPTS[0], max_new_tokens=16)
        assert s.alone and s.drafter is None and s.log is None
        assert r.token_ids == ref and r.metrics["strategy"] == "ar" and r.metrics["drafter_forwards"] == 0
        assert r.metrics["target_forwards"] == len(ref)
        s.close()
    assert cli.main(["generate", "--drafter", drafter, "--target", target, "--prompt", PROMPTS[0], "-k", "0",
                     "--max-new-tokens", "16", "--dtype", "fp32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == ref and out["metrics"]["strategy"] == "ar" and not out["logged"]
    with pytest.raises(OmniDraftError, match="draft length k must be an integer in 0..8"):
        Session(drafter, target, runtime=FP32, k=9)


def test_by_default_a_draft_stops_at_the_drafters_confidence_and_output_stays_the_targets(home, models, qwen_tok,
                                                                                          capsys):
    """The default spec stops a draft after a token the drafter gives < DRAFT_CONFIDENCE and the
    output is the target's own; the CLI's `--confidence 0` drafts the round's k, so more drafter
    forwards for the same output."""
    import json

    from omnidraft import Session, cli
    from omnidraft.propose.config import DRAFT_CONFIDENCE

    drafter, target = models
    ref = _refs(target, qwen_tok, PROMPTS[:1], 24)[0]
    s = Session(drafter, target, runtime=FP32, k=8, log=False)
    assert s.spec_cfg.confidence == DRAFT_CONFIDENCE
    r = s.generate(PROMPTS[0], max_new_tokens=24)
    assert r.token_ids == ref
    s.close()
    args = ["generate", "--drafter", drafter, "--target", target, "--prompt", PROMPTS[0], "-k", "8", "--no-lookup",
            "--max-new-tokens", "24", "--dtype", "fp32", "--no-log", "--no-memory", "--json"]
    for conf in ("0", "0.5"):
        assert cli.main(args + ["--confidence", conf]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["token_ids"] == ref
        if conf == "0":  # every drafting round drafted 8 (the window allowing)
            full = out["metrics"]["drafter_forwards"]
        else:
            assert out["metrics"]["drafter_forwards"] < full


def test_pairing_and_the_demo_run_each_prompt_as_a_conversation_of_its_own(home, models):
    """The same prompt asked again by the pairing job (and the demo's second phase) is a new
    conversation: it does not copy the earlier answer, which would pass for a faster pair."""
    from omnidraft import Session
    from omnidraft.jobs.compare import measure

    drafter, target = models
    s = Session(drafter, target, runtime=FP32, log=False, k=4)
    first = s.generate(PROMPTS[0], max_new_tokens=24)
    measure(s, [PROMPTS[0]], max_new_tokens=24, ar=False, say=lambda *a, **k: None)
    copied = s.last.metrics["rounds_by_kind"].get("lookup", {"accepted": 0})["accepted"]
    assert s.last.token_ids == first.token_ids and copied < len(first.token_ids) // 2
    s.close()


def test_a_later_turn_copies_from_an_earlier_one(home, models):
    """Earlier turns are context to copy from: asked again, the session proposes its earlier
    answer and the target accepts it; a new conversation forgets it."""
    from omnidraft import Session

    drafter, target = models
    s = Session(drafter, target, runtime=FP32, log=False, k=4)
    first = s.generate(PROMPTS[0], max_new_tokens=24)
    again = s.generate(PROMPTS[0], max_new_tokens=24)
    copied = again.metrics["rounds_by_kind"]["lookup"]["accepted"]
    assert again.token_ids == first.token_ids and copied >= len(first.token_ids) // 2
    s.new_conversation()
    fresh = s.generate(PROMPTS[0], max_new_tokens=24)
    assert fresh.token_ids == first.token_ids
    assert fresh.metrics["rounds_by_kind"].get("lookup", {"accepted": 0})["accepted"] < copied
    off = Session(drafter, target, runtime=FP32, log=False, k=4, lookup=False)
    off.generate(PROMPTS[0], max_new_tokens=8)
    assert "lookup" not in off.generate(PROMPTS[0], max_new_tokens=8).metrics["rounds_by_kind"]
    s.close()
    off.close()


def test_a_pair_remembers_its_answers_for_later_sessions_in_their_own_space(home, models, qwen_tok):
    """A later Session recalls an earlier one's answer from the pair's memory (its context does not
    hold it) and the target accepts it: the output is the target alone's, token for token. Another
    space recalls none of it; unlogged() generations neither recall nor are remembered unless asked
    to read; memory=False turns it off."""
    from omnidraft import Session

    drafter, target = models
    first = Session(drafter, target, runtime=FP32, log=False, k=4, lookup=False)
    ref = generate_ar(LocalTarget(CausalLM(first.target.model.model)), qwen_tok, PROMPTS[0], max_new_tokens=24)
    assert "memory" not in first.generate(PROMPTS[0], max_new_tokens=24).metrics["rounds_by_kind"]
    first.close()
    s = Session(drafter, target, runtime=FP32, log=False, k=4, lookup=False)
    pieces = s.pieces(PROMPTS[0], max_new_tokens=24)
    sources = []
    try:
        while True:
            sources.append(next(pieces).source)
    except StopIteration as done:
        again = done.value
    recalled = again.metrics["rounds_by_kind"]["memory"]
    assert again.token_ids == ref.token_ids and recalled["accepted"] >= len(ref.token_ids) // 2
    assert "remembered" in sources

    def entries() -> int:
        return sum(st.entries for st in s.memories._store.stats())

    kept = entries()
    other = drained(s.pieces(PROMPTS[0], max_new_tokens=24, memory_space="someone else"))
    assert other.token_ids == ref.token_ids and "memory" not in other.metrics["rounds_by_kind"]
    with s.unlogged():
        assert "memory" not in s.generate(PROMPTS[0], max_new_tokens=24).metrics["rounds_by_kind"]
    with s.unlogged(memory="read"):
        assert s.generate(PROMPTS[0], max_new_tokens=24).metrics["rounds_by_kind"]["memory"]["accepted"] > 0
    assert entries() == kept + 1  # the other space's answer; nothing of the unlogged ones
    s.close()
    off = Session(drafter, target, runtime=FP32, log=False, k=4, lookup=False, memory=False)
    assert "memory" not in off.generate(PROMPTS[0], max_new_tokens=24).metrics["rounds_by_kind"]
    off.close()


def test_a_seeded_generation_is_the_targets_own_seeded_output_whatever_it_proposes(home, models):
    """Point-mass verification draws each position's token from that position's own stream: with
    one seed the pair commits what the target alone samples, and so does the same request again
    after the pair remembered it (its rounds then recall, proposing other ids)."""
    from omnidraft import Session

    drafter, target = models
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, seed=5)
    alone = Session(None, target, runtime=FP32, sampling=sampling)
    ref = alone.generate(PROMPTS[3], max_new_tokens=24).token_ids
    s = Session(drafter, target, runtime=FP32, log=False, k=4, sampling=sampling, verify="point-mass")
    first = s.generate(PROMPTS[3], max_new_tokens=24)
    s.new_conversation()
    again = s.generate(PROMPTS[3], max_new_tokens=24)
    assert first.token_ids == again.token_ids == ref
    assert again.metrics["rounds_by_kind"]["memory"]["accepted"] > 0
    other = s.generate(PROMPTS[3], max_new_tokens=24, sampling=SamplingConfig(temperature=0.9, top_p=0.95, seed=6))
    assert other.token_ids != ref
    s.close()
    alone.close()


def test_an_unreadable_memory_is_one_note_and_the_pair_serves_without_it(home, models, capsys):
    from omnidraft import Session
    from omnidraft.pairs.spec import pair_dir, pair_name

    drafter, target = models
    folder = pair_dir(pair_name(drafter, target)) / "memory"
    folder.mkdir(parents=True)
    (folder / "memory.sqlite").write_bytes(b"garbage" * 100)
    s = Session(drafter, target, runtime=FP32, log=False, k=4)
    for _ in range(2):
        assert s.generate(PROMPTS[0], max_new_tokens=8).token_ids
    notes = [line for line in capsys.readouterr().err.splitlines() if "the memory at" in line]
    assert len(notes) == 1 and "unreadable" in notes[0]
    s.close()


def test_a_pair_over_its_memory_budget_is_one_error_and_within_it_serves(home, models):
    from dataclasses import replace

    from omnidraft import Session
    from omnidraft.models.budget import rss_bytes

    drafter, target = models
    with pytest.raises(OmniDraftError, match=r"^the pair holds [\d.]+ GiB resident here, over the memory budget of "
                                             r"0\.00 GiB \(raise --max-memory, or run the target alone"):
        Session(drafter, target, runtime=replace(FP32, max_memory_mib=1), log=False)
    s = Session(drafter, target, runtime=replace(FP32, max_memory_mib=(rss_bytes() >> 20) + 2048), log=False, slots=2)
    assert s.generate(PROMPTS[0], max_new_tokens=8).token_ids
    s.close()


@pytest.fixture()
def self_pair(home, models, tmp_path):
    """Drafter == target (same tiny model and tokenizer): the records are the drafter's own greedy
    output, so its teacher-forced acceptance starts at 1.0 and a sabotaged round must lower it."""
    from omnidraft import Session

    drafter, _ = models
    s = Session(drafter, drafter, runtime=FP32)
    for p in PROMPTS * 3:
        s.generate(p, max_new_tokens=16)
    return s


def test_round_publishes_and_the_guard_rejects_a_worse_candidate(self_pair):
    from omnidraft.models.loading import load_model
    from omnidraft.train.trainer import TrainConfig
    from omnidraft.train.tuning import RoundConfig, cursor, run_round

    s = self_pair
    cfg = RoundConfig(min_records=8, max_records=8, replay=0, train=TrainConfig(lr=1e-4))  # a gentle round
    checks = []  # the daemon's guest check: before every record trained on, and every record judged
    r1 = run_round(s.spec, s.log, s.store, load_model(s.spec.drafter).model, cfg, wait_if_paused=lambda: checks.append(1))
    assert r1["status"] == "published" and r1["acceptance_after"] >= r1["acceptance_before"] > 0.9
    assert len(checks) >= len(r1["record_ids"]) + 2 * r1["held_out"] and r1["held_out"] > 0
    assert len(r1["record_ids"]) == 8 and all(i % cfg.holdout_every for i in r1["record_ids"])
    bad = RoundConfig(min_records=8, max_records=8, replay=0, train=TrainConfig(method="full", lr=0.5))
    r2 = run_round(s.spec, s.log, s.store, load_model(s.spec.drafter).model, bad)
    assert r2["status"] == "rejected" and r2["acceptance_after"] < r2["acceptance_before"]
    assert s.store.latest(s.spec.name) == r1["version"]  # nothing published
    assert cursor(s.spec, s.store) == r2["records_through"]  # the rejected records are consumed
    assert not set(r1["record_ids"]) & set(r2["record_ids"])


def test_a_round_replays_earlier_records_and_takes_more_passes(self_pair):
    from omnidraft.models.loading import load_model
    from omnidraft.train.tuning import RoundConfig, run_round

    s = self_pair
    r1 = run_round(s.spec, s.log, s.store, load_model(s.spec.drafter).model, RoundConfig(min_records=8, max_records=8))
    cfg = RoundConfig(min_records=8, max_records=8, replay=8, epochs=2)
    r2 = run_round(s.spec, s.log, s.store, load_model(s.spec.drafter).model, cfg)
    assert r2["status"] in ("published", "rejected")  # the guard's verdict is not what this tests
    earlier = [i for i in range(1, r1["records_through"] + 1) if i % cfg.holdout_every]
    assert len(earlier) == 8 and sorted(r2["replayed_ids"]) == earlier  # all of round 1's, none held out
    assert not set(r2["replayed_ids"]) & set(r2["record_ids"])
    assert r2["distill_steps"] == 2 * (8 + 8) // 8  # two passes over 8 new + 8 replayed records


def test_a_first_round_trains_the_adapter_its_settings_name(self_pair):
    import json

    from omnidraft.models.loading import load_model
    from omnidraft.train.tuning import RoundConfig, run_round

    s = self_pair
    cfg = RoundConfig.from_dict({"min_records": 8, "max_records": 8, "replay": 0,
                                 "train": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "up_proj"],
                                           "lr": 1e-5}})  # gentle: the guard publishes it
    r1 = run_round(s.spec, s.log, s.store, load_model(s.spec.drafter).model, cfg)
    assert r1["status"] == "published"
    conf = json.loads((s.store.path(s.spec.name, r1["version"]) / "adapter_config.json").read_text())
    assert (conf["r"], conf["lora_alpha"], sorted(conf["target_modules"])) == (8, 16, ["q_proj", "up_proj"])


def test_round_settings_come_from_json_and_a_bad_name_is_one_error(tmp_path):
    from omnidraft.errors import OmniDraftError
    from omnidraft.train.daemon import load_config

    good = tmp_path / "good.json"
    good.write_text('{"replay": 64, "epochs": 2, "train": {"lr": 3e-4}}')
    cfg = load_config(good)
    assert (cfg.replay, cfg.epochs, cfg.train.learning_rate) == (64, 2, 3e-4)
    for text, needle in [('{"replya": 1}', "unknown round option 'replya'"),
                         ('{"train": {"lrr": 1}}', "unknown train option 'lrr'"),
                         ('{"epochs": 0}', "RoundConfig.epochs must be >= 1"), ("[1]", "JSON object"),
                         ("{", "cannot read")]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(OmniDraftError, match=needle):
            load_config(bad)


def _status(home):
    try:
        return json.loads((home / "daemon" / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def test_daemon_kill9_mid_training_resumes_without_loss_or_duplicates(self_pair, home):
    s = self_pair
    env = {**os.environ, "OMNIDRAFT_HOME": str(home)}
    config = home.parent / "rounds.json"  # rounds from 8 records: the 24 trainable ones make several
    config.write_text('{"min_records": 8}')
    cmd = [sys.executable, "-m", "omnidraft.cli", "daemon", "run", "--poll", "0.2", "--config", str(config)]
    proc = subprocess.Popen(cmd + ["--throttle", "0.4"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            st = _status(home)
            if st.get("state") == "training" and "trained on 3/" in st.get("progress", ""):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"daemon never reached mid-training: {_status(home)}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert s.store.versions(s.spec.name) == []  # killed before publishing: nothing visible
    out = subprocess.run(cmd + ["--once"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    from omnidraft.train.tuning import cursor, history

    versions = s.store.list(s.spec.name)  # published rounds: their meta.json is the truth
    rejected = [h for h in history(s.spec) if h["status"] == "rejected"]
    assert versions or rejected, out.stdout
    used = [i for v in versions for i in v["record_ids"]] + [i for h in rejected for i in h["record_ids"]]
    assert len(used) == len(set(used))  # no record trained on twice
    trainable = [r[0] for r in s.log.read(s.spec.name) if r[0] % 5]
    through = cursor(s.spec, s.store)
    assert sorted(used) == [i for i in trainable if i <= through]  # none lost
    assert len(trainable) - len(used) < 8  # what is left is less than one update interval
    for v in versions:
        d = s.store.path(s.spec.name, v["version"])
        assert (d / "adapter_model.safetensors").is_file() and (d / "head.safetensors").is_file()


def test_session_with_a_remote_target_streams_and_logs(home, models, qwen_tok):
    """The same Session API against `serve-target` over HTTP: the target's greedy output, and a
    training record (with the target's top-k sent back by the server) in the log."""
    from omnidraft import Session
    from omnidraft.models.loading import load_model
    from omnidraft.train.records import Record

    from .remote.test_server import TOKEN, Server

    drafter, target = models
    model = load_model(target).model
    srv = Server(model)
    try:
        s = Session(drafter, TargetRef(srv.url, token=TOKEN, tokenizer=target))
        ref = generate_ar(LocalTarget(CausalLM(model)), qwen_tok, PROMPTS[3], max_new_tokens=20)
        assert "".join(s.stream(PROMPTS[3], max_new_tokens=20)) == ref.text
        assert s.last.token_ids == ref.token_ids
        rows = s.log.read(s.spec.name)
        assert len(rows) == 1 and Record.from_bytes(rows[0][2]).row_ids.shape[0] > 0
        assert s.spec.remote and s.spec.name.startswith("drafter")
        s.close()
    finally:
        srv.stop()


def test_the_cost_model_chooses_k_and_is_kept_for_the_next_session(home, models, monkeypatch):
    """Session's default draft length: the cost model measured on first use, its acceptance
    learned from the rounds, saved in the pair's folder and reused (not re-measured)."""
    from omnidraft import Session
    from omnidraft.decode.draft_length import CostModelK, FixedK
    from omnidraft.pairs import cost_store, timing

    drafter, target = models
    s = Session(drafter, target, runtime=FP32, log=False)
    assert isinstance(s.draft_length, CostModelK) and set(s.draft_length.model.verify_ms) == set(timing.WIDTHS)
    s.generate(PROMPTS[0], max_new_tokens=12)  # no acceptance known yet: this generation probes
    assert s.draft_length.reached
    saved = json.loads(s.route.cost.path.read_text())
    assert saved["on"]["target_runtime"] == "transformers fp32" and saved["reached"] == s.draft_length.reached
    monkeypatch.setattr(cost_store, "measure", lambda *a, **k: pytest.fail("measured again"))
    again = Session(drafter, target, runtime=FP32, log=False)
    assert again.draft_length.reached == s.draft_length.reached
    assert isinstance(Session(drafter, target, runtime=FP32, log=False, k=3).draft_length, FixedK)
    s.close()
    again.close()


def test_two_sessions_of_a_pair_keep_both_their_acceptance_evidence(home, models):
    """An app's Session and the CLI's, open at once on one pair, each save what they learnt: the
    cost file holds both Sessions' drafted rounds (not the last writer's alone), and each Session
    goes on from the merged counts."""
    from omnidraft import Session

    drafter, target = models
    sessions = [Session(drafter, target, runtime=FP32, log=False) for _ in range(2)]  # both read one file
    start = sessions[0].draft_length.reached[:1] or [0.0]
    drafted = [0, 0]  # rounds that proposed, per Session: each adds one to reached[0]
    for i, s in enumerate(sessions):
        real = s.draft_length.observe
        s.draft_length.observe = lambda p, a, real=real, i=i: (drafted.__setitem__(i, drafted[i] + (p > 0)), real(p, a))
    for s, prompt in zip(sessions, PROMPTS):
        s.generate(prompt, max_new_tokens=12)  # no acceptance known yet: each probes
    assert all(drafted)
    saved = json.loads(sessions[0].route.cost.path.read_text())
    assert saved["reached"][0] == start[0] + sum(drafted)
    assert sessions[1].draft_length.reached == saved["reached"]  # the last to save went on from the merge
    for s in sessions:
        s.close()


def test_the_drafters_slots_share_a_cache_until_a_conversation_comes_back(home, models):
    """With two slots, one conversation after another keeps one drafter cache; conversation A,
    then B, then A's follow-up gives A's slot a drafter cache of its own (pairs/conversations.py),
    and the answers stay the target's own greedy output."""
    from dataclasses import replace

    from omnidraft import Session
    from omnidraft.models.budget import rss_bytes

    drafter, target = models
    s = Session(drafter, target, runtime=replace(FP32, max_memory_mib=(rss_bytes() >> 20) + 4096), log=False,
                slots=2, k=4)
    a1 = [{"role": "user", "content": "def add(a, b):\n    return a + b\nWhat does add do?"}]
    first = s.generate(a1, max_new_tokens=8)
    a2 = a1 + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And sub?"}]
    s.generate(a2, max_new_tokens=8)  # the same conversation: its slot, its cache
    assert s.drafter.distinct == 1
    b1 = [{"role": "user", "content": "The weather today is"}]
    s.generate(b1, max_new_tokens=8)  # another conversation: the other slot, the same drafter cache
    assert s.drafter.distinct == 1
    a3 = a2 + [{"role": "assistant", "content": "sub subtracts."}, {"role": "user", "content": "And mul?"}]
    got = s.generate(a3, max_new_tokens=8)
    assert s.drafter.distinct == 2  # A came back: its slot's drafter cache is its own now
    alone = Session(None, target, runtime=FP32, log=False)
    assert got.token_ids == alone.generate(a3, max_new_tokens=8).token_ids
    s.close()
    alone.close()
