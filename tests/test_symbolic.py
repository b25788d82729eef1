"""CrossHair proves the contracts in properties/symbolic.py over their bounded input spaces and
refutes a planted allocation bug."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rmqspec.properties.symbolic as symbolic

# Seconds CrossHair may spend per condition; the contracts here settle in well under one.
PER_CONDITION_TIMEOUT = "20"


def crosshair(target: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("crosshair")
    return subprocess.run(
        [
            str(exe),
            "check",
            "--analysis_kind=PEP316",
            "--report_all",
            f"--per_condition_timeout={PER_CONDITION_TIMEOUT}",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_crosshair_confirms_every_contract_over_all_paths() -> None:
    result = crosshair(symbolic.__file__)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = symbolic.__doc__ is not None and [
        name for name, f in vars(symbolic).items() if callable(f) and "post:" in (f.__doc__ or "")
    ]
    assert contracts and result.stdout.count("Confirmed over all paths") == len(contracts), result.stdout


def test_crosshair_refutes_overlapping_avg_blocks(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from rmqspec.properties.symbolic import _partitions\n\n\n"
        "def overlapping_avg_is_a_partition(n: int, c: int) -> bool:\n"
        '    """\n    pre: 1 <= n <= 8\n    pre: 1 <= c <= 5\n    post: __return__\n    """\n'
        "    return _partitions('AVG', n, c, overlap=True)\n"
    )
    result = crosshair(str(planted))
    assert result.returncode == 1 and "false when calling overlapping_avg_is_a_partition" in result.stdout
