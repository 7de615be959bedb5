"""The footprint suite's readings (omnidraft/bench/footprint.py): a process's peak as the kernel
counted it and its tree's summed peak, the descendants of a process found through /proc, bad
options named in one line, and the markdown of a result."""

import subprocess
import sys

import pytest

from omnidraft.bench.footprint import FootprintOptions, children, markdown, peak_of
from omnidraft.models.budget import status
from omnidraft.errors import OmniDraftError

HOLD = "import time; b = bytearray({n}); b[::4096] = b'x' * len(b[::4096]); time.sleep({s})"


def test_a_processs_peak_and_its_trees_sum_are_read():
    # a parent holding 120 MB that runs two children of 150 MB side by side
    child = [sys.executable, "-c", HOLD.format(n=150_000_000, s=1.5)]
    script = (f"import subprocess, time; b = bytearray(120_000_000); b[::4096] = b'x' * len(b[::4096]); "
              f"ps = [subprocess.Popen({child!r}) for _ in range(2)]; [p.wait() for p in ps]")
    peak, tree, seconds = peak_of([sys.executable, "-c", script])
    assert 150e6 <= peak < 300e6  # the largest of the parent and its children, not their sum
    assert tree >= 120e6 + 2 * 150e6  # all three at once
    assert seconds >= 1.5


def test_a_failing_process_is_one_error_with_its_last_line():
    with pytest.raises(OmniDraftError, match="exited with 3") as err:
        peak_of([sys.executable, "-c", "import sys; print('first'); print('what went wrong', file=sys.stderr); "
                 "sys.exit(3)"])
    assert "what went wrong" in str(err.value)


def test_descendants_and_their_rss_are_found():
    grand = [sys.executable, "-c", HOLD.format(n=80_000_000, s=30)]
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess; subprocess.Popen({grand!r}).wait()"])
    try:
        for _ in range(100):
            kids = children(parent.pid)
            if kids and status(kids[0]).get("VmRSS", 0) > 80e6:
                break
            subprocess.run(["sleep", "0.1"])
        assert len(kids) == 1
        assert status(kids[0])["VmHWM"] >= 80e6
    finally:
        for pid in [*children(parent.pid), parent.pid]:
            subprocess.run(["kill", str(pid)])
        parent.wait()
    assert status(parent.pid) == {}  # gone


def test_bad_options_are_named():
    with pytest.raises(OmniDraftError, match="unknown row 'daemon'"):
        FootprintOptions(rows=("serve", "daemon"))
    with pytest.raises(OmniDraftError, match="max_new_tokens must be >= 1"):
        FootprintOptions(max_new_tokens=0)
    with pytest.raises(OmniDraftError, match="not a memory size: '1.5T'"):
        FootprintOptions(budget="1.5T")


def test_the_markdown_has_each_row_and_the_parts():
    result = {"question": "?", "options": {"drafter": "d", "target": "t", "threads": 2, "conversations": 1, "copy": 1,
                                           "max_new_tokens": 8},
              "rows": {"serve": {"ready_bytes": 1.1e9, "peak_bytes": 2.2e9, "steady_bytes": 2.0e9,
                                 "children": [{"pid": 9, "rss_bytes": 3e8, "peak_bytes": 4e8}],
                                 "parts": {"anonymous": 1.5e9, "prog/program.pte": 4e8, "tiny": 1e3},
                                 "tokens_per_s": 12.5},
                       "serve-budget": {"error": "omnidraft serve-budget exited with code 2 before serving: too big"},
                       "pair": {"peak_bytes": 5e9, "tree_peak_bytes": 7e9, "seconds": 300.0, "command": "omnidraft pair"}}}
    md = "\n".join(markdown(result))
    assert "| serve | 1.10 GB | 2.20 GB | 2.00 GB | 0.40 GB | 12.5 |" in md
    assert "5.00 GB (its tree at once, PSS: 7.00 GB)" in md
    assert "| serve-budget | did not run: omnidraft serve-budget exited with code 2 before serving: too big |" in md
    assert "anonymous 1.50 GB, prog/program.pte 0.40 GB" in md and "tiny" not in md


def test_the_cli_names_an_option_the_suite_does_not_take(tmp_path, capsys):
    from omnidraft.cli import main

    assert main(["bench", "footprint", "--stream", "3", "--out", str(tmp_path)]) == 2
    assert "--stream: not an option of the footprint suite" in capsys.readouterr().err
    assert main(["bench", "footprint", "--rows", "serve,daemon", "--out", str(tmp_path)]) == 2
    assert "unknown row 'daemon'" in capsys.readouterr().err
    assert main(["bench", "pair", "--budget", "2G", "--out", str(tmp_path)]) == 2
    assert "--budget: not an option of the pair suite" in capsys.readouterr().err
