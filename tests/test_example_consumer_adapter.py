"""docs/examples/RmqspecConsumerAdapter.java, the example protocol 2 adapter in Java (a push consumer
with RocketMQ 4.9.8's offset logic), compiles and passes ``rmqspec conform`` for ``pushConsumer``;
a copy with one deliberate offset bug does not. Skipped when no JDK is on PATH."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rmqspec.cli import EXIT_OK, EXIT_VIOLATION

ADAPTER = Path(__file__).parent.parent / "docs" / "examples" / "RmqspecConsumerAdapter.java"
CLASS = "RmqspecConsumerAdapter"
# The bug the mutated copy carries: the pull's commit-offset flag set for a memory offset of 0 (R5.2).
CORRECT_FLAG = "if (commitOffsetValue > 0) commitOffsetEnable = true;"
WRONG_FLAG = "if (commitOffsetValue >= 0) commitOffsetEnable = true;"

needs_jdk = pytest.mark.skipif(
    shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK (javac and java on PATH)"
)


def _compile(source: str, classes: Path) -> None:
    src = classes.parent / f"src-{classes.name}" / f"{CLASS}.java"
    src.parent.mkdir(parents=True)
    src.write_text(source, encoding="utf-8")
    classes.mkdir()
    subprocess.run(["javac", "-d", str(classes), str(src)], check=True, capture_output=True, timeout=120)


def _conform(classes: Path, out: Path, examples: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rmqspec.cli", "conform", "--sut", f"java -cp {classes} {CLASS}"]
    command += ["--components", "pushConsumer", "--examples", str(examples), "--seed", "0"]
    command += ["--shrink-seconds", "20", "--out", str(out), "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@needs_jdk
def test_java_consumer_adapter_conforms(tmp_path: Path) -> None:
    _compile(ADAPTER.read_text(encoding="utf-8"), tmp_path / "classes")
    run = _conform(tmp_path / "classes", tmp_path / "out", examples=300)
    assert run.returncode == EXIT_OK, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["components"] == ["pushConsumer"]
    assert result["requests"] > 10_000
    # the run went where offset bugs live: in-flight rebalances, OFFSET_ILLEGAL and its 10 s task,
    # failed send-backs, listeners returning after their queue left, BROADCASTING restarts
    reached = {name for name, n in result["reached"].items() if n > 0}
    assert reached >= {
        "rebalanceWhileInFlight",
        "queueTakenWhileInFlight",
        "queryErrorDuringRebalance",
        "offsetIllegalWithCached",
        "offsetIllegalTaskRan",
        "sendBackFailed",
        "listenerReturnedAfterDrop",
        "persistTimerRan",
        "broadcastingRestart",
    }, result["reached"]


@needs_jdk
def test_a_java_consumer_with_an_offset_bug_diverges(tmp_path: Path) -> None:
    source = ADAPTER.read_text(encoding="utf-8")
    assert source.count(CORRECT_FLAG) == 1
    _compile(source.replace(CORRECT_FLAG, WRONG_FLAG), tmp_path / "classes")
    run = _conform(tmp_path / "classes", tmp_path / "out", examples=300)
    assert run.returncode == EXIT_VIOLATION, run.stdout + run.stderr
    result = json.loads(run.stdout)
    divergence = result["divergence"]
    # shown at the pull itself: its sysFlag differs from the reference's; shrunk to a handful of steps
    assert divergence["request"]["op"] == "consumer.run", divergence
    assert divergence["request"]["args"]["task"] == "pull" and divergence["difference"] == "sent", divergence
    assert result["scriptSteps"] <= 12, result
