"""Exceptions of the reference implementation, named after the RocketMQ classes they stand for.

``MQClientException`` is what a client component raises for a failure the caller must see; in
this package it comes from ``LocalFileOffsetStore.load`` when both offset files are unparsable
(R1.9, R1.10), which makes the consumer's ``start()`` fail (R1.3).
"""

from __future__ import annotations


class MQClientException(Exception):
    """``org.apache.rocketmq.client.exception.MQClientException``: a client-side failure.

    ``response_code`` is -1 unless the failure carries a broker response code, as in Java.
    The cause, if any, is chained with ``raise ... from``.
    """

    def __init__(self, error_message: str, response_code: int = -1) -> None:
        super().__init__(error_message)
        self.error_message = error_message
        self.response_code = response_code
