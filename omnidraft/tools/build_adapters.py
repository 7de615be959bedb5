"""Build the pre-adapted adapters the package ships (adapters/pretrained/<pair>/, #54): for each
target, `omnidraft distill` (the defaults, or --code / --chat) on a scratch home (the records,
checkpoint and report stay there), then the published version written in bf16 beside its meta
(the distill report: corpus, held-out verdict, CPU seconds) and its sha256 pins written into
adapters/shipped.py.
A version the guard rejected is never written.

  python -m omnidraft.tools.build_adapters --targets qwen2.5-coder-1.5b --code 80 --chat 260 --home /tmp/distill-home
  python -m omnidraft.tools.build_adapters --targets qwen2.5-coder-0.5b --home /tmp/distill-home
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

def write_pins(pins: dict[str, dict[str, str]]) -> None:
    """Replace the PINS literal in adapters/shipped.py (kept sorted, one pair per line)."""
    from omnidraft.adapters import shipped

    path = Path(shipped.__file__)
    body = "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in sorted(pins.items()))
    text = re.sub(r"PINS: dict\[str, dict\[str, str\]\] = \{.*?\n\}\n|PINS: dict\[str, dict\[str, str\]\] = \{\}\n",
                  "PINS: dict[str, dict[str, str]] = {\n" + body + "}\n", path.read_text(), count=1, flags=re.S)
    path.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
    ap.add_argument("--drafter", default="smollm2-135m")
    ap.add_argument("--home", default=None, help="OMNIDRAFT_HOME for the runs (default: the current one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--code", type=int, default=None, help="HumanEval problems in each corpus (default: distill's)")
    ap.add_argument("--chat", type=int, default=None, help="ShareGPT conversations in each corpus (default: distill's)")
    ap.add_argument("--rank", type=int, default=20, help="ship each module's weight change at this rank (20: "
                    "a rank-32 SmolLM2 adapter in 4.6 MB, 98.7%% of its energy kept; the install pads it back)")
    args = ap.parse_args()
    if args.home:
        os.environ["OMNIDRAFT_HOME"] = args.home
    from omnidraft.adapters import shipped
    from omnidraft.device.threads import set_threads
    from omnidraft.jobs.distill import DistillConfig, distill
    from omnidraft.pairs.spec import adapter_store
    from omnidraft.quiet import quiet_libraries

    quiet_libraries()
    set_threads(args.threads)
    pins = dict(shipped.PINS)
    sizes = {k: v for k, v in (("code", args.code), ("chat", args.chat)) if v is not None}
    for target in args.targets:
        report = distill(target, args.drafter, DistillConfig(**sizes),
                         say=lambda s: print(s, file=sys.stderr, flush=True))
        if not report.get("version"):
            print(f"{report['pair']}: the guard rejected the distilled adapter; nothing written", file=sys.stderr)
            continue
        folder = adapter_store().path(report["pair"], report["version"])
        pins[report["pair"]] = shipped.write(folder, shipped.ROOT / report["pair"], report, args.drafter,
                                              args.rank)
        print(f"{report['pair']}: held-out acceptance {report['acceptance_before']} -> {report['acceptance_after']}, "
              f"written to {shipped.ROOT / report['pair']}", file=sys.stderr)
    write_pins(pins)
    return 0


if __name__ == "__main__":
    sys.exit(main())
