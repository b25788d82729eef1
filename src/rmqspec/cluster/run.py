"""``rmqspec serve-cluster``: run the name server and broker until SIGINT, SIGTERM or ``--duration``.

Prints one line when both listeners are bound (``serve-cluster: name server 127.0.0.1:P, broker
127.0.0.1:B, RocketMQ V``; with ``--port 0`` the ports are the ones the system chose), and one JSON
line with the request counts when it stops. The history is flushed line by line and closed on every
way out. Exit codes: 0 after ``--duration``, 130 on SIGINT, 143 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

from rmqspec.cluster.faults import Fault
from rmqspec.cluster.history_log import BrokerHistory
from rmqspec.cluster.server import ClusterServer

EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


def serve_cluster(
    port: int,
    broker_port: int,
    version: str,
    history_path: Path | None,
    duration: float | None,
    group: str | None,
    queues: int,
    store_dir: Path | None,
    faults: list[Fault] | None = None,
    speed: float = 1.0,
) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="serve-cluster: %(message)s")
    with tempfile.TemporaryDirectory(prefix="rmqspec-cluster-") as scratch:
        root = store_dir if store_dir is not None else Path(scratch)
        return asyncio.run(
            _main(port, broker_port, version, history_path, duration, group, queues, root, faults, speed)
        )


async def _main(
    port: int,
    broker_port: int,
    version: str,
    history_path: Path | None,
    duration: float | None,
    group: str | None,
    queues: int,
    root: Path,
    faults: list[Fault] | None,
    speed: float,
) -> int:
    history = BrokerHistory(history_path, version, group)
    server = ClusterServer(root, version, history, queues, port, broker_port, faults, speed)
    stop = asyncio.Event()
    exit_code = [0]
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        exit_code[0] = EXIT_SIGNAL[signum]
        stop.set()

    for signum in EXIT_SIGNAL:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await server.start()
        where = f"name server 127.0.0.1:{server.namesrv_port}, broker {server.broker_addr}"
        pace = "" if speed == 1 else f", delay levels {speed:g} times faster"
        print(f"serve-cluster: {where}, RocketMQ {version}{pace}", flush=True)
        await server.serve(stop, duration)
    finally:
        await server.close()
        for signum in EXIT_SIGNAL:
            loop.remove_signal_handler(signum)
    print(json.dumps({"serve-cluster": server.summary()}), flush=True)
    return exit_code[0]
