"""The claim records: this build's, the committed ones in verified/, and how they are merged.

A claim record is one page's JSON, written by ``recorder.py`` while the page ran, to
``generated/<chapter>/<page>.claims.json``: ``page``, ``source``, ``source_sha256`` (of the
text that ran), ``torch``, ``python``, ``device``, ``device_name``, ``threads``,
``verified_at``, ``recorder`` (``RECORDER``: what the recorder counted), ``claims`` (one per
claim, as ``claims.py`` defines it) and ``values`` (the page's module-level numbers when it
ended, which prose quotes with the ``:measured:`` role).
``make verified`` copies the records of a complete build into one committed file,
``verified/<device>-<device name>-torch<version>.json`` (a *record set*):
``{"format": 1, "device", "device_name", "torch", "python", "exported_at", "records"}``.
A record is *current* when its ``source_sha256`` is that of the page's source now.

    python _ext/claim_files.py export [FOLDER]    this build's records -> FOLDER (make verified)
"""

import datetime
import hashlib
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1
# The recorder's own version: a record an older recorder made runs again (rerun.py). 2: the
# ``raises`` claims (try / except / else: raise AssertionError) and the page's ``values``.
RECORDER = 2
THIS_BUILD = "this build"  # the origin of the build's own records; a file name for the others


def source_hash(text):
    """sha256 of a page's source text, as hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def current_sources(root=ROOT):
    """``{page: source_sha256}`` of every gallery page that exists now (``chapter/plot_NN_x``)."""
    return {f"{p.parent.name}/{p.stem}": source_hash(p.read_text())
            for p in sorted(Path(root).glob("gallery/*/plot_*.py"))}


def is_current(record, current):
    return record.get("source_sha256") is not None and \
        current.get(record["page"]) == record["source_sha256"]


def machine(record):
    """What a record set is one of: ``(device, device name, torch)``."""
    return record["device"], record["device_name"], record["torch"]


def load_claims(root=ROOT):
    """This build's records of every page that still exists, sorted by chapter and page."""
    records = []
    for path in sorted((Path(root) / "generated").glob("*/*.claims.json")):
        record = json.loads(path.read_text())
        if (Path(root) / record["source"]).is_file():
            records.append(record)
    return records


def load_verified(root=ROOT):
    """The committed record sets, ``verified/*.json``, each with its file name; in name order."""
    sets = []
    for path in sorted((Path(root) / "verified").glob("*.json")):
        data = json.loads(path.read_text())
        missing = {"format", "device", "device_name", "torch", "records"} - set(data)
        if missing or data["format"] != FORMAT:
            raise ValueError(f"{path.relative_to(root)} is not a record set of format {FORMAT} "
                             f"(missing {', '.join(sorted(missing)) or 'nothing'}): make it "
                             "again with `make verified`")
        sets.append({**data, "file": f"verified/{path.name}"})
    return sets


def merge(build_records, verified_sets, current):
    """This build's records and the committed sets, as record sets ready for the ledger.

    Returns one dict per set, the build's first (one per machine, normally one), then the
    committed sets in file order, leaving out a committed set of the same machine as this
    build (the build verified it again). Each has ``machine``, ``origin`` (``this build`` or
    its file), ``records`` ``{page: record}`` of the pages that exist now (records of removed
    pages are dropped), and ``current``/``stale``: the pages whose record is current or not.
    """
    build = {}
    for r in build_records:
        build.setdefault(machine(r), []).append(r)
    sets = [(m, THIS_BUILD, rs) for m, rs in build.items()]
    sets += [((s["device"], s["device_name"], s["torch"]), s["file"], s["records"])
             for s in verified_sets if (s["device"], s["device_name"], s["torch"]) not in build]
    out = []
    for m, origin, rs in sets:
        records = {r["page"]: r for r in rs if r["page"] in current}
        out.append({"machine": m, "origin": origin, "records": records,
                    "current": [p for p, r in records.items() if is_current(r, current)],
                    "stale": [p for p, r in records.items() if not is_current(r, current)]})
    return out


# --------------------------------------------------------------------------------------------
# make verified
class ExportError(Exception):
    pass


def file_name(device, device_name, torch):
    """A safe file name for a record set: ``cuda-NVIDIA-H100-80GB-HBM3-torch2.11.0+cu130.json``."""
    name = re.sub(r"[^A-Za-z0-9.+_-]+", "-", f"{device}-{device_name}-torch{torch}")
    return name.strip("-.") + ".json"


def export(root=ROOT, folder=None):
    """Write this build's records to one record set in ``folder``; its path.

    Refuses (ExportError) unless the last build is complete and current: every gallery page has
    a record, each of its source as it is now, every claim held, all from one machine.
    """
    root = Path(root)
    folder = root / "verified" if folder is None else Path(folder)
    current = current_sources(root)
    records = {r["page"]: r for r in load_claims(root)}
    problems = []
    for page in current:
        record = records.get(page)
        if record is None:
            problems.append(f"{page}: no record (the page has not run)")
        elif not is_current(record, current):
            problems.append(f"{page}: stale record (the page changed since it ran)")
        else:
            problems += [f"{page}, line {c['line']}: failed: {c['code']}"
                         for c in record["claims"] if not c["passed"]]
    machines = sorted({machine(r) for r in records.values()})
    if len(machines) > 1:
        problems.append("records of more than one machine: " +
                        "; ".join(f"{d} ({n}) with torch {t}" for d, n, t in machines))
    if problems:
        raise ExportError("the last build is incomplete, stale or failed; run `make html` "
                          "(not PAGE=...) until it succeeds, then `make verified` again:\n  " +
                          "\n  ".join(problems))
    if not current:
        raise ExportError("no gallery page found")
    ordered = [records[p] for p in current]
    first = ordered[0]
    head = {"format": FORMAT, "device": first["device"], "device_name": first["device_name"],
            "torch": first["torch"], "python": first["python"],
            "exported_at": _now()}
    path = folder / file_name(first["device"], first["device_name"], first["torch"])
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(_dumps(head, ordered))
    return path


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _dumps(head, records):
    """JSON with one claim per line: readable diffs when a record set is made again."""
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "records": [')
    for i, record in enumerate(records):
        fields = {k: v for k, v in record.items() if k != "claims"}
        lines.append("  " + json.dumps(fields)[:-1] + ', "claims": [')
        claims = record["claims"]
        lines += [f"   {json.dumps(c)}{',' if j < len(claims) - 1 else ''}"
                  for j, c in enumerate(claims)]
        lines.append("  ]}" + ("," if i < len(records) - 1 else ""))
    return "\n".join(lines + [" ]", "}", ""])


def main(argv):
    if len(argv) not in (1, 2) or argv[0] != "export":
        sys.exit("usage: python _ext/claim_files.py export [FOLDER]")
    try:
        path = Path(os.path.relpath(export(ROOT, argv[1] if len(argv) == 2 else None)))
    except ExportError as e:
        sys.exit(f"make verified: {e}")
    data = json.loads(path.read_text())
    claims = [c for r in data["records"] for c in r["claims"] if c["checks"] > 0]
    print(f"wrote {path}: {len(claims)} claims ({sum(c['checks'] for c in claims)} checks) on "
          f"{len(data['records'])} pages, {data['device']} ({data['device_name']}), "
          f"torch {data['torch']}. Commit it to show these in the proof ledger.")


if __name__ == "__main__":
    main(sys.argv[1:])
