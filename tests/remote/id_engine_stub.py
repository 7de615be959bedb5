"""An in-process stand-in for vLLM's and SGLang's servers over a BigramLM, for the unit tier, with
the reply formats read in their sources (remote/id_wires.py; neither runs here without a GPU):
- ``GET /v1/models`` says who owns the model ("vllm" or "sglang");
- vLLM ``POST /v1/completions`` with a token-id prompt: ``prompt_logprobs`` N gives, per prompt
  token i > 0, {"<id>": {"logprob", "rank", "decoded_token"}} over the top N plus token i (entry 0
  is null); ``return_tokens_as_token_ids`` names the generated token "token_id:<id>" in
  ``logprobs.tokens`` and ``logprobs.top_logprobs`` (top N plus the sampled token);
- SGLang ``POST /generate`` (at the root) with ``input_ids``: ``meta_info.input_token_logprobs`` =
  [logprob or null, id, null] from ``logprob_start_len`` on (null for token 0),
  ``input_top_logprobs`` the top N at each of those positions, ``output_token_logprobs`` /
  ``output_top_logprobs`` for the generated token; ``shift`` > 0 moves the top lists later (a broken server);
- both: ``logit_bias`` adds to the logits, temperature 0 is argmax, otherwise temperature and then
  top-p on the tempered probabilities (both engines' sampler order); an EOS is generated as a
  token with finish reason "stop"; streaming goes through ``/v1/completions``.
"""

from __future__ import annotations

import json

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .background import Background
from .laws import draw, nucleus


def tempered_law(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[V] logits -> [V] the law vLLM and SGLang sample from: temperature, then the top-p
    nucleus of the tempered probabilities (the fewest likeliest ids reaching top_p)."""
    probs = torch.softmax(logits.float() / temperature, -1)
    keep = nucleus(probs, top_p)
    out = torch.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


class IdEngineStub:
    def __init__(self, lm, tok, token: str, eos_ids: set[int], port: int, *, owner: str, shift: int = 0):
        self.lm, self.tok, self.eos_ids, self.shift = lm, tok, eos_ids, shift
        self.requests = 0
        app = FastAPI()

        def authorised(request: Request) -> bool:
            return request.headers.get("authorization") == f"Bearer {token}"

        @app.get("/v1/models")
        async def models(request: Request):
            if not authorised(request):
                return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
            return {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": owner}]}

        @app.post("/v1/completions")
        async def completions(request: Request):
            if not authorised(request):
                return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
            self.requests += 1
            body = await request.json()
            if body.get("stream"):
                return StreamingResponse(self.events(body), media_type="text/event-stream")
            return self.vllm(body)

        @app.post("/generate")
        async def generate(request: Request):
            if not authorised(request):
                return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
            self.requests += 1
            return self.sglang(await request.json())

        self.served = Background(app, port)
        self.url = self.served.url

    def stop(self):
        self.served.stop()

    def _next(self, ids: list[int], temperature: float, top_p: float, seed: int, bias: dict | None) -> int:
        last = torch.log_softmax(self.lm.logits_after(ids[-1:])[-1].float(), -1)
        for i, b in (bias or {}).items():
            last[int(i)] += b
        if temperature == 0:
            return int(last.argmax())
        g = torch.Generator().manual_seed(int(seed))
        return draw(tempered_law(last, temperature, top_p), g)

    def _logprobs(self, ids: list[int]) -> torch.Tensor:
        """[n, V]: row i is the distribution after ids[:i+1]."""
        return torch.log_softmax(self.lm.logits_after(ids).float(), -1)

    def events(self, body: dict):
        ids, out = list(body["prompt"]), []
        finish = "length"
        while len(out) < body.get("max_tokens", 16):
            gen = self._next(ids + out, 0.0, 1.0, 0, None)
            out.append(gen)
            if gen in self.eos_ids:
                finish = "stop"
                break
            yield "data: " + json.dumps({"choices": [{"index": 0, "text": self.tok.decode([gen]),
                                                      "finish_reason": None}]}) + "\n\n"
        yield "data: " + json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": finish}]}) + "\n\n"
        yield "data: " + json.dumps({"choices": [], "usage": {"completion_tokens": len(out)}}) + "\n\n"
        yield "data: [DONE]\n\n"

    def vllm(self, body: dict):
        ids = body["prompt"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return JSONResponse({"error": {"message": "prompt must be token ids here"}}, status_code=400)
        lp = self._logprobs(ids)
        gen = self._next(ids, body.get("temperature", 1.0), body.get("top_p", 1.0), body.get("seed", 0),
                         body.get("logit_bias"))
        n = body.get("logprobs") or 0
        top = torch.topk(lp[-1], n)
        tops = {f"token_id:{int(i)}": float(v) for v, i in zip(top.values, top.indices)}
        tops[f"token_id:{gen}"] = float(lp[-1, gen])
        choice = {"index": 0, "text": self.tok.decode([gen], skip_special_tokens=True),
                  "finish_reason": "stop" if gen in self.eos_ids else "length",
                  "logprobs": {"tokens": [f"token_id:{gen}"], "token_logprobs": [float(lp[-1, gen])],
                               "top_logprobs": [tops], "text_offset": [0]}}
        if body.get("prompt_logprobs") is not None:
            k = body["prompt_logprobs"]
            entries: list = [None]
            for i in range(1, len(ids)):
                row = lp[i - 1]
                best = torch.topk(row, k)
                entry = {str(int(t)): {"logprob": float(v), "rank": r + 1, "decoded_token": "?"}
                         for r, (v, t) in enumerate(zip(best.values, best.indices))}
                entry[str(ids[i])] = {"logprob": float(row[ids[i]]),
                                      "rank": int((row > row[ids[i]]).sum()) + 1, "decoded_token": "?"}
                entries.append(entry)
            choice["prompt_logprobs"] = entries
        return {"object": "text_completion", "model": "stub", "choices": [choice]}

    def sglang(self, body: dict):
        ids, params = body["input_ids"], body.get("sampling_params", {})
        lp = self._logprobs(ids)
        gen = self._next(ids, params.get("temperature", 1.0), params.get("top_p", 1.0),
                         params.get("sampling_seed", 0), params.get("logit_bias"))
        n = body.get("top_logprobs_num", 0)

        def top(row: torch.Tensor) -> list:
            t = torch.topk(row, n)
            return [[float(v), int(i), None] for v, i in zip(t.values, t.indices)]

        meta = {"finish_reason": {"type": "stop", "matched": gen} if gen in self.eos_ids else {"type": "length"},
                "output_token_logprobs": [[float(lp[-1, gen]), gen, None]], "output_top_logprobs": [top(lp[-1])]}
        start = body.get("logprob_start_len", -1)
        if body.get("return_logprob") and start >= 0:
            given, tops = [], []
            for p in range(start, len(ids)):
                given.append([None if p == 0 else float(lp[p - 1, ids[p]]), ids[p], None])
                q = min(p + self.shift, len(ids) - 1)  # a broken server's top lists, one position late
                tops.append(None if q == 0 else top(lp[q - 1]))
            meta["input_token_logprobs"], meta["input_top_logprobs"] = given, tops
        return {"text": self.tok.decode([gen], skip_special_tokens=True), "output_ids": [gen], "meta_info": meta}
