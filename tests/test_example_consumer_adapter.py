"""docs/examples/RmqspecConsumerAdapter.java, the example protocol 2 adapter in Java (push consumers
with RocketMQ 4.9.8's offset logic), compiles and passes ``rmqspec conform`` for ``pushConsumer`` and
``pushConsumer.orderly``; copies with one deliberate offset bug each do not. Skipped when no JDK is
on PATH."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rmqspec.cli import EXIT_OK, EXIT_VIOLATION
from rmqspec.conform.consumers import REACHED

ADAPTER = Path(__file__).parent.parent / "docs" / "examples" / "RmqspecConsumerAdapter.java"
CLASS = "RmqspecConsumerAdapter"
COMPONENTS = "pushConsumer,pushConsumer.orderly"
EXAMPLES = 300

# One wrong line per area, and the request at which conform shows it: (correct, wrong, op).
MUTATIONS = {
    # R5.2: the pull's commit-offset flag set for a memory offset of 0; the pull request itself differs
    "commit_flag_at_zero": (
        "if (commitOffsetValue > 0) commitOffsetEnable = true;",
        "if (commitOffsetValue >= 0) commitOffsetEnable = true;",
        "consumer.run",
    ),
    # R5.7: 4.9.8's OFFSET_ILLEGAL correction due 5 s after the reply, not 10 s; the observed task shows it
    "offset_illegal_fixed_after_5s": (
        "OFFSET_ILLEGAL_FIX_DELAY = 10_000;",
        "OFFSET_ILLEGAL_FIX_DELAY = 5_000;",
        "consumer.observe",
    ),
    # R8.6: an orderly SUSPEND_CURRENT_QUEUE_A_MOMENT consumes again after 5 s, not 1 s
    "orderly_suspend_5s": (
        "SUSPEND_CURRENT_QUEUE_TIME_MILLIS = 1_000;",
        "SUSPEND_CURRENT_QUEUE_TIME_MILLIS = 5_000;",
        "consumer.observe",
    ),
}

needs_jdk = pytest.mark.skipif(
    shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK (javac and java on PATH)"
)


def _compile(source: str, work: Path) -> Path:
    src = work / "src" / f"{CLASS}.java"
    src.parent.mkdir(parents=True)
    src.write_text(source, encoding="utf-8")
    classes = work / "classes"
    subprocess.run(["javac", "-d", str(classes), str(src)], check=True, capture_output=True, timeout=120)
    return classes


def _conform(classes: Path, out: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rmqspec.cli", "conform", "--sut", f"java -cp {classes} {CLASS}"]
    command += ["--components", COMPONENTS, "--examples", str(EXAMPLES), "--seed", "0"]
    command += ["--shrink-seconds", "20", "--out", str(out), "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@needs_jdk
def test_java_consumer_adapter_conforms(tmp_path: Path) -> None:
    classes = _compile(ADAPTER.read_text(encoding="utf-8"), tmp_path)
    run = _conform(classes, tmp_path / "out")
    assert run.returncode == EXIT_OK, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["components"] == COMPONENTS.split(",")
    assert result["requests"] > 10_000
    # the run went everywhere offset bugs live: in-flight rebalances, OFFSET_ILLEGAL and its 10 s task,
    # failed send-backs, listeners returning after their queue left, refused locks, restarts
    never = {name for name, n in result["reached"].items() if n == 0}
    assert set(result["reached"]) == set(REACHED) and not never, result["reached"]


# Other orders in which a consumer may walk the queues a rebalance allocated (updateProcessQueueTableInRebalance
# iterates a HashSet in 4.9.8, R9.4): 4.9.8's own (MessageQueue#hashCode, then HashSet order: for T on broker-a
# queue 2, then 1, then 0), and the reverse of the reference's. Neither is an offset bug: answers by content.
WALK_ORDERS: dict[str, list[tuple[str, str]]] = {
    "hash-set": [
        (
            "Set<MessageQueue> allocateResultSet = new TreeSet<>();",
            "Set<MessageQueue> allocateResultSet = new HashSet<>();",
        ),
        (
            "public int hashCode() { return (topic.hashCode() * 31 + brokerName.hashCode()) * 31 + queueId; }",
            "public int hashCode() { return (31 * (31 + brokerName.hashCode()) + queueId) * 31 + topic.hashCode(); }",
        ),
    ],
    "reversed": [
        (
            "Set<MessageQueue> allocateResultSet = new TreeSet<>();\n"
            "            if (allocateResult != null) allocateResultSet.addAll(allocateResult);",
            "List<MessageQueue> walk = new ArrayList<>(allocateResult == null ? List.of() : allocateResult);\n"
            "            Collections.reverse(walk);\n"
            "            Set<MessageQueue> allocateResultSet = new java.util.LinkedHashSet<>(walk);",
        )
    ],
}


@needs_jdk
@pytest.mark.parametrize("order", sorted(WALK_ORDERS))
def test_a_java_consumer_that_asks_in_another_order_conforms(order: str, tmp_path: Path) -> None:
    """The broker answers each request by the queue it asks about, so a consumer whose rebalance locks and queries
    its new queues in another order is given the same world and conforms."""
    source = ADAPTER.read_text(encoding="utf-8")
    for correct, other in WALK_ORDERS[order]:
        assert source.count(correct) == 1, correct
        source = source.replace(correct, other)
    run = _conform(_compile(source, tmp_path), tmp_path / "out")
    assert run.returncode == EXIT_OK, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["reached"]["queryErrorDuringRebalance"] > 0 and result["reached"]["lockRefused"] > 0


@needs_jdk
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_java_consumer_with_an_offset_bug_diverges(mutation: str, tmp_path: Path) -> None:
    correct, wrong, op = MUTATIONS[mutation]
    source = ADAPTER.read_text(encoding="utf-8")
    assert source.count(correct) == 1
    classes = _compile(source.replace(correct, wrong), tmp_path)
    run = _conform(classes, tmp_path / "out")
    assert run.returncode == EXIT_VIOLATION, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["divergence"]["request"]["op"] == op, result["divergence"]
    assert result["scriptSteps"] <= 12, result
