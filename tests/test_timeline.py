"""The counterexample picture (``rmqspec.timeline``): what it shows, where it is written, and how a real
browser draws it."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from xml.etree import ElementTree

import pytest

from rmqspec.cli import main
from rmqspec.properties.explore import Counterexample, explore, shrink
from rmqspec.properties.serialize import action_from_json, config_from_json
from rmqspec.spec.actions import Action, Start
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.property_types import Violation
from rmqspec.spec.state import history_list
from rmqspec.timeline import (
    MAX_DRAWN_STEPS,
    STEPS_PER_BAND,
    TimelineError,
    render_timeline,
    render_timeline_html,
)

SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parent.parent


def _planted(mutation: str, shrunk: bool = True) -> Counterexample:
    found = explore(Config(mutations=frozenset({mutation})), 40, 300).counterexamples
    assert found, f"no walk found the planted bug {mutation}"
    return shrink(found[0]) if shrunk else found[0]


def _parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg.encode("utf-8"))


def _texts(root: ElementTree.Element, css: str | None = None) -> list[str]:
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text") if css is None or t.get("class") == css]


def _render(c: Counterexample) -> str:
    return render_timeline(c.config, c.actions, c.violations, walk_steps=c.walk_steps)


def test_the_picture_is_well_formed_svg_that_needs_nothing_outside_itself() -> None:
    root = _parse(_render(_planted("commit_past_cached")))
    assert root.tag == f"{SVG}svg" and float(root.get("width", 0)) > 0 and float(root.get("height", 0)) > 0
    assert not list(root.iter(f"{SVG}script")) and not list(root.iter(f"{SVG}image"))
    assert not any(k.endswith("href") for e in root.iter() for k in e.attrib)


def test_the_picture_has_one_lane_per_consumer_plus_the_broker() -> None:
    c = _planted("commit_past_cached")
    lanes = {g.get("data-lane") for g in _parse(_render(c)).iter(f"{SVG}g") if g.get("class") == "lane"}
    assert lanes == {f"c{i}" for i in range(c.config.consumers)} | {"broker"}


def test_a_configuration_with_a_slave_adds_its_lane() -> None:
    config = Config(slave=True, consumers=3)
    root = _parse(render_timeline(config, [Start(0)], []))
    lanes = {g.get("data-lane") for g in root.iter(f"{SVG}g") if g.get("class") == "lane"}
    assert lanes == {"c0", "c1", "c2", "broker", "slave"}


def test_the_picture_labels_the_breaking_property_its_rules_and_its_step() -> None:
    c = _planted("commit_past_cached")
    v = c.violations[0]
    texts = _texts(_parse(_render(c)))
    header = next(t for t in texts if t.startswith("broke at"))
    assert header.startswith(f"broke at step {len(c.actions)}: {v.id} {v.name}: {v.detail}")
    assert "(rules R" in header
    assert f"{v.id} breaks here" in texts


def test_the_picture_holds_each_commit_offset_as_text() -> None:
    c = _planted("update_offset_stores_one_less")
    model = Model(c.config)
    state = model.initial()
    for action in c.actions:
        state = model.step(state, action)
    sent = sorted(e.offset for e in history_list(state) if e.kind == "commit-sent")
    assert sent, "the run sends no commit: pick another planted bug"
    root = _parse(_render(c))
    drawn = sorted(int(o) for t in _texts(root, "commit") for o in t.split(","))
    assert drawn == sent
    # each commit's cause is in its hover title
    titles = ["".join(t.itertext()) for t in root.iter(f"{SVG}title")]
    assert sum("commit sent: offset" in t for t in titles) == len(sent)


def test_a_hand_written_run_that_breaks_a_property_renders() -> None:
    stored = json.loads((ROOT / "failures" / "INV-4-cf2873515b.json").read_text(encoding="utf-8"))
    config = config_from_json(stored["config"])
    actions: list[Action] = [action_from_json(a) for a in stored["actions"]]
    violation = Violation(stored["id"], stored["name"], stored["detail"])
    texts = _texts(_parse(render_timeline(config, actions, [violation], title="INV-4 by hand")))
    assert texts[0] == "INV-4 by hand"
    assert any(t.startswith(f"broke at step {len(actions)}: INV-4 increase_only_never_lowers") for t in texts)


def test_a_long_run_wraps_into_bands_of_steps() -> None:
    c = _planted("commit_past_cached", shrunk=False)
    assert STEPS_PER_BAND < len(c.actions) <= MAX_DRAWN_STEPS
    root = _parse(_render(c))
    bands = [g for g in root.iter(f"{SVG}g") if g.get("class") == "band"]
    assert len(bands) == -(-len(c.actions) // STEPS_PER_BAND)
    assert float(root.get("width", 0)) <= 1600


def test_a_liveness_counterexample_marks_its_quiescence_and_leaves_out_the_middle_of_a_long_one() -> None:
    config = Config(consumers=2, queues=2, mode="BROADCASTING", mutations=frozenset({"persist_timer_stops"}))
    found = explore(config, 20, 60, liveness=True, watch=frozenset({"LIV-2"})).counterexamples
    assert found and found[0].walk_steps is not None
    c = found[0]
    texts = _texts(_parse(_render(c)))
    assert "quiescence begins" in texts
    assert "memory | offsets.json" in texts  # BROADCASTING: each consumer's file beside its memory offset
    assert any(t.startswith("broke at the end state: LIV-2") for t in texts)
    if len(c.actions) > MAX_DRAWN_STEPS:
        assert any("not drawn (their state carries over)" in t for t in texts)


def test_an_action_that_is_not_enabled_is_named_with_its_step() -> None:
    with pytest.raises(TimelineError, match=r"step 2: Start\(client=0\) is not enabled"):
        render_timeline(Config(), [Start(0), Start(0)], [])


def test_the_html_page_embeds_the_picture_and_the_step_table() -> None:
    c = _planted("commit_past_cached")
    page = render_timeline_html(c.config, c.actions, c.violations)
    assert page.startswith("<!DOCTYPE html>") and "<?xml" not in page and page.count("<svg ") == 1
    assert f"{len(c.actions):>5}" in page and repr(c.actions[-1]).replace("'", "&#x27;") in page


def test_run_writes_the_counterexample_picture_beside_its_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"consumers": 2, "queues": 4}), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", "--config", str(config), "--mutation", "commit_past_cached", "--walks", "40", "--steps", "300"]
    code = main([*argv, "--no-liveness", "--out", str(out)])
    assert code == 1
    picture = out / "counterexample.svg"
    assert f"wrote {picture}" in capsys.readouterr().out
    assert "breaks here" in " ".join(_texts(_parse(picture.read_text(encoding="utf-8"))))


def test_the_failure_store_writes_a_picture_beside_each_failure(tmp_path: Path) -> None:
    from rmqspec.campaign.runner import save_failures

    record = json.loads((ROOT / "failures" / "INV-9-aeeec05651.json").read_text(encoding="utf-8"))
    [path] = save_failures({record["signature"]: record}, tmp_path)
    picture = path.with_suffix(".svg")
    texts = _texts(_parse(picture.read_text(encoding="utf-8")))
    assert texts[0].startswith(f"Failure {record['signature']}")
    assert any(t.startswith("broke at") and "INV-9" in t for t in texts)


# --- a real browser -------------------------------------------------------------------------------------


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of (R, G, B[, A]) bytes of an 8-bit, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, "an 8-bit RGB(A) PNG expected"
    bpp = 3 if colour == 2 else 4
    raw, stride, rows = zlib.decompress(idat), width * bpp, []
    prior = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prior[i], prior[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        prior = line
    return width, height, rows


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_chromium_draws_the_picture_with_its_colours(tmp_path: Path) -> None:
    svg = tmp_path / "counterexample.svg"
    svg.write_text(_render(_planted("update_offset_stores_one_less")), encoding="utf-8")
    png = tmp_path / "counterexample.png"
    profile = tempfile.mkdtemp(dir=tmp_path)
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        "--window-size=1600,900",
        svg.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, timeout=120, check=False)
    shutil.rmtree(profile, ignore_errors=True)
    assert png.exists(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr.decode()[-500:]}"
    width, height, rows = _png_pixels(png.read_bytes())
    assert (width, height) == (1600, 900)
    bpp = len(rows[0]) // width
    colours = {row[i : i + 3] for row in rows[::3] for i in range(0, len(row), bpp * 3)}
    assert len(colours) > 50, "the screenshot is nearly one colour: the picture was not drawn"
    # the red of the breaking step's line and tag (#d50000) and the green of a commit (#1b7837) are drawn
    assert bytes((0xD5, 0, 0)) in colours
    assert bytes((0x1B, 0x78, 0x37)) in colours


def test_a_failure_whose_property_id_holds_a_slash_is_stored_in_the_store_itself(tmp_path: Path) -> None:
    # LIV-3/4 is one liveness check's id: its failures went to "<store>/LIV-3/4-<hash>.json", a directory that does not
    # exist, and the campaign stopped with a write error
    from rmqspec.campaign.runner import failure_file_stem, save_failures

    assert failure_file_stem("LIV-3/4:9ca17f2b70") == "LIV-3-4-9ca17f2b70"
    record = json.loads((ROOT / "failures" / "LIV-2-921497d7c3.json").read_text(encoding="utf-8"))
    signature = "LIV-3/4:" + record["signature"].split(":", 1)[1]
    [path] = save_failures({signature: {**record, "signature": signature}}, tmp_path)
    assert path.parent == tmp_path and path.name.startswith("LIV-3-4-")
    assert path.with_suffix(".svg").exists() and path.with_name(path.stem + ".trace.jsonl").exists()
