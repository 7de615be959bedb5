"""The target runtime kept for this machine: predictions decide clear cases; where llama.cpp leads
the bit-exact program by less than the predictions' error, the program's calibration beside
llama.cpp alone decides, and the choice (with what decided it) is what `auto` loads next."""

import json

from omnidraft.pairs.runtime_choice import FILE, NEAR, first_choice, resolve, settle
from omnidraft.pairs.spec import pair_dir

PAIR = "smollm2-135m--qwen2.5-coder-1.5b"


def test_a_near_tie_goes_to_the_bit_exact_program_and_clear_cases_to_the_prediction():
    assert first_choice({"executorch": 25.3, "llamacpp": 26.7}) == "executorch"  # 0.95: within the error
    assert first_choice({"executorch": 0.8 * NEAR * 26.7, "llamacpp": 26.7}) == "llamacpp"
    assert first_choice({"executorch": 30.0, "llamacpp": 26.7}) == "executorch"
    assert first_choice({"llamacpp": 26.7}) == "llamacpp"
    assert first_choice({"eager": 5.0, "executorch": 9.0}) == "executorch"


def test_the_calibration_settles_the_choice_and_auto_loads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    predicted = {"executorch": 25.3, "llamacpp": 26.7}
    assert settle(PAIR, predicted, "executorch", 1.04) == "executorch"
    kept = json.loads((pair_dir(PAIR) / FILE).read_text())
    assert kept["measured_vs_llamacpp"] == 1.04 and kept["calibrated_on"] == "executorch"
    assert resolve(PAIR, "auto", exact=False) == "executorch"
    assert settle(PAIR, predicted, "executorch", 0.97) == "llamacpp"  # the pair ran slower than llama.cpp alone
    assert resolve(PAIR, "auto", exact=False) == "llamacpp"
    assert resolve(PAIR, "auto", exact=True) == "auto"  # an exact session never loads it
    assert settle(PAIR, predicted, "executorch", None) == "executorch"  # nothing measured: the calibrated one
    assert settle(PAIR, {"executorch": 25.3}, "executorch", 0.9) == "executorch"  # exact: llama.cpp no candidate
    assert settle(PAIR, predicted, "llamacpp", None) == "llamacpp"
