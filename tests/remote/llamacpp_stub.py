"""An in-process stand-in for llama-cpp-python's OpenAI server (0.3.36) over a BigramLM, for the
unit tier: `/v1/completions` with its conventions, as read in its llama.py and measured against
the real server (tests/integration/test_openai_engine.py runs the real one):
- the prompt is text, tokenised with special tokens parsed; no BOS for Qwen;
- ``echo`` + ``logprobs``: ``tokens`` lists the prompt's pieces (bytes decoded, errors ignored;
  specials as ""), ``top_logprobs[i]`` is the distribution *after* token i as {text: logprob} over
  the top N in descending order (a later id of the same text overwrites), then updated with token
  i's own text; entry 0 is null; the generated token is in ``text`` only;
- without echo, ``tokens`` / ``token_logprobs`` describe the generated token (raw log-probability,
  before ``logit_bias``);
- ``logit_bias`` adds to the logits before sampling; temperature 0 is argmax; otherwise top-p on
  the untempered probabilities, then temperature (llama-cpp-python's sampler order); an end-of-generation
  token ends with finish_reason "stop" and no text; a token ending inside a character answers 500
  (the real server's failure when it must generate past max_tokens).
"""

from __future__ import annotations

import json

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from omnidraft.translate.vocab import token_bytes

from .background import Background
from .laws import draw, nucleus


def engine_law(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[V] logits -> [V] the law llama-cpp-python samples from: the top-p nucleus of the
    untempered probabilities (the fewest likeliest ids reaching top_p), then temperature."""
    probs = torch.softmax(logits.float(), -1)
    keep = nucleus(probs, top_p)
    masked = torch.full_like(probs, float("-inf"))
    masked[keep] = logits.float()[keep] / temperature
    return torch.softmax(masked, -1)


class LlamaCppStub:
    def __init__(self, lm, tok, token: str, eos_ids: set[int], port: int):
        table, _ = token_bytes(tok, lm.vocab_size)
        self.text = [b.decode("utf-8", errors="ignore") if b is not None else "" for b in table]
        self.whole = [b is not None and b.decode("utf-8", errors="ignore").encode() == b for b in table]
        self.lm, self.tok, self.eos_ids = lm, tok, eos_ids
        self.requests = 0
        app = FastAPI()

        @app.post("/v1/completions")
        async def completions(request: Request):
            if request.headers.get("authorization") != f"Bearer {token}":
                return JSONResponse({"detail": "Invalid API key"}, status_code=401)
            self.requests += 1
            body = await request.json()
            if body.get("stream"):
                return StreamingResponse(self.events(body), media_type="text/event-stream")
            return self.complete(body)

        @app.get("/v1/models")
        async def models(request: Request):
            if request.headers.get("authorization") != f"Bearer {token}":
                return JSONResponse({"detail": "Invalid API key"}, status_code=401)
            return {"object": "list", "data": [{"id": "stub", "object": "model"}]}

        self.served = Background(app, port)
        self.url = self.served.url

    def stop(self):
        self.served.stop()

    def _greedy(self, ids: list[int], max_tokens: int) -> tuple[list[int], str]:
        """Greedy generation on its own: up to ``max_tokens`` ids and the finish reason."""
        out: list[int] = []
        while len(out) < max_tokens:
            gen = int(self.lm.logits_after((ids + out)[-1:])[-1].argmax())
            if gen in self.eos_ids:
                return out, "stop"
            out.append(gen)
        return out, "length"

    def generate(self, ids: list[int], max_tokens: int) -> dict:
        """Greedy generation (no logprobs): the text of up to ``max_tokens`` tokens."""
        out, finish = self._greedy(ids, max_tokens)
        return {"object": "text_completion", "model": "stub",
                "choices": [{"text": self.tok.decode(out), "index": 0, "logprobs": None, "finish_reason": finish}]}

    def events(self, body: dict):
        """``stream``: greedy generation as server-sent events, one token's text each, then an
        event with the finish reason and ``data: [DONE]``."""
        ids = self.tok(body["prompt"], add_special_tokens=False).input_ids
        out, finish = self._greedy(ids, body.get("max_tokens", 16))
        for t in out:
            yield "data: " + json.dumps({"object": "text_completion", "choices": [
                {"text": self.tok.decode([t]), "index": 0, "logprobs": None, "finish_reason": None}]}) + "\n\n"
        yield "data: " + json.dumps({"object": "text_completion", "choices": [
            {"text": "", "index": 0, "logprobs": None, "finish_reason": finish}]}) + "\n\n"
        yield "data: [DONE]\n\n"

    def _entry(self, logprobs: torch.Tensor, n: int) -> dict:
        top = torch.topk(logprobs, n)
        return {self.text[int(i)]: float(v) for v, i in zip(top.values, top.indices)}

    def complete(self, body: dict):
        prompt = body["prompt"]
        ids = self.tok(prompt, add_special_tokens=False).input_ids
        if body.get("max_tokens", 16) > 1:
            return self.generate(ids, body["max_tokens"])
        logprobs = torch.log_softmax(self.lm.logits_after(ids).float(), dim=-1)  # [n, V]
        last = logprobs[-1].clone()
        for i, b in (body.get("logit_bias") or {}).items():
            last[int(i)] += b
        t = body.get("temperature", 0.8)
        if t == 0:
            gen = int(last.argmax())
        else:
            g = torch.Generator().manual_seed(int(body.get("seed", 0)))
            gen = draw(engine_law(last, t, body.get("top_p", 0.95)), g)
        if not self.whole[gen] and gen not in self.eos_ids:
            return JSONResponse({"detail": "llama_decode returned 1"}, status_code=500)
        stop = gen in self.eos_ids
        piece = "" if stop else self.text[gen]
        n = body.get("logprobs")
        if body.get("echo"):
            tops = [None] + [self._entry(logprobs[i], n) | {self.text[ids[i]]: float(logprobs[i, ids[i]])}
                             for i in range(1, len(ids))]
            lp = {"tokens": [self.text[i] for i in ids], "top_logprobs": tops,
                  "token_logprobs": [None] + [float(logprobs[i, ids[i]]) for i in range(1, len(ids))]}
            text = prompt + piece
        else:
            lp = {"tokens": [] if stop else [piece], "token_logprobs": [] if stop else [float(logprobs[-1, gen])],
                  "top_logprobs": [] if stop else [self._entry(logprobs[-1], n) | {piece: float(logprobs[-1, gen])}]}
            text = piece
        return {"object": "text_completion", "model": "stub",
                "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": "stop" if stop else "length"}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": 0 if stop else 1}}
