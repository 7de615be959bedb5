"""The standing benchmarks, by name: what each asks, its rows, its default prompts and the row its
ratios are to. Every suite's reference is the target alone on the product's runtime.

- ``pair``: the product against the honest alternatives, greedy, on plain (code, chat, ShareGPT)
  and copy-heavy prompts: the pair through Session, the target alone on the same runtime,
  llama.cpp alone (where installed) and transformers' assisted generation at its best setting;
  the product's output equal to the target alone's counted (lossless, measured).
- ``copy``: what copies from the context add, against the other engines' own prompt lookup: the
  ``pair`` rows, the pair without copies, llama.cpp with its prompt-lookup drafting and
  transformers alone and with its prompt-lookup decoding, on the 24 copy-heavy conversations
  (follow-ups included) and some code and chat.
- ``adapters``: the published adapter against other versions (``Options.adapters``) and the
  drafter unadapted, each the product through Session, beside the target alone and llama.cpp.
- ``serve``: `omnidraft serve` against the servers an app would otherwise run, each driven
  through the ``openai`` SDK (bench/servers.py), on every turn of three-turn conversations, and
  transformers' assisted generation in process (no server ships it; not in the clients phase).
- ``vllm``: OmniDraft on a real vLLM (bench/vllm_rows.py): vLLM alone, with OmniDraft's proposer,
  with its own cross-vocabulary draft model on the same drafter, ``ngram`` and ``suffix``; the
  pair through Session on its local runtime, llama.cpp alone and assisted generation; greedy, then
  sampled. In two phases, each with vLLM alone (four vLLM servers and the local pair do not fit
  24 GB at once).
- ``memory``: what the pair's memory of earlier answers gives after use: the pair recalling from a
  memory that a stream of recurring work filled (``Options.stream`` prompts of each kind,
  omnidraft/recurring.py) against the same pair with no memory (a fresh home's), the target alone
  and llama.cpp alone, on held-out prompts of the same kinds (never in the stream) and, as the
  control, code and ShareGPT prompts it never saw; the same memory reopened from its file (as
  after a restart), and llama-server's n-gram speculation (``ngram-simple``, and ``ngram-mod``
  whose pool outlives a request) after the same stream in the same process; in phases of their
  own, vLLM ``suffix`` and vLLM + OmniDraft's proposer with its memory, each after the same stream
  in its own process, beside vLLM alone (such a phase's reference).

``Options`` validates itself and names the bad option. Knows the rows; nothing about running them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from omnidraft.bench.prompts import SETS
from omnidraft.errors import OmniDraftError
from omnidraft.pairs.settings import Runtime
from omnidraft.pairs.spec import DEFAULT_DRAFTER

STREAM = 40  # the memory suite's stream: prompts of each recurring kind (120 in all: the "120 prompts of use")
ROWS = {  # key -> what the row runs (bench/rows.py, bench/baselines.py)
    "product": "the pair through Session (product@V: on adapter version V, product@none: unadapted)",
    "nocopies": "the pair through Session without copies from the context",
    "target": "the target alone through Session on the product's runtime",
    "llamacpp": "the target's GGUF alone on llama.cpp",
    "llamacpp-lookup": "llama.cpp with llama-cpp-python's prompt-lookup drafting",
    "assisted": "transformers' assisted generation with the drafter (5 tokens, constant)",
    "transformers": "the target alone in transformers",
    "transformers-lookup": "transformers' prompt-lookup decoding",
    "remembered": "the pair through Session recalling from a scratch memory filled by a stream of recurring work "
                  "(--stream prompts of each kind), read-only while measured",
    "remembered-reopened": "the remembered row's pair with its memory reopened from the file (a new index, as after "
                           "a restart)",
    "serve": "omnidraft serve (the pair) through the openai SDK",
    "serve-target": "omnidraft serve --drafter none (the target alone) through the openai SDK",
    "llamacpp-server": "llama-cpp-python's server on the target's GGUF",
    "llamacpp-server-lookup": "llama-cpp-python's server with its prompt-lookup draft",
    "llama-server": "llama.cpp's llama-server (LLAMA_SERVER or PATH)",
    "llama-server-ngram": "llama-server --spec-type ngram-simple (its best measured here; with --clients, a slot a "
                          "client)",
    "llama-server-ngram-1slot": "llama-server --spec-type ngram-simple with one slot, whatever the clients",
    "llama-server-ngram-mod": "llama-server --spec-type ngram-mod (its hash pool of n-grams kept across requests)",
    "llama-server-ngram-used": "llama-server --spec-type ngram-simple after answering the memory suite's stream "
                               "(--stream prompts of each kind) in the same process",
    "llama-server-ngram-mod-used": "llama-server --spec-type ngram-mod after answering the same stream in the same "
                                   "process",
    "vllm": "vLLM alone (OMNIDRAFT_VLLM_PYTHON or .venv-vllm)",
    "vllm-proposer": "vLLM with OmniDraft's proposer inside it (custom_class, up to 8 ids a step)",
    "vllm-draft": "vLLM with its own draft model, heterogeneous vocabularies (TLI, 3 tokens)",
    "vllm-ngram": "vLLM with its ngram prompt lookup (5 tokens, 2..5-grams)",
    "vllm-suffix": "vLLM with suffix decoding (up to 8 tokens)",
    "vllm-suffix-used": "vLLM with suffix decoding after answering the memory suite's stream in the same process",
    "vllm-proposer-used": "vLLM with OmniDraft's proposer after answering the same stream (its memory in a scratch "
                          "folder, kept as the engine answers)",
    "vllm-proposer-reopened": "a second vLLM with OmniDraft's proposer started on a copy of that memory as the stream "
                              "left it (a deployment restarted)",
}


@dataclass(frozen=True)
class Options:
    """``counts``: prompts per set (prompts.py SETS; None: the suite's); ``rows``: the rows to run
    (ROWS' keys; None: the suite's); ``dtype``: the eager models' dtype (the product's own runtimes
    are `omnidraft pair`'s choice); ``adapters``: adapter versions the ``adapters`` suite runs
    beside the latest and none; ``clients``: the serve suite's clients at once in its second
    phase (0: none); ``stream``: the prompts of each recurring kind the ``remembered`` row's
    memory is filled with before anything is measured (None: STREAM); ``phases``: rows to build,
    run and close in turn instead of ``rows`` (each with the reference; e.g. the 1.5B's pair rows,
    whose Sessions do not fit memory together)."""

    drafter: str = DEFAULT_DRAFTER
    target: str = "qwen2.5-coder-0.5b"
    counts: dict | None = None
    max_new_tokens: int = 96
    threads: int = 2
    dtype: str = "bf16"
    rows: tuple[str, ...] | None = None
    adapters: tuple[str, ...] = ()
    clients: int = 0
    stream: int | None = None
    phases: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise OmniDraftError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.threads < 1:
            raise OmniDraftError(f"threads must be >= 1, got {self.threads}")
        if self.clients < 0:
            raise OmniDraftError(f"clients must be >= 0, got {self.clients}")
        if self.stream is not None and self.stream < 1:
            raise OmniDraftError(f"stream must be >= 1, got {self.stream}")
        if self.dtype not in ("fp32", "bf16"):
            raise OmniDraftError(f"dtype must be fp32 or bf16, got {self.dtype!r}")
        for name, n in (self.counts or {}).items():
            if name not in SETS:
                raise OmniDraftError(f"unknown prompt set {name!r}", f"use {', '.join(SETS)}")
            if not isinstance(n, int) or n < 0:
                raise OmniDraftError(f"{name}: a prompt count must be an integer >= 0, got {n!r}")
        if self.counts is not None and not any(self.counts.values()):
            raise OmniDraftError("no prompts to run", "ask for at least one prompt of a set")
        if self.phases and self.rows:
            raise OmniDraftError("rows and phases both given", "give the rows of each phase in phases")
        if any(not keys for keys in self.phases):
            raise OmniDraftError("a phase with no rows", "name a phase's rows between its ';'")

    def as_json(self) -> dict:
        """What a history compares runs by."""
        return {"drafter": self.drafter, "target": self.target, "counts": dict(sorted(self.counts.items())),
                "max_new_tokens": self.max_new_tokens, "threads": self.threads, "dtype": self.dtype,
                "rows": list(self.rows) if self.rows else None, **({"adapters": list(self.adapters)}
                                                                   if self.adapters else {}),
                **({"clients": self.clients} if self.clients else {}),
                **({"stream": self.stream} if self.stream is not None else {}),
                **({"phases": [list(keys) for keys in self.phases]} if self.phases else {})}


@dataclass(frozen=True)
class Suite:
    """``build``: (options, log) -> {row key: Row, or rows.Missing where it cannot run here}, in
    order; ``reference``: the key of the row ratios and equality are to (``engine_reference``: a
    phase's without it, where that phase has this row: vLLM alone in a phase of vLLM rows);
    ``counts``: its default prompts per set; ``phases``: row keys built, run and closed in turn
    where the default rows do not fit memory at once (each with the reference; empty: one phase);
    ``sampled``: (temperature, top-p) of a second, sampled pass over the prompts on the rows that
    sample (None: greedy only)."""

    name: str
    question: str
    build: Callable[["Options", Callable[[str], None]], dict]
    reference: str
    counts: dict
    phases: tuple[tuple[str, ...], ...] = ()
    sampled: tuple[float, float] | None = None
    engine_reference: str | None = None

    def reference_in(self, keys) -> str:
        """The reference of a phase whose rows are ``keys``."""
        if self.reference not in keys and self.engine_reference in keys:
            return self.engine_reference
        return self.reference

    def options(self, opts: Options) -> Options:
        """``opts`` with the suite's default prompts where it names none."""
        return opts if opts.counts is not None else replace(opts, counts=dict(self.counts))


def _build(opts: Options, log, wanted: tuple[str, ...]) -> dict:
    """{row key: Row} for the keys in ``wanted`` (ROWS' names; ``product@V``: the product on adapter V).
    A row that fails to build closes those built before it."""
    built: dict = {}
    try:
        _add(built, opts, log, wanted)
    except BaseException:
        for row in built.values():
            getattr(row, "close", lambda: None)()
        raise
    return {k: built[k] for k in wanted if k in built}


def _add(built: dict, opts: Options, log, wanted: tuple[str, ...]) -> None:
    from omnidraft.bench import baselines, rows, servers, vllm_rows

    runtime = Runtime(dtype=opts.dtype, threads=opts.threads, cache_ram_mib=0)  # no saved states: see bench/usage.py
    tok = None
    first = {"product": 0, "nocopies": 0, "remembered": 1, "remembered-reopened": 2}  # the pair's rows first
    for key in sorted(wanted, key=lambda k: first.get(k.partition("@")[0], 3)):
        name, _, adapter = key.partition("@")
        if name == "product" or name == "nocopies":
            log(f"loading the pair through Session ({key}) ...")
            built[key] = rows.product(opts.drafter, opts.target, runtime, adapter=adapter or "latest",
                                      lookup=name == "product")
        elif name == "remembered":
            built[key] = rows.remembered(opts.drafter, opts.target, runtime, opts.stream or STREAM, opts.max_new_tokens,
                                         log)
        elif name == "remembered-reopened":
            if "remembered" not in built:
                raise OmniDraftError("the remembered-reopened row reopens the remembered row's memory",
                                     "ask for both rows")
            built[key] = rows.ReopenedRow(built["remembered"])
        elif name == "target":  # the same runtime as the pair's rows (in a phase without one, its first route's)
            built[key] = rows.target_alone(opts.target, Runtime(target=_pair_runtime(built), dtype=opts.dtype,
                                                                threads=opts.threads, cache_ram_mib=0))
        elif name in ("llamacpp", "llamacpp-lookup"):
            row = baselines.LlamaCppRow.make(opts.target, opts.threads, log, lookup=name == "llamacpp-lookup")
            built[key] = row or rows.Missing(ROWS[name], "llama-cpp-python is not installed (pip install -e "
                                                          "'.[llamacpp]')")
        elif name == "assisted":
            log("loading transformers' assisted generation ...")
            built[key] = baselines.AssistedRow(opts.target, opts.drafter, opts.dtype)
        elif name in ("transformers", "transformers-lookup"):
            built[key] = baselines.TransformersRow(opts.target, opts.dtype, lookup=name == "transformers-lookup")
        else:  # a server
            if tok is None:
                from omnidraft.models.loading import load_tokenizer

                tok = load_tokenizer(opts.target)
            if name == "vllm-proposer-reopened":
                used = built.get("vllm-proposer-used")
                if used is None:
                    raise OmniDraftError("the vllm-proposer-reopened row restarts the vllm-proposer-used row's memory",
                                         "ask for both rows, vllm-proposer-used first")
                built[key] = (used if isinstance(used, rows.Missing) else
                              vllm_rows.vllm_row(name, opts.drafter, opts.target, tok, log, threads=opts.threads,
                                                 reopen=used.memory))
                continue
            if name.removesuffix("-used") in vllm_rows.SPECS:
                row = vllm_rows.vllm_row(name, opts.drafter, opts.target, tok, log, threads=opts.threads)
                if name.endswith("-used") and not isinstance(row, rows.Missing):
                    servers.feed(row, opts.stream or STREAM, opts.max_new_tokens, log)
                built[key] = row
                continue
            log(f"starting {ROWS[name]} ...")
            at = {"threads": opts.threads}
            row = (servers.omnidraft_serve(opts.drafter, opts.target, tok, log, dtype=opts.dtype,
                                           alone=name == "serve-target", **at) if name in ("serve", "serve-target") else
                   servers.llamacpp_python_server(opts.target, tok, log, lookup=name == "llamacpp-server-lookup", **at)
                   if name.startswith("llamacpp-server") else
                   servers.llama_server(opts.target, tok, log, spec_type=_SPEC_TYPES[name.removesuffix("-used")],
                                        slots=1 if name.endswith("-1slot") else max(1, opts.clients), **at))
            if row is not None and name.endswith("-used"):
                servers.feed(row, opts.stream or STREAM, opts.max_new_tokens, log)
            built[key] = row or rows.Missing(ROWS[name], "not installed here (its server's package or binary; "
                                                          "the log says which)")


def _pair_runtime(built: dict) -> str:
    """The target runtime the pair's rows built so far run on; without one, ``auto``: the program
    where it is built and loads, as a pair's first route (pairs/assemble.py puts the bit-exact one first)."""
    return next((r.session.target_runtime for k, r in built.items()
                 if k.partition("@")[0] in ("product", "nocopies", "remembered", "remembered-reopened")), "auto")


_SPEC_TYPES = {"llama-server": None, "llama-server-ngram": "ngram-simple", "llama-server-ngram-mod": "ngram-mod",
               "llama-server-ngram-1slot": "ngram-simple"}


def _rows(default: tuple[str, ...], *, adapters: bool = False, clients: bool = False):
    """A suite's builder: ``opts.rows`` (or ``default``) checked against ROWS and built in that order;
    ``adapters`` / ``clients``: the suite runs ``opts.adapters`` / ``opts.clients`` (elsewhere they
    are an error, not ignored)."""
    def build(opts: Options, log) -> dict:
        if opts.adapters and not adapters:
            raise OmniDraftError("--adapters is for the adapters suite", "use product@VERSION in --rows here")
        if opts.clients and not clients:
            raise OmniDraftError("--clients is for the serve suite", "its rows are servers")
        wanted = opts.rows or default
        for key in wanted:
            if key.partition("@")[0] not in ROWS:
                raise OmniDraftError(f"no row {key!r}", f"use {', '.join(ROWS)} (product@VERSION: an adapter version)")
        return _build(opts, log, tuple(wanted))
    return build


def _adapter_rows(opts: Options, log) -> dict:
    versions = ("latest", *opts.adapters, "none")
    return _rows(("target", *(f"product@{v}" if v != "latest" else "product" for v in dict.fromkeys(versions)),
                  "llamacpp"), adapters=True)(opts, log)


SUITES = {
    "pair": Suite("pair", "Is the pair faster than every honest alternative on this CPU, and is its greedy output the "
                  "target's own?", _rows(("product", "target", "llamacpp", "assisted")), "target",
                  {"code": 6, "chat": 6, "copy": 6}),
    "copy": Suite("copy", "On copy-heavy assistant work (edits, quotes, rewrites, follow-ups) and on code and chat, what "
                  "do copies from the context add to the pair, against llama.cpp's and transformers' own prompt "
                  "lookup?", _rows(("product", "nocopies", "target", "llamacpp", "llamacpp-lookup", "assisted",
                                    "transformers", "transformers-lookup")), "target", {"copy": 24, "code": 4, "chat": 4}),
    "serve": Suite("serve", "Is `omnidraft serve` faster than the servers an app would otherwise run, driven as an app "
                   "drives them (the openai SDK, streamed), and is its greedy text the target's own?",
                   _rows(("serve-target", "serve", "llamacpp-server", "llamacpp-server-lookup", "llama-server",
                          "llama-server-ngram", "assisted"), clients=True), "serve-target", {"conversations": 6}),
    "adapters": Suite("adapters", "Does the published adapter beat other versions and the drafter unadapted on "
                      "held-out prompts, as a user runs the pair?", _adapter_rows, "target",
                      {"code": 8, "chat": 6, "sharegpt": 6}),
    "vllm": Suite("vllm", "Inside a real vLLM, does OmniDraft's proposer beat vLLM alone and vLLM's own drafting "
                  "(its cross-vocabulary draft model on the same drafter, ngram, suffix), and how do they compare "
                  "with the pair on its local runtime and the honest alternatives off vLLM?",
                  _rows(("vllm", "vllm-proposer", "vllm-draft", "product", "vllm-ngram", "vllm-suffix", "llamacpp",
                         "assisted")), "vllm", {"code": 6, "chat": 6, "copy": 6},
                  phases=(("vllm", "vllm-proposer", "vllm-draft", "product"),
                          ("vllm", "vllm-ngram", "vllm-suffix", "llamacpp", "assisted")), sampled=(0.7, 0.9)),
    "memory": Suite("memory", "After a stream of recurring assistant work, does the pair's memory of earlier answers "
                    "make held-out work of the same kinds faster, and never slower on prompts it never saw?",
                    _rows(("product", "remembered", "remembered-reopened", "target", "llamacpp",
                           "llama-server-ngram-used", "llama-server-ngram-mod-used")), "target",
                    {"tests": 6, "extract": 6, "reply": 6, "code": 6, "sharegpt": 6}, engine_reference="vllm"),
}


def suite(name: str) -> Suite:
    if name not in SUITES:
        raise OmniDraftError(f"unknown benchmark suite {name!r}", f"use one of {', '.join(SUITES)}")
    return SUITES[name]
