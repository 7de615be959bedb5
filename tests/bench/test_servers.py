"""The serve suite's rows (omnidraft/bench/servers.py) on the tiny pair: `omnidraft serve` with
the pair and with the target alone, each its own process driven through the `openai` SDK, their
greedy texts equal (fp32) on every turn of a three-turn conversation (the earlier turns answered
by the target alone's server for both) and a completion, the pair's target forwards read from
its usage, the first token (by turn too) and latency percentiles kept, then two clients at once
on each server (each with whole conversations), and every server stopped; a server that exits
before serving is a one-line error."""

import sys

import pytest

from omnidraft.bench.run import run_suite
from omnidraft.bench.servers import ServerRow
from omnidraft.bench.suites import Options, suite
from omnidraft.errors import OmniDraftError

from ..test_session import models  # noqa: F401  (the tiny pair the Session tests run, as model folders)

pytest.importorskip("openai")


def test_omnidraft_serve_beside_its_target_alone_through_the_sdk(tmp_path, monkeypatch, models):
    from omnidraft.bench import servers

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    started = []
    real = servers.ServerRow.__init__

    def keep(self, *a, **k):
        real(self, *a, **k)
        started.append(self)

    monkeypatch.setattr(servers.ServerRow, "__init__", keep)
    drafter, target = models
    opts = Options(drafter, target, {"code": 1, "conversations": 1}, max_new_tokens=8, threads=1, dtype="fp32",
                   rows=("serve-target", "serve"), clients=2)
    got = run_suite(suite("serve"), opts, out=tmp_path / "results")
    pair, alone = got["rows"]["omnidraft serve"], got["rows"]["omnidraft serve (target alone)"]
    assert got["reference"] == "omnidraft serve (target alone)" and pair["prompts"] == alone["prompts"] == 4
    assert pair["equal"] == pair["compared"] == 4  # greedy, fp32, the same runtime: the target's own text
    assert pair["tokens_per_forward"] is not None and pair["tokens_per_forward"] >= 1.0
    assert pair["first_token_s"] > 0 and pair["latency_p50_s"] <= pair["latency_p95_s"]
    assert list(got["turns"]) == ["turn 1", "turn 2", "turn 3"]  # the completion is a first turn
    assert [got["turns"][t]["omnidraft serve"]["prompts"] for t in got["turns"]] == [2, 1, 1]
    assert "first token (s, median)" in sorted((tmp_path / "results").glob("bench-serve-*.md"))[-1].read_text()
    together = got["concurrent"]
    assert set(together) == set(got["rows"]) and all(c["requests"] == 4 and c["clients"] == 2 and not c["failed"]
                                                      for c in together.values())
    assert "2 clients at once" in sorted((tmp_path / "results").glob("bench-serve-*.md"))[-1].read_text()
    assert len(started) == 2 and all(r.proc.poll() is not None for r in started)  # stopped


def test_clients_get_whole_conversations_in_order():
    from omnidraft.bench.concurrent import clients_of
    from omnidraft.bench.prompts import prompt_sets

    prompts = prompt_sets({"conversations": 3, "code": 1})
    shares = clients_of(prompts, 2)
    assert sorted(p.text for s in shares for p in s) == sorted(p.text for p in prompts)
    for share in shares:
        for p in share:
            if p.earlier:  # its earlier turns' prompts come before it, on the same client
                assert [q.text for q in share if q.earlier == p.earlier[:-1] and q.text == p.earlier[-1]]
                assert share.index(p) > next(i for i, q in enumerate(share) if q.text == p.earlier[-1])


def test_a_server_that_exits_before_serving_is_a_one_line_error(tmp_path):
    with pytest.raises(OmniDraftError, match="--clients is for the serve suite"):
        suite("pair").build(Options(clients=2), lambda s: None)
    with pytest.raises(OmniDraftError, match="exited with code 3 before serving") as err:
        ServerRow("broken", [sys.executable, "-c", "print('no model here'); raise SystemExit(3)"], None,
                  health="/health", key_flag="--api-key", threads=1, log=lambda s: None)
    assert "its output is in" in str(err.value) and "\n" not in str(err.value)
