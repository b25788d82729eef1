"""Produce N messages and consume them with PyPI's ``rocketmq`` (the Apache C++ client) against serve-cluster.

    python cpp_client_run.py NAMESRV N DELIVERIES [--instance c1] [--timeout 60] [--expect K]
                             [--threads T] [--work-ms 0] [--run-for S] [--fail-offsets O,...]
                             [--orderly] [--batch K]

The listener writes one deliver line per message with rmqspec's DeliveryLog (``rmqspec.cluster.listener``,
standard library only). Prints ``sent N SECONDS`` and ``consumed K``; exits 0 when all N (or ``--expect``)
were consumed before the timeout, 1 otherwise. With ``--run-for S`` the consumer runs S seconds and exits 0
(several such processes with N = 0 but one make a group of consumers). ``--fail-offsets`` makes the first
delivery of those offsets of the topic fail: the listener answers RECONSUME_LATER (orderly:
SUSPEND_CURRENT_QUEUE_A_MOMENT, the same C value), so the client sends them back. The binding's public listener
cannot answer it (an exception raised in it reaches librocketmq as 0, CONSUME_SUCCESS: its wrapper re-raises
from ``finally``, and a ctypes callback that raises returns 0), so the status is returned through the binding's
own callback registration, ``PushConsumer._register_callback``; ``--fail-by-raising`` raises instead, which
shows that. ``--orderly`` consumes orderly (LOCK_BATCH_MQ); ``--batch K`` sends K messages per
``send_batch`` (SEND_BATCH_MESSAGE).

A message the listener is handed from ``%RETRY%<group>`` carries the topic it was first sent to (the client
resets it, as 4.9.8's ``resetRetryTopic``) and the retry queue's id and offset; its ``RETRY_TOPIC`` property
tells it apart, and the listener records it under the retry topic it was pulled from.
"""

import argparse
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage, dll

from rmqspec.cluster.listener import DeliveryLog

parser = argparse.ArgumentParser()
parser.add_argument("namesrv")
parser.add_argument("n", type=int)
parser.add_argument("deliveries")
parser.add_argument("--instance", default="c1")
parser.add_argument("--topic", default="T")
parser.add_argument("--group", default="G")
parser.add_argument("--timeout", type=float, default=60.0)
parser.add_argument("--expect", type=int, help="messages to wait for (default N)")
parser.add_argument("--threads", type=int, help="consume threads (default: the client's)")
parser.add_argument("--work-ms", type=float, default=0.0, help="time the listener spends on each message")
parser.add_argument("--run-for", type=float, help="consume for this many seconds, then stop (exit 0)")
parser.add_argument("--fail-offsets", default="", help="offsets of the topic whose first delivery fails")
parser.add_argument("--fail-by-raising", action="store_true", help="fail by raising in the public listener")
parser.add_argument("--orderly", action="store_true", help="an orderly push consumer")
parser.add_argument("--batch", type=int, default=0, help="send this many messages per send_batch")
args = parser.parse_args()
failing = {int(o) for o in args.fail_offsets.split(",") if o}

if args.n > 0:
    producer = Producer("PG")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    started = time.monotonic()
    batch = []
    for i in range(args.n):
        msg = Message(args.topic)
        msg.set_tags("a")
        msg.set_body(f"m{i}".encode())
        if args.batch <= 0:
            producer.send_sync(msg)
            continue
        batch.append(msg)
        if len(batch) == args.batch or i == args.n - 1:
            producer.send_batch(batch)
            batch = []
    print("sent", args.n, round(time.monotonic() - started, 3), flush=True)
    producer.shutdown()

deliveries = DeliveryLog(args.deliveries, args.instance)
seen: set[tuple[str, int, int]] = set()
all_seen = threading.Event()
lock = threading.Lock()


CONSUME_SUCCESS, RECONSUME_LATER = 0, 1  # the C API's status values (orderly: SUCCESS, SUSPEND_A_MOMENT)


def on_message(msg) -> int:  # the application's listener
    time.sleep(args.work_ms / 1000)  # the application's work
    retried = msg.get_property("RETRY_TOPIC")  # pulled from %RETRY%<group>: msg.topic is the original's
    topic = f"%RETRY%{args.group}" if retried else msg.topic
    if not retried and msg.queue_offset in failing:
        failing.discard(msg.queue_offset)
        deliveries.record(topic, msg.queue_id, msg.queue_offset, result="failure")
        if args.fail_by_raising:
            raise RuntimeError(f"the listener fails offset {msg.queue_offset}")
        return RECONSUME_LATER
    deliveries.record(topic, msg.queue_id, msg.queue_offset)
    with lock:
        seen.add((topic, msg.queue_id, msg.queue_offset))
        if len(seen) >= (args.n if args.expect is None else args.expect):
            all_seen.set()
    return CONSUME_SUCCESS


consumer = PushConsumer(args.group, orderly=args.orderly)
consumer.set_namesrv_addr(args.namesrv)
consumer.set_instance_name(args.instance)
if args.threads is not None:
    consumer.set_thread_count(args.threads)
if args.fail_by_raising:
    consumer.subscribe(args.topic, on_message)
else:  # the binding's subscribe without its wrapper, so that the listener's status reaches the client
    dll.Subscribe(consumer._handle, args.topic.encode(), b"*")
    consumer._register_callback(lambda _consumer, msg: on_message(RecvMessage(msg)))
started = time.monotonic()
consumer.start()
ok = all_seen.wait(args.timeout) if args.run_for is None else not time.sleep(args.run_for)
print("consumed", len(seen), round(time.monotonic() - started, 3), flush=True)
consumer.shutdown()
deliveries.close()
raise SystemExit(0 if ok else 1)
