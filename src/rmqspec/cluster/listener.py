"""The listener side of a serve-cluster history, for Python clients (e.g. PyPI's ``rocketmq``, the C++ client).

A few lines in a client's message listener write what it was handed, one ``deliver`` event per message
(check-history's format, without a header; ``rmqspec merge-history`` adds the broker's side)::

    from rmqspec.cluster.listener import DeliveryLog
    deliveries = DeliveryLog("deliveries.jsonl", consumer="c1")  # c1: the instance name given to the client

    def on_message(msg):
        ...  # the application's work
        deliveries.record(msg.topic, msg.queue_id, msg.queue_offset)   # or result="failure"
        return ConsumeStatus.CONSUME_SUCCESS

Only the standard library is used, so the module can be copied next to a client that cannot import
rmqspec. Lines are flushed one by one and written under a lock (listeners run on several threads).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class DeliveryLog:
    """Appends deliver events to ``path``; ``consumer`` must be the instance name the client was given."""

    def __init__(self, path: str | Path, consumer: str) -> None:
        self.consumer = consumer
        self._lock = threading.Lock()
        self._out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def record(self, topic: str, queue: int, offset: int, result: str = "success") -> None:
        event = {
            "time": time.time() * 1000.0,
            "type": "deliver",
            "consumer": self.consumer,
            "topic": topic,
            "queue": int(queue),
            "offset": int(offset),
            "result": result,
        }
        line = json.dumps(event) + "\n"
        with self._lock:
            if not self._out.closed:
                self._out.write(line)
                self._out.flush()

    def close(self) -> None:
        with self._lock:
            self._out.close()
