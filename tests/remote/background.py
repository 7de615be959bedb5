"""A FastAPI app served by uvicorn on a background thread: how the unit tier runs its stand-ins
of the serving engines (llamacpp_stub.py, id_engine_stub.py)."""

from __future__ import annotations

import threading
import time

import uvicorn


class Background:
    def __init__(self, app, port: int):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
