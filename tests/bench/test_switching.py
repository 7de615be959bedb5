"""`omnidraft bench switching` (bench/switching.py): bad options are named, the pasted modules are
real and distinct, and the table says each kind of turn, the ratio the issue bounds and whether the
answers equal the read row's."""

import pytest

from omnidraft.bench.switching import SwitchingOptions, markdown, modules
from omnidraft.errors import OmniDraftError


def test_bad_options_are_named():
    with pytest.raises(OmniDraftError, match="unknown row 'twins'"):
        SwitchingOptions(rows=("read", "twins"))
    with pytest.raises(OmniDraftError, match="unknown row 'states-0'"):
        SwitchingOptions(rows=("states-0",))
    assert SwitchingOptions(rows=("read", "states-64", "states")).rows == ("read", "states-64", "states")
    with pytest.raises(OmniDraftError, match="conversations must be in 2.."):
        SwitchingOptions(conversations=1)
    with pytest.raises(OmniDraftError, match="restarts must be in 0..conversations"):
        SwitchingOptions(conversations=2, restarts=3)


def test_the_modules_are_distinct_source_text_enough_for_32_conversations():
    got = modules(32)
    assert len(set(got)) == 32 and all(len(m) > 1000 and '"""' in m for m in got)
    assert SwitchingOptions(conversations=32).conversations == 32


def test_the_table_has_each_kind_of_turn_and_the_ratio():
    result = {"question": "?", "options": {"drafter": "d", "target": "t", "threads": 2, "conversations": 8,
                                           "restarts": 2, "max_new_tokens": 24, "cache_ram_mib": 2048},
              "rows": {"read": {"first_token_s": {"first turn": 1.2, "just used": 0.1, "came back": 1.3,
                                                  "after a restart": 1.4},
                                "restored_tokens": {"ram": 0, "disk": 0}, "rss_bytes": 1.5e9, "states_ram_bytes": 0},
                       "states": {"first_token_s": {"first turn": 1.2, "just used": 0.1, "came back": 0.12,
                                                    "after a restart": 0.2},
                                  "restored_tokens": {"ram": 4800, "disk": 1200}, "rss_bytes": 1.9e9,
                                  "states_ram_bytes": 200 << 20, "runtimes": {"executorch": 40, "llamacpp": 2},
                                  "equal_on_program": [40, 40],
                                  "equal_to_read": 42, "answers": 42}}}
    md = "\n".join(markdown(result))
    assert "| read | 1.2 | 0.1 | 1.3 | 1.4 | 13.00x | 0 / 0 | 1.50 GB | 0 MiB | - | - |" in md
    assert ("| states | 1.2 | 0.1 | 0.12 | 0.2 | 1.20x | 4800 / 1200 | 1.90 GB | 200 MiB | executorch 40, llamacpp 2 "
            "| 42/42 (40/40 both on the program) |") in md


def test_the_cli_names_an_option_the_suite_does_not_take(tmp_path, capsys):
    from omnidraft.cli import main

    assert main(["bench", "switching", "--budget", "2G", "--out", str(tmp_path)]) == 2
    assert "--budget: not an option of the switching suite" in capsys.readouterr().err


def test_the_restart_conversation_is_long_enough_and_its_table_says_the_ratio(qwen_tok):
    from omnidraft.bench.restart import _messages, _pasted

    text = _pasted(modules, qwen_tok, 2000)
    assert len(qwen_tok(text).input_ids) >= 2000 and text.count("```python") >= 2
    assert [m["role"] for m in _messages(["a", "b", "c"], ["x", "y"], 2)] == ["user", "assistant"] * 2 + ["user"]
    result = {"question": "?", "options": {"drafter": "d", "target": "t", "threads": 2, "conversations": 8,
                                           "restarts": 2, "max_new_tokens": 24, "cache_ram_mib": 64},
              "rows": {"restart": {"first_token_s": {"first turn": 12.0, "warm": 0.2, "after kill -9": 0.25},
                                   "conversation_tokens": 2300, "runtimes": ["llamacpp"] * 3,
                                   "equal_to_target_alone": True}}}
    md = "\n".join(markdown(result))
    assert "| 12.0 | 0.2 | 0.25 | 1.25x | llamacpp, llamacpp, llamacpp | yes |" in md and "2300-token" in md
