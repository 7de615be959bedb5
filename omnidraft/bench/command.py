"""`omnidraft bench SUITE`: the parsed options checked against the suite (an option another suite
takes is a one-line error naming it, never ignored) and handed to the suite's runner: the prompt
suites (bench/suites.py, run by bench/run.py), ``costs`` (bench/costs.py), ``export``
(bench/export_time.py), ``usage`` (bench/usage.py), ``footprint`` (bench/footprint.py) and
``switching`` (bench/switching.py).

Knows the options each suite takes; nothing about what they measure.
"""

from __future__ import annotations

from typing import Callable

from omnidraft.bench.prompts import SETS
from omnidraft.errors import OmniDraftError

OWN = {"widths": ("costs",), "reps": ("costs",), "quants": ("costs",), "no_eager": ("costs",),
       "agreement": ("costs",), "rounds": ("costs", "export"), "models": ("export",), "settings": ("export",),
       "held": ("usage",), "stream_tokens": ("usage",), "measure_every": ("usage",), "k": ("usage",),
       "daemon_config": ("usage",), "drain_minutes": ("usage",), "stream": ("memory", "usage"), "budget": ("footprint",)}
NEW_TOKENS = 96  # --max-new-tokens where the suite is not usage


def _new_tokens(args) -> int:
    return NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens


def _split(text: str | None, cast=str) -> tuple | None:
    return None if text is None else tuple(cast(x.strip()) for x in text.split(",") if x.strip())


def run_command(args, log: Callable[[str], None]) -> dict:
    """Run the suite ``args.suite`` names with the options ``args`` (an argparse namespace) holds."""
    from omnidraft.bench.suites import SUITES

    known = (*SUITES, "costs", "export", "usage", "footprint", "switching")
    if args.suite not in known:
        raise OmniDraftError(f"unknown benchmark suite {args.suite!r}", f"use one of {', '.join(known)}")
    own = {**OWN, **{k: tuple(SUITES) for k in (*SETS, "adapters", "clients")},
           "rows": (*SUITES, "usage", "footprint", "switching"), "code": (*SUITES, "usage"), "chat": (*SUITES, "usage"),
           "conversations": (*SUITES, "footprint", "switching"), "copy": (*SUITES, "footprint"),
           "max_new_tokens": (*SUITES, "costs", "usage", "footprint", "switching")}
    given = [f"--{k.replace('_', '-')}" for k, suites in own.items()
             if getattr(args, k) not in (None, False) and args.suite not in suites]
    if given:
        raise OmniDraftError(f"{', '.join(given)}: not an option of the {args.suite} suite",
                             "see omnidraft bench --help")
    if args.suite == "costs":
        return _costs(args, log)
    if args.suite == "export":
        from omnidraft.bench.export_time import ExportOptions, run_export

        opts = ExportOptions(**{k: v for k, v in (("models", _split(args.models)),
                                                  ("settings", _split(args.settings)),
                                                  ("rounds", args.rounds)) if v is not None})
        return run_export(opts, out=args.out, keep=not args.no_history, log=log)
    if args.suite == "usage":
        return _usage(args, log)
    if args.suite == "footprint":
        return _footprint(args, log)
    if args.suite == "switching":
        return _switching(args, log)
    from omnidraft.bench.run import run_suite
    from omnidraft.bench.suites import Options, suite

    counts = {k: getattr(args, k) for k in SETS if getattr(args, k) is not None}
    phases = tuple(_split(p) for p in (args.rows or "").split(";") if p.strip())
    opts = Options(args.drafter, args.target, {k: n for k, n in counts.items() if n} if counts else None,
                   _new_tokens(args), args.threads, args.dtype, phases[0] if len(phases) == 1 else None,
                   _split(args.adapters) or (), args.clients or 0,
                   **({"stream": args.stream} if args.stream is not None else {}),
                   **({"phases": phases} if len(phases) > 1 else {}))
    return run_suite(suite(args.suite), opts, out=args.out, keep=not args.no_history, log=log)


def _costs(args, log) -> dict:
    from omnidraft.bench.costs import CostOptions, run_costs

    try:
        widths = _split(args.widths, int)
    except ValueError:
        raise OmniDraftError(f"--widths must be comma-separated integers, got {args.widths!r}") from None
    given = {k: v for k, v in (("widths", widths), ("reps", args.reps), ("rounds", args.rounds),
                               ("quants", _split(args.quants)), ("agreement", args.agreement)) if v is not None}
    opts = CostOptions(args.drafter, args.target, threads=args.threads, max_new_tokens=_new_tokens(args),
                       eager=not args.no_eager, **given)
    return run_costs(opts, out=args.out, keep=not args.no_history, log=log)


def _usage(args, log) -> dict:
    from omnidraft.bench.usage import UsageOptions, run_usage

    given = {k: getattr(args, k) for k in ("code", "chat", "held", "stream_tokens", "max_new_tokens", "k",
                                            "measure_every", "daemon_config", "drain_minutes")
             if getattr(args, k) is not None}
    if args.stream is not None:
        given["recurring"] = args.stream
    rows = _split(args.rows)
    opts = UsageOptions(args.drafter, args.target, threads=args.threads, dtype=args.dtype,
                        **given, **({"rows": rows} if rows is not None else {}))
    return run_usage(opts, out=args.out, keep=not args.no_history, log=log)


def _footprint(args, log) -> dict:
    from omnidraft.bench.footprint import FootprintOptions, run_footprint

    given = {k: getattr(args, k) for k in ("conversations", "copy", "max_new_tokens", "budget")
             if getattr(args, k) is not None}
    rows = _split(args.rows)
    opts = FootprintOptions(args.drafter, args.target, threads=args.threads, **given,
                            **({"rows": rows} if rows is not None else {}))
    return run_footprint(opts, out=args.out, keep=not args.no_history, log=log)


def _switching(args, log) -> dict:
    from omnidraft.bench.switching import SwitchingOptions, run_switching

    given = {k: getattr(args, k) for k in ("conversations", "max_new_tokens") if getattr(args, k) is not None}
    rows = _split(args.rows)
    opts = SwitchingOptions(None if args.drafter == "none" else args.drafter, args.target, threads=args.threads,
                            **given, **({"rows": rows} if rows is not None else {}))
    return run_switching(opts, out=args.out, keep=not args.no_history, log=log)
