"""The pair's server on tiny models: a Session of a tiny SmolLM2-vocabulary drafter and a tiny
Qwen2.5-vocabulary target (fp32: greedy equality is exact), served by uvicorn in a thread of
the test process on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

from ..test_session import home, models  # noqa: F401  (the tiny pair's folders and an empty home)

KEY = "test-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(make_session, *, model: str = "tiny", key: str | tuple[str, ...] | None = KEY, queue: int = 8,
            max_body: int = 1 << 20, sampling=None, ready: bool = True, start_s: float = 120, prepare=None):
    """(base URL, runner) of the app serving ``make_session()`` (after ``prepare(say)``), until
    the block ends; ``ready``: once the Session has loaded (else as soon as the port is open),
    within ``start_s`` seconds."""
    import uvicorn

    from omnidraft.sampling import SamplingConfig
    from omnidraft.serve.app import Served, create_app
    from omnidraft.serve.runner import Runner

    runner = Runner(make_session, queue, prepare)
    keys = () if key is None else (key,) if isinstance(key, str) else tuple(key)
    app = create_app(runner, Served(model, keys, max_body, sampling or SamplingConfig()))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_s
    while (ready and runner.session is None and runner.failed is None) or not server.started:
        assert time.time() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", runner
    finally:
        server.should_exit = True
        thread.join(30)
        if runner.session is not None:
            runner.session.close()
