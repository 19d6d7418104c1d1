"""A real HTTP server speaking the OpenAI chat protocol, with scripted faults, for the client tests.

It answers deterministically from the prompt (record prompts get a JSON record made of the unit's
first words; other prompts get their first words back), and each queued fault is used by one
request: ``"429"``, ``"500"``, ``"401"``, ``"slow"`` (sleeps ``slow_s`` before answering), ``"cut"``
(closes the connection without a response), ``"badbody"`` (200 with a body that is not JSON),
``"badjson"`` (a completion whose content is not JSON), ``"long"`` (a record far over the limit).
``always`` sets a fault used by every request once the queue is empty.

Offered tools, it calls the first one with ``{"query": <the last message's first three words>}``
through the protocol's ``tool_calls`` (``"textcalls"``: as JSON in the text, the way llama.cpp leaves
Qwen's calls), and answers ``done`` once the last message is a tool result.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

UNIT = re.compile(r"<<<\n(.*)\n>>>", re.S)


def tool_reply(body: dict[str, Any], fault: str | None) -> dict[str, Any]:
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": "done"}
    name = body["tools"][0]["function"]["name"]
    args = json.dumps({"query": " ".join(str(messages[-1]["content"]).split()[:3])})
    if fault == "textcalls":
        text = "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
        return {"role": "assistant", "content": text}
    call = {"id": "call_fake", "type": "function", "function": {"name": name, "arguments": args}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def answer_for(messages: list[dict[str, str]], json_mode: bool) -> str:
    last = messages[-1]["content"]
    if last.startswith("Question:") and "Gold answer:" in last:  # the judge: CORRECT when gold is in it
        gold = last.split("Gold answer:", 1)[1].split("\n")[0].strip().lower()
        candidate = last.split("Candidate answer:", 1)[1].strip().lower()
        return "CORRECT" if gold and gold in candidate else "WRONG"
    if last.startswith("Question:") and "Correct answer:" in last:  # LongMemEval's judge: yes when gold is in it
        gold = last.split("Correct answer:", 1)[1].split("\n")[0].strip().lower()
        candidate = last.split("Candidate answer:", 1)[1].strip().lower()
        return "yes" if gold and gold in candidate else "no"
    if last.startswith("Memory:"):  # the reader: notes, then the memory's last line as the answer
        memory = last.split("\n\nCurrent date:", 1)[0].split("\n\nQuestion:", 1)[0]
        return "Notes: read the memory.\nAnswer: " + memory.strip().splitlines()[-1]
    prompt = messages[0]["content"]
    m = UNIT.search(prompt)
    if json_mode and m:
        words = m.group(1).split()
        caps = [w.strip(".,:;!?") for w in words if w[:1].isupper()]
        return json.dumps(
            {
                "record": " ".join(words[:40]),
                "keywords": list(dict.fromkeys(caps))[:6] or words[:3],
                "tags": ["fake"],
                "description": "Written by the fake server: " + " ".join(words[:8]),
            }
        )
    lines = [ln for ln in prompt.splitlines() if re.match(r"\d+\. ", ln)]
    return " ".join(" ".join(ln.split()[1:13]) for ln in lines) or " ".join(prompt.split()[:20])


class FakeOpenAI:
    """``with FakeOpenAI() as server: OpenAICompatible(server.url, "fake")``."""

    def __init__(self, slow_s: float = 2.0) -> None:
        self.faults: deque[str] = deque()
        self.always: str | None = None
        self.slow_s = slow_s
        self.delay_s = 0.0  # added to every answer (for concurrency tests)
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _next_fault(self) -> str | None:
        with self._lock:
            return self.faults.popleft() if self.faults else self.always

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.delay_s:  # the model "thinking": counted as in flight
                        time.sleep(server.delay_s)
                finally:
                    # out of flight before the answer is written: once the client has read it, it may
                    # send its next request, which must not be counted with this one
                    with server._lock:
                        server.in_flight -= 1
                self._answer(body)

            def _answer(self, body: dict[str, Any]) -> None:
                fault = server._next_fault()
                if fault == "cut":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault in ("429", "500", "401"):
                    headers = {"Retry-After": "0"} if fault == "429" else {}
                    self._send(int(fault), b'{"error": {"message": "scripted fault"}}', headers)
                    return
                if fault == "badbody":
                    self._send(200, b"<html>proxy error</html>")
                    return
                if fault == "slow":
                    time.sleep(server.slow_s)
                json_mode = body.get("response_format", {}).get("type") == "json_object"
                if "tools" in body:
                    message = tool_reply(body, fault)
                    text = message["content"] or ""
                else:
                    text = answer_for(body["messages"], json_mode)
                    if fault == "badjson":
                        text = "Sure! Here is the record: " + text[:40]
                    if fault == "long":
                        text = json.dumps(
                            {"record": "word " * 200, "keywords": ["k"], "tags": ["t"], "description": "long " * 60}
                        )
                    message = {"role": "assistant", "content": text}
                reply = {
                    "id": "fake",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {
                        "prompt_tokens": len(json.dumps(body["messages"])) // 4,
                        "completion_tokens": len(text) // 4,
                    },
                }
                self._send(200, json.dumps(reply).encode())

        return Handler
