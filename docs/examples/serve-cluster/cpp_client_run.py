"""Produce N messages and consume them with PyPI's ``rocketmq`` (the Apache C++ client) against serve-cluster.

    python cpp_client_run.py NAMESRV N DELIVERIES [--instance c1] [--timeout 60] [--expect K]
                             [--threads T] [--work-ms 0] [--run-for S]

The listener writes one deliver line per message with rmqspec's DeliveryLog (``rmqspec.cluster.listener``,
standard library only). Prints ``sent N SECONDS`` and ``consumed K``; exits 0 when all N (or ``--expect``)
were consumed before the timeout, 1 otherwise. With ``--run-for S`` the consumer runs S seconds and exits 0
(several such processes with N = 0 but one make a group of consumers).
"""

import argparse
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer

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
args = parser.parse_args()

if args.n > 0:
    producer = Producer("PG")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    started = time.monotonic()
    for i in range(args.n):
        msg = Message(args.topic)
        msg.set_tags("a")
        msg.set_body(f"m{i}".encode())
        producer.send_sync(msg)
    print("sent", args.n, round(time.monotonic() - started, 3), flush=True)
    producer.shutdown()

deliveries = DeliveryLog(args.deliveries, args.instance)
seen: set[tuple[int, int]] = set()
all_seen = threading.Event()
lock = threading.Lock()


def on_message(msg):  # the application's listener; returning normally is CONSUME_SUCCESS
    time.sleep(args.work_ms / 1000)  # the application's work
    deliveries.record(msg.topic, msg.queue_id, msg.queue_offset)
    with lock:
        seen.add((msg.queue_id, msg.queue_offset))
        if len(seen) >= (args.n if args.expect is None else args.expect):
            all_seen.set()


consumer = PushConsumer(args.group)
consumer.set_namesrv_addr(args.namesrv)
consumer.set_instance_name(args.instance)
if args.threads is not None:
    consumer.set_thread_count(args.threads)
consumer.subscribe(args.topic, on_message)
started = time.monotonic()
consumer.start()
ok = all_seen.wait(args.timeout) if args.run_for is None else not time.sleep(args.run_for)
print("consumed", len(seen), round(time.monotonic() - started, 3), flush=True)
consumer.shutdown()
deliveries.close()
raise SystemExit(0 if ok else 1)
