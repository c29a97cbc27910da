"""The fake judge's hold: requests that arrive while it holds wait unread; one whose client
goes away meanwhile is never counted, recorded or answered; the others are, on release."""

import threading

import httpx

from tests.conftest import wait_for
from tests.fakes.openai_server import FakeJudgeServer

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_held_request_is_unseen_until_release_and_dropped_if_its_client_leaves() -> None:
    with FakeJudgeServer() as server:
        url = f"{server.base_url}/chat/completions"
        server.hold()
        try:
            httpx.post(url, json=BODY, timeout=0.3)
        except httpx.TimeoutException:
            pass
        else:
            raise AssertionError("a held request was answered")
        assert wait_for(lambda: server.held == 0, timeout=5)  # its client left: dropped
        answers: list[int] = []
        waiting = threading.Thread(
            target=lambda: answers.append(httpx.post(url, json=BODY, timeout=10).status_code)
        )
        waiting.start()
        assert wait_for(lambda: server.held == 1, timeout=5)
        assert (server.call_count, server.requests, answers) == (0, [], [])
        server.release()
        waiting.join(timeout=10)
        assert answers == [200] and server.call_count == 1 and server.held == 0
