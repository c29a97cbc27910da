"""A stand-in rollout webhook for synthesis tests: a real HTTP server on 127.0.0.1 that the
egress policy allows (its host:port in JUDGE_PRIVATE_HOSTS, as an operator allows a local
harness), answering each steering job with a trajectory that follows the job's level. The
`hook` fixture (conftest.py) starts one and allows it."""

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Hook:
    """A rollout webhook on loopback: answers each job with a trajectory that follows its
    level and names its seed (a retry's rollout is a fresh one), costing $0.5; a job that
    `fails(body)` picks always gets a 500 (with a detail the run must not quote); `mode`
    scripts other answers."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.mode = "normal"
        self.fails: Callable[[dict[str, Any]], bool] = lambda body: False
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.bodies.append(body)
                hook.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, payload = hook.answer(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host_port = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.host_port}/rollout"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        if self.mode == "huge":
            return 200, json.dumps({"content": "x" * 5000}).encode()
        if self.mode == "slow":
            time.sleep(1.0)
        if self.fails(body):
            return 500, b'{"error": "the harness crashed: SECRET-INTERNAL-DETAIL"}'
        quality = ["bad", "ok", "good"].index(body["level"])
        text = f"quality={quality} task={body['task']['id']} seed={body['seed']} via hook"
        messages = [
            {"role": "user", "content": body["task"]["prompt"]},
            {"role": "assistant", "content": text},
        ]
        return 200, json.dumps({"messages": messages, "cost": 0.5}).encode()
