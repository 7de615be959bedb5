"""The chat page's screenshot (docs/serve-chat.png): `omnidraft serve`'s app in this process, a
three-turn coding conversation typed into the page in headless Chromium, then a PNG of the window.

On tiny random models by default (a few seconds; the text is noise, the page is real); with
OMNIDRAFT_REAL=1 on the real pair, Session("smollm2-135m", "qwen2.5-coder-0.5b", slots=2), in
the real home (~/.cache/omnidraft: the first run may build programs and the cost model, minutes),
without logging training records. Needs /usr/bin/chromium, /usr/bin/chromedriver and selenium.
Example:
  OMNIDRAFT_REAL=1 [OMNIDRAFT_REAL_TARGET=qwen2.5-coder-1.5b] python -m omnidraft.tools.screenshot_chat --out docs/serve-chat.png
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CODE = '''def average(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)'''
TURNS = [
    f"Add a docstring to this Python function:\n\n{CODE}",
    "Now rename the variable `total` to `running_sum`.",
    "Make it return 0.0 for an empty list.",
]


def tiny_session(workdir: Path):
    """A Session of tiny random models with the real tokenizers (as tests/serve/conftest.py)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from omnidraft.models.loading import load_tokenizer
    from omnidraft.pairs.settings import Runtime
    from omnidraft.session import Session

    paths = []
    for name, config, cls, seed in (("smollm2-135m", LlamaConfig, LlamaForCausalLM, 11),
                                    ("qwen2.5-coder-0.5b", Qwen2Config, Qwen2ForCausalLM, 12)):
        tok = load_tokenizer(name)  # from the real home, before OMNIDRAFT_HOME moves
        vocab = max(len(tok), max(tok.get_vocab().values()) + 1)
        torch.manual_seed(seed)
        model = cls(config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)).eval()
        path = workdir / name
        model.save_pretrained(str(path))
        tok.save_pretrained(str(path))
        paths.append(str(path))
    os.environ["OMNIDRAFT_HOME"] = str(workdir / "home")
    return lambda: Session(*paths, runtime=Runtime(dtype="fp32"), slots=2)


REAL_TARGET = os.environ.get("OMNIDRAFT_REAL_TARGET", "qwen2.5-coder-0.5b")


def real_session():
    from omnidraft.session import Session

    return lambda: Session("smollm2-135m", REAL_TARGET, slots=2, log=False)


def serve(make_session, model: str):
    """(base URL, server, runner): the app on a free loopback port in a thread, once loaded."""
    import uvicorn

    from omnidraft.sampling import SamplingConfig
    from omnidraft.serve.app import Served, create_app
    from omnidraft.serve.runner import Runner

    runner = Runner(make_session, 8)
    app = create_app(runner, Served(model, (), 1 << 20, SamplingConfig()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    t0 = time.time()
    while runner.session is None and runner.failed is None or not server.started:
        time.sleep(0.2)
    if runner.failed:
        sys.exit(f"the Session did not load: {runner.failed}")
    print(f"serving {model} after {time.time() - t0:.0f} s", file=sys.stderr)
    return f"http://127.0.0.1:{port}", server, runner


def chromium(profile: str, width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    # the page itself WIDTHxHEIGHT (--window-size counts the window, not the viewport)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/serve-chat.png")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--turns", type=int, default=3, choices=range(1, len(TURNS) + 1))
    ap.add_argument("--size", default="1200x900", help="the window, WIDTHxHEIGHT")
    args = ap.parse_args()
    from selenium.webdriver.support.ui import WebDriverWait

    real = os.environ.get("OMNIDRAFT_REAL") == "1"
    with tempfile.TemporaryDirectory() as tmp:
        make = real_session() if real else tiny_session(Path(tmp))
        url, server, runner = serve(make, REAL_TARGET if real else "tiny")
        width, height = (int(x) for x in args.size.split("x"))
        driver = chromium(str(Path(tmp) / "profile"), width, height)
        try:
            driver.get(url + "/")
            WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "return document.getElementById('model').textContent !== '…'"))
            driver.execute_script("document.getElementById('max-tokens').value = arguments[0]", args.max_tokens)
            for i, text in enumerate(TURNS[:args.turns], 1):
                t0 = time.time()
                # as if pasted: the whole text into the box, then Send
                driver.execute_script("document.getElementById('prompt').value = arguments[0]", text)
                driver.find_element("id", "send").click()
                WebDriverWait(driver, 600, poll_frequency=0.1).until(lambda d, n=i: d.execute_script(
                    "return !document.body.dataset.busy && "
                    "document.querySelectorAll('.msg.assistant').length === arguments[0]", n))
                print(f"turn {i}: {time.time() - t0:.1f} s; {driver.find_element('id', 'stats').text!r}",
                      file=sys.stderr)
            driver.execute_script("document.getElementById('prompt').blur()")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(args.out)
            print(f"wrote {args.out}", file=sys.stderr)
        finally:
            driver.quit()
            server.should_exit = True
            time.sleep(0.5)
            if runner.session is not None:
                runner.session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
