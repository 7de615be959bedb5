"""Engines that take token-id prompts and name every log-probability by token id, as Wires
(remote/wire.py): vLLM's OpenAI completions with its ``prompt_logprobs`` extension, and SGLang's
native ``/generate`` with ``return_logprob`` + ``logprob_start_len``. Nothing is re-tokenised and
nothing is ambiguous, so every proposal is sent whole and every row holds the exact probability of
the proposed token (both engines report the prompt token's own log-probability beside the top N):
no probe request is ever needed.

The reply formats, as read in the engines' sources (neither engine runs here: they need a GPU):
- vLLM (``vllm/entrypoints/openai/completion/serving.py``): ``choices[0].prompt_logprobs[i]`` is
  None for i = 0, else {"<id>": {"logprob", "rank", "decoded_token"}} for token i given the tokens
  before it (the top N plus token i); ``return_tokens_as_token_ids`` names the generated token
  "token_id:<id>" in ``logprobs.tokens`` and ``logprobs.top_logprobs``. Log-probabilities are the
  raw model's (``--logprobs-mode raw_logprobs``, the default). A request with ``prompt_logprobs``
  does not read vLLM's prefix cache (vllm-project/vllm#17251: it recomputes the whole prompt), so
  there a verify's cost grows with the context.
- SGLang (``/generate``): ``meta_info.input_token_logprobs[k]`` = [logprob or None, id, text] of
  prompt token ``logprob_start_len + k`` given the tokens before it, ``input_top_logprobs[k]`` the
  top N at that position as [logprob, id, text]; ``output_token_logprobs`` / ``output_top_logprobs``
  the same for the generated token. The alignment is checked on every reply (the ids it names
  must be the ids sent, and both lists must agree where they overlap). Only the prefix before
  ``logprob_start_len`` (the last context token) can come from its prefix cache. Output
  log-probabilities are the raw model's only with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` (README);
  verification uses them at temperature 1 or for their order only.
Knows these two wire formats; nothing about verification.
"""

from __future__ import annotations

from typing import Iterator

from omnidraft.remote.http import BadReply, JsonClient
from omnidraft.remote.wire import Row, id_row, stream_choices

NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
           "frequency_penalty": 0.0, "presence_penalty": 0.0}  # both engines: the raw softmax


class IdWire:
    """What vLLM and SGLang share: any ids can be sent, and the engine generating alone streams
    through its OpenAI completions route with a token-id prompt."""

    engine = ""

    def __init__(self, http: JsonClient, model: str, *, eos: int, top_n: int):
        self.http, self.model, self.eos, self.top_n = http, model, eos, top_n
        self.evaluations = 0

    def expressible(self, ids: list[int]) -> bool:
        return True

    def sendable(self, context: list[int], proposal: list[int]) -> list[int]:
        return list(proposal)

    def probe_prob(self, ids: list[int], token: int) -> float:
        """The prompt log-probability of ``token`` after ``ids`` (always reported)."""
        rows, _ = self.verify(ids + [token], 1, temperature=0.0, seed=0)
        return rows[0].known[token]

    def stream(self, ids: list[int], max_tokens: int, *, temperature: float, top_p: float,
               seed: int | None) -> Iterator[tuple[str, str | None]]:
        body = {"model": self.model, "prompt": list(ids), "max_tokens": max_tokens,
                "temperature": temperature, **NEUTRAL, "top_p": top_p, "stream": True}
        if seed is not None:
            body["seed"] = seed
        yield from stream_choices(self.http.events("/completions", body))

    def _bad(self, what: str) -> BadReply:
        return BadReply(f"the {self.engine} server's reply {what}", f"check that the server is {self.engine}")


class VllmWire(IdWire):
    """vLLM's `/v1/completions` with ``prompt_logprobs`` and ``return_tokens_as_token_ids``."""

    engine = "vllm"

    def _complete(self, ids: list[int], *, temperature: float, seed: int, logprobs: int, prompt_logprobs: bool,
                  bias: dict[int, float] | None = None, top_p: float = 1.0) -> dict:
        body = {"model": self.model, "prompt": list(ids), "max_tokens": 1, "temperature": temperature,
                "seed": seed, **NEUTRAL, "top_p": top_p, "logprobs": logprobs, "return_tokens_as_token_ids": True}
        if prompt_logprobs:
            body["prompt_logprobs"] = self.top_n
        if bias:
            body["logit_bias"] = {str(i): b for i, b in bias.items()}
        out = self.http.call("POST", "/completions", body)
        self.evaluations += 1
        try:
            return out["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise self._bad("has no choice") from None

    def _generated(self, choice: dict, top_n: int) -> tuple[int, Row]:
        """The generated token's id ("token_id:<id>") and its row."""
        try:
            lp = choice["logprobs"]
            if not lp["tokens"]:
                if choice.get("finish_reason") == "stop":
                    return self.eos, Row()
                raise TypeError
            got = _token_id(lp["tokens"][0])
            top = {_token_id(k): float(v) for k, v in (lp["top_logprobs"][0] or {}).items()}
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise self._bad("names no generated token id (is return_tokens_as_token_ids supported?)") from None
        return got, id_row(top, top_n)

    def verify(self, ids: list[int], m: int, *, temperature: float, seed: int) -> tuple[list[Row], int]:
        choice = self._complete(ids, temperature=temperature, seed=seed, logprobs=self.top_n, prompt_logprobs=True)
        entries = choice.get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(ids):
            raise self._bad("has no prompt_logprobs for every prompt token")
        rows = []
        for pos in range(len(ids) - m, len(ids)):
            try:
                entry = {int(k): float(v["logprob"]) for k, v in entries[pos].items()}
            except (AttributeError, KeyError, TypeError, ValueError):
                raise self._bad(f"has a prompt_logprobs entry {pos} that is not {{id: {{logprob}}}}") from None
            if ids[pos] not in entry:
                raise self._bad(f"leaves prompt token {pos}'s own log-probability out")
            rows.append(id_row(entry, self.top_n))
        got, last = self._generated(choice, self.top_n)
        return rows + [last], got

    def sample(self, ids: list[int], *, temperature: float, top_p: float, seed: int,
               bias: dict[int, float] | None = None, top_n: int = 1) -> tuple[int, Row]:
        choice = self._complete(ids, temperature=temperature, seed=seed, logprobs=top_n, prompt_logprobs=False,
                                bias=bias, top_p=top_p)
        return self._generated(choice, top_n)


def _token_id(name: str) -> int:
    if not name.startswith("token_id:"):
        raise ValueError(name)
    return int(name.removeprefix("token_id:"))


class SglangWire(IdWire):
    """SGLang's native `/generate` (at the server's root, beside `/v1`) for verification; its
    OpenAI route for the engine generating alone."""

    engine = "sglang"

    def __init__(self, http: JsonClient, root: JsonClient, model: str, *, eos: int, top_n: int):
        super().__init__(http, model, eos=eos, top_n=top_n)
        self.root = root

    def _generate(self, ids: list[int], *, temperature: float, seed: int, top_n: int, start: int,
                  bias: dict[int, float] | None = None, top_p: float = 1.0) -> dict:
        params = {"max_new_tokens": 1, "temperature": temperature, **NEUTRAL, "top_p": top_p, "sampling_seed": seed}
        if bias:
            params["logit_bias"] = {str(i): b for i, b in bias.items()}
        body = {"input_ids": list(ids), "sampling_params": params, "return_logprob": True,
                "top_logprobs_num": top_n, "logprob_start_len": start, "return_text_in_logprobs": False}
        out = self.root.call("POST", "/generate", body)
        self.evaluations += 1
        meta = out.get("meta_info")
        if not isinstance(meta, dict):
            raise self._bad("has no meta_info")
        return meta

    def _generated(self, meta: dict, top_n: int) -> tuple[int, Row]:
        try:
            out = meta["output_token_logprobs"]
            if not out:
                if (meta.get("finish_reason") or {}).get("type") == "stop":
                    return self.eos, Row()
                raise TypeError
            got = int(out[0][1])
            top = {int(i): float(lp) for lp, i, *_ in meta["output_top_logprobs"][0]}
            top.setdefault(got, float(out[0][0]))
        except (KeyError, IndexError, TypeError, ValueError):
            raise self._bad("names no generated token") from None
        return got, id_row(top, top_n)

    def verify(self, ids: list[int], m: int, *, temperature: float, seed: int) -> tuple[list[Row], int]:
        start = len(ids) - m - 1  # from the last context token: the first entry may be None
        meta = self._generate(ids, temperature=temperature, seed=seed, top_n=self.top_n, start=start)
        try:
            given, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
            if [int(e[1]) for e in given] != ids[start:] or len(tops) != len(given):
                raise ValueError
            rows = []
            for k in range(1, m + 1):  # position start + k predicts ids[start + k]
                entry = {int(i): float(lp) for lp, i, *_ in tops[k]}
                own = float(given[k][0])  # TypeError when None
                if abs(entry.get(ids[start + k], own) - own) > 1e-3:  # the two lists disagree
                    raise ValueError
                entry[ids[start + k]] = own
                rows.append(id_row(entry, self.top_n))
        except (KeyError, IndexError, TypeError, ValueError):
            raise self._bad("does not give the prompt's log-probabilities aligned with the ids sent") from None
        got, last = self._generated(meta, self.top_n)
        return rows + [last], got

    def sample(self, ids: list[int], *, temperature: float, top_p: float, seed: int,
               bias: dict[int, float] | None = None, top_n: int = 1) -> tuple[int, Row]:
        meta = self._generate(ids, temperature=temperature, seed=seed, top_n=top_n, start=-1, bias=bias, top_p=top_p)
        return self._generated(meta, top_n)
