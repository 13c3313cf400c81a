"""Claim records of other machines (verified/*.json) in the ledger and headline; `make verified`.

Fast: a tiny book in a temporary folder (two pages, one chapter) whose records the real
recorder makes; the records of other machines are derived from them (another CPU name,
another torch, other discrepancies, a page changed or removed since). Nothing here builds
the site, and nothing is written into the repository.
"""

import codeop
import copy
import hashlib
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, VENV

sys.path.insert(0, str(ROOT / "_ext"))
import claim_files  # noqa: E402
import recorder  # noqa: E402
import report_pages  # noqa: E402
import rerun  # noqa: E402

PAGES = {
    "ch/plot_01_a": ("import torch\n"
                     "x = torch.arange(4.0)\n"
                     "torch.testing.assert_close(x + 1e-7, x)\n"  # line 3
                     "for i in range(3):\n"
                     "    assert i < 3\n"  # line 5: 3 checks
                     "if x.is_cuda:\n"
                     "    assert x.sum() == 6\n"),  # line 7: not run on a CPU
    "ch/plot_02_b": ("import torch\n"
                     "torch.testing.assert_close(torch.ones(2), torch.ones(2))\n"),  # line 2
}
DAY = "2026-11-20"


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A book with two pages, both run with the recorder; returns (root, {page: record})."""
    root = tmp_path.resolve() / "book"
    monkeypatch.setattr(recorder, "ROOT", root)
    made = {}
    for page, text in PAGES.items():
        src = root / "gallery" / f"{page}.py"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        recorder.start_recording(src)
        try:  # compiled as sphinx-gallery does: codeop.Compile
            exec(codeop.Compile()(text, str(src), "exec"), {})
        finally:
            recorder.stop_recording()
        made[page] = json.loads((root / "generated" / f"{page}.claims.json").read_text())
    return root, made


def other_machine(made, name, torch, edit=lambda page, record: None):
    """A record set of another CPU, derived from this machine's records; ``edit`` changes one."""
    out = []
    for page, record in made.items():
        r = copy.deepcopy(record)
        r.update(device_name=name, torch=torch, verified_at=f"{DAY} 08:00 UTC")
        edit(page, r)
        out.append(r)
    return {"format": 1, "device": "cpu", "device_name": name, "torch": torch,
            "python": "3.12.0", "exported_at": f"{DAY} 09:00 UTC", "records": out}


def commit(root, data):
    name = claim_files.file_name(data["device"], data["device_name"], data["torch"])
    path = root / "verified" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))


def claim(record, line):
    return next(c for c in record["claims"] if c["line"] == line)


def cells(ledger):
    """``{(page, line): [(status, text) per record-set column]}`` from the ledger's tables."""
    out = {}
    for page, line, tds in re.findall(r'<tr class="claim" data-page="([^"]+)"[^>]*? '
                                      r'data-line="(\d+)"[^>]*>(.*?)</tr>', ledger):
        out[page, int(line)] = re.findall(r'<td class="set [^ "]+ ([a-z-]+)" title="[^"]*">'
                                          r"([^<]*)</td>", tds)
    return out


def render(root):
    """What the build writes: (record sets, headline, ledger markdown)."""
    current = claim_files.current_sources(root)
    sets = claim_files.merge(claim_files.load_claims(root), claim_files.load_verified(root),
                             current)
    return sets, report_pages.headline(sets, current), report_pages.ledger_markdown(sets, current)


def test_a_record_carries_its_source_hash_device_torch_python_and_date(book):
    root, made = book
    for page, record in made.items():
        text = (root / "gallery" / f"{page}.py").read_text()
        assert record["source_sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert record["source_sha256"] == claim_files.current_sources(root)[page]
        assert {"device", "device_name", "torch", "python", "verified_at"} <= set(record)


def test_two_other_cpus_a_stale_record_and_a_removed_page(book):
    root, made = book

    def faster(page, r):  # another CPU: other discrepancies, the same claims held
        line, max_abs = (3, 2.5e-7) if page == "ch/plot_01_a" else (2, 1e-9)
        claim(r, line)["max_abs"] = max_abs

    def older(page, r):  # made before page b changed; failed a claim; knew a page removed since
        if page == "ch/plot_01_a":
            claim(r, 3).update(passed=False, max_abs=0.5)
        else:
            r["source_sha256"] = hashlib.sha256(b"page b as it was").hexdigest()

    old = other_machine(made, "old-cpu", "2.5.1", older)
    gone = copy.deepcopy(old["records"][1])
    gone.update(page="ch/plot_03_gone", source="gallery/ch/plot_03_gone.py")
    old["records"].append(gone)
    commit(root, other_machine(made, "other-cpu", "2.9.0", faster))
    commit(root, old)

    sets, headline, ledger = render(root)
    assert [s["origin"] for s in sets] == ["this build", "verified/cpu-old-cpu-torch2.5.1.json",
                                           "verified/cpu-other-cpu-torch2.9.0.json"]
    assert sorted(sets[1]["records"]) == ["ch/plot_01_a", "ch/plot_02_b"]  # gone: dropped
    assert (sets[1]["current"], sets[1]["stale"]) == (["ch/plot_01_a"], ["ch/plot_02_b"])

    a, b = made["ch/plot_01_a"], made["ch/plot_02_b"]
    this = f"cpu ({a['device_name']})"
    assert headline == (
        f"**3 claims** (5 checks) on 2 pages verified on **{this}** with "
        f"**torch {a['torch']}** by this build, last on {max(a['verified_at'], b['verified_at'])}"
        f"; 1 of 2 pages also verified on **cpu (old-cpu)** with **torch 2.5.1** on {DAY}"
        f"; 2 of 2 pages also verified on **cpu (other-cpu)** with **torch 2.9.0** on {DAY}"
        "; 1 record stale.")

    build_max = f"{claim(a, 3)['max_abs']:.1e}"
    assert cells(ledger) == {
        ("ch/plot_01_a", 3): [("held", build_max), ("failed", "failed (5.0e-01)"),
                              ("held", "2.5e-07")],
        ("ch/plot_01_a", 5): [("held", "held ×3")] * 3,
        ("ch/plot_01_a", 7): [("not-run", "not run")] * 3,
        ("ch/plot_02_b", 2): [("held", "0.0e+00"), ("stale", "stale"), ("held", "1.0e-09")],
    }
    assert "plot_03_gone" not in ledger
    # One table for the book, each row naming its chapter; a class and data-* attributes
    # per record-set column.
    assert ledger.count('<table class="docutils align-default ledger">') == 1
    assert 'data-chapter="ch"' in ledger
    assert ('<th class="set set-cpu-other-cpu-torch2-9-0" data-device="cpu" '
            'data-device-name="other-cpu" data-torch="2.9.0" '
            'data-origin="verified/cpu-other-cpu-torch2.9.0.json">') in ledger
    # The record sets' table: where each column comes from, how many pages are current.
    assert re.search(r"<td>verified/cpu-old-cpu-torch2\.5\.1\.json</td><td>[^<]*</td>"
                     r"<td>1 of 2</td><td>1</td>", ledger)


def test_the_ledger_says_whether_a_claim_failed_and_links_what_did(book):
    """Counts that reconcile with the headline, "No claim failed in this build." when none
    did, else how many failed and a link to them (the filter in the address), also for a
    committed record set."""
    root, made = book

    def counts(ledger):
        m = re.search(r"The table lists <strong>(\d+) claims</strong>: <strong>(\d+)</strong> "
                      r"held in this build \(the headline's count\), <strong>(\d+)</strong> "
                      r'<a href="\?status=not-run">did not run on this machine</a>', ledger)
        return tuple(map(int, m.groups()))

    _, headline, ledger = render(root)
    assert headline.startswith("**3 claims**") and counts(ledger) == (4, 3, 1)
    assert "<strong>No claim failed in this build.</strong>" in ledger

    def fail_line_3(page, r):
        if page == "ch/plot_01_a":
            claim(r, 3).update(passed=False, max_abs=0.5)

    commit(root, other_machine(made, "old-cpu", "2.5.1", fail_line_3))
    _, _, ledger = render(root)
    assert "<strong>No claim failed in this build.</strong> 1 claim failed in the record set " \
        "verified/cpu-old-cpu-torch2.5.1.json (<a href=\"?status=failed&amp;" \
        'set=set-cpu-old-cpu-torch2-5-1">show them</a>).' in ledger

    path = root / "generated" / "ch" / "plot_02_b.claims.json"  # this build's own, failed
    record = json.loads(path.read_text())
    claim(record, 2)["passed"] = False
    path.write_text(json.dumps(record))
    _, headline, ledger = render(root)
    assert "No claim failed" not in ledger
    assert headline.startswith("**2 claims**") and counts(ledger) == (4, 2, 1)
    assert ', and <strong>1</strong> <a href="?status=failed">failed</a>.' in ledger
    assert '<strong>1 claim failed in this build</strong>: <a href="?status=failed">show ' \
        "them</a>." in ledger
    assert cells(ledger)["ch/plot_02_b", 2][0] == ("failed", "failed")


def test_a_wholly_stale_record_set_is_not_named_as_verified(book):
    root, made = book
    commit(root, other_machine(made, "old-cpu", "2.5.1",
                               lambda page, r: r.update(source_sha256="0" * 64)))
    _, headline, ledger = render(root)
    assert "also verified" not in headline and headline.endswith("; 2 records stale.")
    assert {tuple(c[1]) for c in cells(ledger).values()} == {("stale", "stale")}


def test_a_committed_set_of_this_builds_machine_is_left_out(book):
    root, made = book
    a = made["ch/plot_01_a"]
    commit(root, other_machine(made, a["device_name"], a["torch"]))
    sets, headline, _ = render(root)
    assert [s["origin"] for s in sets] == ["this build"]
    assert "also verified" not in headline


def test_this_builds_own_record_of_a_changed_page_is_stale_and_runs_again(book, monkeypatch):
    """A page edited after it ran (e.g. a PAGE=... build of another page): its record is stale
    until the page runs again, and the next build runs it even if its md5 record matches."""
    root, _ = book
    page = root / "gallery" / "ch" / "plot_02_b.py"
    page.write_text(page.read_text() + "# edited\n")
    sets, headline, ledger = render(root)
    assert sets[0]["stale"] == ["ch/plot_02_b"]
    assert headline.startswith("**2 claims** (4 checks) on 1 page verified")
    assert headline.endswith("; 1 record stale.")
    assert cells(ledger)["ch/plot_02_b", 2] == [("stale", "stale")]

    md5 = {p: root / "generated" / "ch" / f"{p}.py.md5" for p in ("plot_01_a", "plot_02_b")}
    for path in md5.values():
        path.write_text("an md5 that sphinx-gallery would find current")
    monkeypatch.setattr(rerun, "ROOT", root)
    rerun.rerun_pages_without_a_current_record(None, None)
    assert md5["plot_01_a"].is_file() and not md5["plot_02_b"].is_file()


def test_a_record_set_not_made_by_make_verified_fails_loudly(book):
    root, _ = book
    (root / "verified").mkdir()
    (root / "verified" / "hand-made.json").write_text('{"records": []}')
    with pytest.raises(ValueError, match="verified/hand-made.json is not a record set"):
        claim_files.load_verified(root)


def test_file_names_are_safe():
    assert (claim_files.file_name("cuda", "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
            == "cuda-NVIDIA-H100-80GB-HBM3-torch2.11.0+cu130.json")
    assert claim_files.file_name("cpu", "x86_64", "2.13.0") == "cpu-x86_64-torch2.13.0.json"
    assert claim_files.file_name("cpu", "a/b: c", "2") == "cpu-a-b-c-torch2.json"


# --------------------------------------------------------------------------------------------
# make verified
def make_verified(root):
    """`make verified` in the tiny book, with the Makefile and claim_files.py of the repository."""
    for name in ("Makefile", "requirements.txt", "_ext/claim_files.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    for folder in ("chapters", "_static", "verified"):
        (root / folder).mkdir(exist_ok=True)
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(root), "verified",
                           f"VENV={VENV}"], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_make_verified_refuses_an_incomplete_stale_or_failed_build(book):
    root, _ = book
    a = root / "gallery" / "ch" / "plot_01_a.py"
    a.write_text(a.read_text() + "# edited since it ran\n")
    (root / "gallery" / "ch" / "plot_04_new.py").write_text("assert True\n")
    b = root / "generated" / "ch" / "plot_02_b.claims.json"
    record = json.loads(b.read_text())
    record["claims"][0]["passed"] = False
    b.write_text(json.dumps(record))
    rc, log = make_verified(root)
    assert rc != 0, log
    assert "ch/plot_01_a: stale record" in log
    assert "ch/plot_04_new: no record" in log
    assert "ch/plot_02_b, line 2: failed" in log
    assert not list((root / "verified").glob("*.json"))


def test_make_verified_writes_one_file_with_every_record(book):
    root, made = book
    rc, log = make_verified(root)
    assert rc == 0, log
    a = made["ch/plot_01_a"]
    path = root / "verified" / claim_files.file_name("cpu", a["device_name"], a["torch"])
    assert f"wrote verified/{path.name}: 3 claims (5 checks) on 2 pages" in log
    data = json.loads(path.read_text())
    assert {k: data[k] for k in ("format", "device", "device_name", "torch", "python")} == {
        "format": 1, "device": "cpu", "device_name": a["device_name"], "torch": a["torch"],
        "python": a["python"]}
    assert data["records"] == list(made.values())
    # One claim per line, so that a record set made again diffs line by line.
    assert sum(1 for line in path.read_text().splitlines() if '"line": ' in line) == 4
    # Merged with this build's own records (the same machine), it adds no column.
    assert [s["origin"] for s in render(root)[0]] == ["this build"]
