"""Measure the build on this machine: `make bench` (or `.venv/bin/python tools/bench.py`).

In a temporary copy of the sources, through `make html` as a reader runs it: a clean build, the
sum of the pages' own execution times (sphinx-gallery's records), a no-op rebuild, a rebuild
after editing a chapter's prose and one after editing one page, each with the number of pages it
executed, plus peak memory (all build processes together, sampled from /proc on Linux).

The clean build is split into its phases by the stamps the build writes (``_ext/book.py``:
``_build/phases.json``): start-up (make, Python, Sphinx and the extensions, before the gallery),
the pages (sphinx-gallery running them in its workers) and the rest (Sphinx reading and writing
every page, the ledger). The overhead outside the pages is start-up plus the rest; inside the
pages' phase, what the workers spend beyond the pages' own time (imports, waiting for the last
page) is its own line. A projection scales the per-page phases to ``--project`` pages at
today's mean cost per page (start-up stays).

Prints one table, then the slowest pages of the clean build. Not a test: timings depend on the
machine and its load, so nothing asserts on them.

    --repeat N   median of N runs of every step
    --jobs N     worker processes (the Makefile's JOBS; default: its own choice)
    --slowest N  how many of the slowest pages to list
    --project N  the book's size to project the clean build to (default 64 pages)
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.book_copy import (  # noqa: E402
    GALLERY_PAGES,
    ROOT,
    build_env,
    copy_sources,
    make_command,
)


class TreeMemory:
    """Peak of the summed resident memory of a process and all its descendants (Linux /proc)."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.1):
            children, rss = {}, {}
            for entry in Path("/proc").iterdir():
                try:
                    stat = (entry / "stat").read_text()
                    fields = stat[stat.rindex(")") + 2:].split()
                    children.setdefault(int(fields[1]), []).append(int(entry.name))
                    rss[int(entry.name)] = int(fields[21]) * page
                except (ValueError, OSError):
                    continue
            tree, todo = [], [self.pid]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo += children.get(pid, [])
            self.peak = max(self.peak, sum(rss.get(pid, 0) for pid in tree))

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def timed_make(src, jobs):
    cmd = make_command(src, *([f"JOBS={jobs}"] if jobs else []))
    (src / "_build" / "phases.json").unlink(missing_ok=True)
    start, clock = time.perf_counter(), time.time()
    proc = subprocess.Popen(cmd, env=build_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    memory = TreeMemory(proc.pid) if Path("/proc/self/stat").exists() else None
    log = proc.communicate()[0]
    seconds = time.perf_counter() - start
    peak = memory.stop() if memory else 0
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{log[-3000:]}")
    executed = re.search(r"executed (\d+) out of", log)
    return seconds, int(executed.group(1)) if executed else 0, peak, phases(src, clock, seconds)


def phases(src, start, seconds):
    """Seconds of start-up, pages and the rest, from the stamps of _build/phases.json."""
    path = src / "_build" / "phases.json"
    if not path.is_file():  # a no-op rebuild does not start Sphinx
        return None
    stamp = json.loads(path.read_text())
    return {"start-up": stamp["pages start"] - start,
            "pages": stamp["pages done"] - stamp["pages start"],
            "the rest": start + seconds - stamp["pages done"]}


def page_seconds(src):
    """Each page's own execution time in the build (sphinx-gallery's records), by page."""
    return {f"{p.parent.name}/{p.name.removesuffix('.cost.json')}":
            json.loads(p.read_text())["time"] for p in src.glob("generated/*/*.cost.json")}


def append(path, text):
    path.write_text(path.read_text() + text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per step (median reported)")
    parser.add_argument("--jobs", type=int, default=0, help="JOBS for make (0: the Makefile's)")
    parser.add_argument("--page", default=str(GALLERY_PAGES[0].relative_to(ROOT)),
                        help="the page to edit for the one-page rebuild, relative to the repo")
    parser.add_argument("--slowest", type=int, default=8,
                        help="how many of the slowest pages to list")
    parser.add_argument("--project", type=int, default=64,
                        help="the number of pages to project the clean build to")
    args = parser.parse_args()

    steps = ["clean build", "no-op rebuild", "prose edited", "one page edited"]
    wall = {step: [] for step in steps}
    pages, executed, peak, split = [], {}, 0, []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            src = copy_sources(Path(tmp) / "src")
            edits = {"clean build": None, "no-op rebuild": None,
                     "prose edited": (src / "chapters" / "normalization.rst", "\n.. edited\n"),
                     "one page edited": (src / args.page, "\n# edited by tools/bench.py\n")}
            for step in steps:
                if edits[step]:
                    append(*edits[step])
                seconds, executed[step], step_peak, step_phases = timed_make(src, args.jobs)
                wall[step].append(seconds)
                peak = max(peak, step_peak)
                if step == "clean build":
                    pages.append(page_seconds(src))
                    split.append(step_phases)
    if not peak:  # no /proc: the largest single process instead
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024

    median = {step: statistics.median(v) for step, v in wall.items()}
    page_median = {page: statistics.median(run[page] for run in pages) for page in pages[0]}
    clean, own = median["clean build"], statistics.median(sum(run.values()) for run in pages)
    jobs = args.jobs or subprocess.run(
        ["make", "-s", "-C", str(ROOT), "--eval=print-jobs: ; @echo $(JOBS)", "print-jobs"],
        capture_output=True, text=True).stdout.strip()
    print(f"\nBuild benchmark: {len(GALLERY_PAGES)} gallery pages, JOBS={jobs}, "
          f"{os.cpu_count()} cores, median of {args.repeat} run(s)\n")
    print(f"{'step':22s} {'wall (s)':>9s} {'pages run':>10s}   note")
    part = {name: statistics.median(s[name] for s in split) for name in split[0]}
    n = len(GALLERY_PAGES)
    print(f"{'clean build':22s} {clean:9.1f} {executed['clean build']:10d}   "
          f"at most 60 s on 2 cores")
    print(f"{'  start-up':22s} {part['start-up']:9.1f} {'':10s}   "
          "make, Python, Sphinx and the extensions, before the first page")
    print(f"{'  pages (gallery)':22s} {part['pages']:9.1f} {'':10s}   "
          f"sphinx-gallery running the pages in {jobs} worker(s)")
    print(f"{'    own execution':22s} {own:9.1f} {'':10s}   "
          f"sum of the pages' own times; / {jobs} worker(s) = {own / int(jobs):.1f}")
    print(f"{'    workers beyond':22s} {part['pages'] - own / int(jobs):9.1f} {'':10s}   "
          "the phase less the pages' own times per worker: imports, the last page")
    print(f"{'  the rest':22s} {part['the rest']:9.1f} {'':10s}   "
          "Sphinx reading and writing every page, the ledger, search index")
    outside = part["start-up"] + part["the rest"]
    print(f"{'overhead outside pages':22s} {outside:9.1f} {'':10s}   "
          f"start-up + the rest: {outside / clean:.0%} of the clean build")
    scaled = part["start-up"] + (part["pages"] + part["the rest"]) * args.project / n
    print(f"{f'projected, {args.project} pages':22s} {scaled:9.1f} {'':10s}   "
          f"start-up + the other phases x {args.project}/{n} (today's mean cost per page)")
    for step, note in (("no-op rebuild",
                        f"{median['no-op rebuild'] / clean:.1%} of the clean build"),
                       ("prose edited", "chapters/normalization.rst"),
                       ("one page edited", args.page)):
        print(f"{step:22s} {median[step]:9.1f} {executed[step]:10d}   {note}")
    print(f"{'peak memory':22s} {peak / 2**20:9.0f} MiB (all build processes together)")
    print("\nSlowest pages in the clean build (own time, s; the budget is 5 s a page, 2 s for a "
          "new one):")
    for page in sorted(page_median, key=page_median.get, reverse=True)[:args.slowest]:
        print(f"  {page_median[page]:6.1f}  {page}")


if __name__ == "__main__":
    main()
