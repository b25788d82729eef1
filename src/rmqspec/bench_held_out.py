"""``rmqspec bench-held-out``: how the default tooling does on the held-out real bugs (docs/held_out.md).

For each held-out variant (``spec/variants/held_out``) it runs what ``make run`` runs, with that variant planted
and nothing else changed, as subprocesses of the installed CLI (so it measures whatever the campaign and the check
do at the time): ``rmqspec campaign --mutation NAME`` with the default budget (``--campaign-seconds`` shortens it,
for tests only), then ``rmqspec check --config all --mutation NAME``. Their outputs go under ``--out``, the
campaign's failure store too (``--store``), so the project's ``failures/`` is never written.

Per variant it reports: caught or not, by which part (campaign, then check), the first property, the length of
the shrunk counterexample (the campaign's ``shrunk_steps``; the check's shortest counterexample's ``steps``, or a
lasso's prefix + cycle), and the time to detection. The campaign's is from the start of its process to the end of
the first batch whose rows hold a violation: each batch is written whole, once, with ``os.replace`` when it
ends (``campaign/runner.py``), so the batch file's modification time is the end of that batch. The check's is the
sum of the searches' own seconds up to the first configuration with a violation. Each row names its set: ``seen``
(``HeldOutBug.figures_seen``: its catch figures have been used by search work) or ``unseen``; then "caught N of M" per
set and in total. ``--unseen`` measures only the unseen set, the only one a change of the search may be judged on.

A measurement: it exits 0 whatever the catch rate, 2 for a bad name, 130 on Ctrl-C after printing what was
measured so far. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CAMPAIGN = "campaign"
CHECK = "check"
# The two sets of the held-out bugs (HeldOutBug.figures_seen, docs/held_out.md): a search change may be judged only
# on the unseen set, and a bug becomes seen as soon as its figures are used to change the search.
SEEN = "seen"
UNSEEN = "unseen"
SETS = (SEEN, UNSEEN)


@dataclass
class Part:
    """One part's measurement of one variant."""

    ran: bool = False
    exit_code: int | None = None
    caught: bool = False
    property: str | None = None
    counterexample_steps: int | None = None
    seconds_to_detection: float | None = None
    seconds: float | None = None  # the part's whole run
    error: str | None = None  # "interrupted", or an exit code that is neither 0 nor 1 with its last stderr line


@dataclass
class Row:
    """One held-out variant: both parts and which caught it first."""

    name: str
    citation: str
    set: str = "unseen"  # SEEN or UNSEEN: whether its catch figures have been seen by search work (figures_seen)
    campaign: Part = field(default_factory=Part)
    check: Part = field(default_factory=Part)
    started: float = 0.0  # when its campaign's process started (time.time())

    @property
    def caught_by(self) -> str | None:
        if self.campaign.caught:
            return CAMPAIGN
        if self.check.caught:
            return CHECK
        return None

    def first(self) -> Part | None:
        by = self.caught_by
        return None if by is None else (self.campaign if by == CAMPAIGN else self.check)


def cli_command() -> list[str]:
    """The installed ``rmqspec`` next to this interpreter, else this interpreter running the CLI module."""
    script = Path(sys.executable).with_name("rmqspec")
    if script.is_file():
        return [str(script)]
    found = shutil.which("rmqspec")
    return [found] if found else [sys.executable, "-m", "rmqspec.cli"]


def campaign_detection(out: Path, started: float) -> tuple[str, int, float] | None:
    """(property, shrunk steps, seconds from ``started``) of the first violation in the campaign directory ``out``:
    the first row with a violation in the lowest-numbered batch that holds one; None if no batch does."""
    for path in sorted((out / "batches").glob("batch-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for row in sorted(rows, key=lambda r: int(r["unit"])):
            if row.get("violation_count", 0) > 0 and row.get("violations"):
                v = json.loads(row["violations"][0])
                return str(v["id"]), int(v["shrunk_steps"]), round(path.stat().st_mtime - started, 1)
    return None


def check_detection(stdout: str) -> tuple[str, int, float] | None:
    """(property, counterexample steps, seconds of the searches up to it) from ``rmqspec check --config all
    --json``'s one document per configuration; None if none holds a violation or a lasso."""
    spent = 0.0
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        spent += float(doc.get("seconds", 0.0))
        if doc.get("violations"):
            v = doc["violations"][0]
            return str(v["id"]), int(v["steps"]), round(spent, 1)
        if doc.get("lassos"):
            lz = doc["lassos"][0]
            return str(lz["id"]), int(lz["prefix_steps"]) + int(lz["cycle_steps"]), round(spent, 1)
    return None


def _run(argv: list[str], say: Any) -> tuple[int, str, str, float]:
    """Run one CLI command to its end; on Ctrl-C pass the interrupt on, wait for it, and raise KeyboardInterrupt."""
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        say(f"interrupted: {' '.join(argv[-6:])}")
        raise
    return proc.returncode, out, err, round(time.time() - started, 1)


def _error(code: int, err: str) -> str:
    last = next((line for line in reversed(err.splitlines()) if line.strip()), "")
    return f"exit {code}: {last}"


def measure(
    name: str,
    citation: str,
    out: Path,
    campaign_seconds: float | None,
    run_check: bool,
    say: Any,
    rows: list[Row],
    which: str = UNSEEN,
) -> None:
    """Measure variant ``name`` (of the set ``which``, SEEN or UNSEEN) and append its row to ``rows``; on Ctrl-C the
    row so far (a part cut short says ``interrupted``, with what its outputs on disk show) is appended before the
    interrupt goes on."""
    row = Row(name, citation, which)
    try:
        _measure(row, out, campaign_seconds, run_check, say)
    except KeyboardInterrupt:
        part = row.check if row.check.ran or row.campaign.exit_code is not None else row.campaign
        part.ran, part.error = True, "interrupted"
        if part is row.campaign:
            found = campaign_detection(out / name / "campaign", row.started)
            if found is not None:
                part.caught = True
                part.property, part.counterexample_steps, part.seconds_to_detection = found
        rows.append(row)
        raise
    rows.append(row)


def _measure(row: Row, out: Path, campaign_seconds: float | None, run_check: bool, say: Any) -> None:
    name = row.name
    cli = cli_command()
    camp_out, store = out / name / "campaign", out / name / "failures"
    argv = [*cli, "campaign", "--mutation", name, "--out", str(camp_out), "--store", str(store)]
    if campaign_seconds is not None:
        argv += ["--duration", str(campaign_seconds)]
    say(f"{name}: campaign ...")
    row.started = started = time.time()
    code, _, err, seconds = _run(argv, say)
    row.campaign = Part(ran=True, exit_code=code, seconds=seconds)
    if code not in (0, 1):
        row.campaign.error = _error(code, err)
    found = campaign_detection(camp_out, started)
    if found is not None:
        row.campaign.caught = True
        row.campaign.property, row.campaign.counterexample_steps, row.campaign.seconds_to_detection = found
    say(f"{name}: campaign {'caught by ' + str(row.campaign.property) if found else 'did not catch it'} ({seconds} s)")
    if not run_check:
        return
    argv = [
        *cli,
        "check",
        "--config",
        "all",
        "--mutation",
        name,
        "--json",
        "--quiet",
        "--out",
        str(out / name / "check"),
    ]
    say(f"{name}: check --config all ...")
    code, stdout, err, seconds = _run(argv, say)
    row.check = Part(ran=True, exit_code=code, seconds=seconds)
    if code not in (0, 1):
        row.check.error = _error(code, err)
    found = check_detection(stdout)
    if found is not None:
        row.check.caught = True
        row.check.property, row.check.counterexample_steps, row.check.seconds_to_detection = found
    say(f"{name}: check {'caught by ' + str(row.check.property) if found else 'did not catch it'} ({seconds} s)")


def table(rows: list[Row], total: int, totals: dict[str, int] | None = None) -> str:
    """The per-variant lines (each with its set), "caught N of M" per set, and the total. ``totals``: how many
    variants of each set were asked for (default: those of ``rows``)."""
    lines = [f"{'variant':<36}{'set':<8}{'caught by':<11}{'property':<10}{'steps':>6}{'seconds':>9}  campaign / check"]
    for r in rows:
        first = r.first()
        parts = []
        for label, part in ((CAMPAIGN, r.campaign), (CHECK, r.check)):
            if not part.ran:
                parts.append(f"{label}: not run")
            elif part.error:
                parts.append(f"{label}: {part.error}")
            else:
                parts.append(f"{label}: {part.property or '-'}")
        lines.append(
            f"{r.name:<36}{r.set:<8}{r.caught_by or 'not caught':<11}{(first.property if first else '-') or '-':<10}"
            f"{(str(first.counterexample_steps) if first else '-'):>6}"
            f"{(str(first.seconds_to_detection) if first else '-'):>9}  {'; '.join(parts)}"
        )
    for which, summary in per_set(rows, totals).items():
        lines.append(
            f"{which}: caught {summary['caught']} of {summary['of']}"
            + (f" ({summary['measured']} measured)" if summary["measured"] != summary["of"] else "")
        )
    caught = sum(1 for r in rows if r.caught_by)
    lines.append(f"caught {caught} of {total}" + (f" ({len(rows)} measured)" if len(rows) != total else ""))
    return "\n".join(lines)


def per_set(rows: list[Row], totals: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
    """Per set (SEEN, UNSEEN) with a variant asked for: caught, of (asked for) and measured."""
    if totals is None:
        totals = {w: sum(1 for r in rows if r.set == w) for w in SETS}
    return {
        w: {
            "caught": sum(1 for r in rows if r.set == w and r.caught_by),
            "of": totals[w],
            "measured": sum(1 for r in rows if r.set == w),
        }
        for w in SETS
        if totals.get(w, 0)
    }


def document(rows: list[Row], total: int, interrupted: bool, totals: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "variants": [{k: v for k, v in asdict(r).items() if k != "started"} | {"caught_by": r.caught_by} for r in rows],
        "caught": sum(1 for r in rows if r.caught_by),
        "of": total,
        "measured": len(rows),
        "sets": per_set(rows, totals),
        "interrupted": interrupted,
    }


def run_bench_held_out(args: argparse.Namespace) -> int:
    from rmqspec.spec.variants.held_out import HELD_OUT

    names = list(HELD_OUT) if args.names is None else [n.strip() for n in args.names.split(",") if n.strip()]
    unknown = [n for n in names if n not in HELD_OUT]
    if unknown or not names:
        print(
            f"rmqspec: error: --names: unknown {unknown or 'empty list'}; accepted: {', '.join(HELD_OUT)}",
            file=sys.stderr,
        )
        return 2
    if args.unseen:
        seen = [n for n in names if HELD_OUT[n].figures_seen]
        if args.names is not None and seen:
            print(
                f"rmqspec: error: --unseen: {seen} have figures_seen True; accepted with --unseen: "
                + ", ".join(n for n, b in HELD_OUT.items() if not b.figures_seen),
                file=sys.stderr,
            )
            return 2
        names = [n for n in names if not HELD_OUT[n].figures_seen]
        if not names:
            print(
                "rmqspec: error: --unseen: every held-out bug's figures have been seen; a search change needs a new"
                " set written apart from it (docs/held_out.md)",
                file=sys.stderr,
            )
            return 2
    if args.campaign_seconds is not None and args.campaign_seconds <= 0:
        print("rmqspec: error: --campaign-seconds: must be a positive number of seconds", file=sys.stderr)
        return 2
    out = Path(args.out or time.strftime("rmqspec-out/held-out-%Y%m%d-%H%M%S"))

    def say(line: str) -> None:
        print(f"... {line}", file=sys.stderr, flush=True)

    sets = {name: SEEN if HELD_OUT[name].figures_seen else UNSEEN for name in names}
    totals = {w: sum(1 for n in names if sets[n] == w) for w in SETS}
    rows: list[Row] = []
    interrupted = False
    try:
        for name in names:
            measure(name, HELD_OUT[name].citation, out, args.campaign_seconds, not args.no_check, say, rows, sets[name])
    except KeyboardInterrupt:
        interrupted = True
    if args.json:
        print(json.dumps(document(rows, len(names), interrupted, totals), indent=2))
    else:
        print(table(rows, len(names), totals))
        print(f"outputs in {out}")
    if interrupted:
        print("rmqspec: interrupted; the table holds the variants measured before", file=sys.stderr)
        return 130
    return 0


def add_parser(sub: Any) -> None:
    """``bench-held-out`` in the CLI's subcommands."""
    p = sub.add_parser(
        "bench-held-out",
        help="measure the default campaign and check on the held-out real bugs (docs/held_out.md): caught N of M",
        description="For each held-out variant, run 'rmqspec campaign --mutation NAME' with its default budget, then "
        "'rmqspec check --config all --mutation NAME', as subprocesses; report which part caught it, the first "
        "property, the counterexample's length and the time to detection, with each variant's set (seen: its "
        "figures have been used by search work; unseen) and 'caught N of M' per set. exit codes: 0 measured "
        "(whatever the catch rate), 2 bad input, 130 interrupted.",
    )
    p.add_argument("--names", metavar="A,B", help="only these held-out variants (default all)")
    p.add_argument(
        "--campaign-seconds",
        type=float,
        metavar="S",
        help="shorten each campaign to S seconds (default: the campaign's own 120 s; for tests only)",
    )
    p.add_argument(
        "--unseen",
        action="store_true",
        help="measure only the held-out bugs whose catch figures no search work has seen (figures_seen False); the "
        "only ones a search change may be judged on",
    )
    p.add_argument("--no-check", action="store_true", help="run only the campaign part")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", metavar="DIR", help="where the runs' outputs go (default rmqspec-out/held-out-<time>)")
    p.set_defaults(func=run_bench_held_out)
