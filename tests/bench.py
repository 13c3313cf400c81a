"""Measure the build on this machine: `make bench` (or `.venv/bin/python tests/bench.py`).

In a temporary copy of the sources: a clean build, the sum of the pages' own execution times
(sphinx-gallery's records), a no-op rebuild, and a rebuild after editing one page, each with the
number of pages it executed, plus the peak memory of the builds. Prints one table. Not a test:
timings depend on the machine and its load, so nothing here asserts on them. Use --repeat N to
take the median of N runs of each step.
"""

import argparse
import json
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import GALLERY_PAGES, ROOT, copy_sources, sphinx_build  # noqa: E402


def timed_build(src):
    start = time.perf_counter()
    rc, log = sphinx_build(src, src / "_build" / "html")
    seconds = time.perf_counter() - start
    if rc != 0:
        sys.exit(f"build failed:\n{log[-3000:]}")
    executed = re.search(r"executed (\d+) out of", log)
    return seconds, int(executed.group(1)) if executed else 0


def page_seconds(src):
    return sum(json.loads(p.read_text())["time"] for p in src.glob("generated/*/*.cost.json"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per step (median reported)")
    parser.add_argument("--page", default=str(GALLERY_PAGES[0].relative_to(ROOT)),
                        help="the page to edit for the one-page rebuild, relative to the repo")
    args = parser.parse_args()

    rows = {"clean build": [], "pages' own execution": [], "no-op rebuild": [],
            "one page edited": []}
    executed = {}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            src = copy_sources(Path(tmp) / "src")
            seconds, executed["clean build"] = timed_build(src)
            rows["clean build"].append(seconds)
            rows["pages' own execution"].append(page_seconds(src))
            seconds, executed["no-op rebuild"] = timed_build(src)
            rows["no-op rebuild"].append(seconds)
            page = src / args.page
            page.write_text(page.read_text() + "\n# edited by tests/bench.py\n")
            seconds, executed["one page edited"] = timed_build(src)
            rows["one page edited"].append(seconds)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    median = {k: statistics.median(v) for k, v in rows.items()}
    clean, pages = median["clean build"], median["pages' own execution"]
    print(f"\nBuild benchmark: {len(GALLERY_PAGES)} gallery pages, median of {args.repeat} run(s)\n")
    print(f"{'step':24s} {'wall (s)':>9s} {'pages run':>10s}   note")
    print(f"{'clean build':24s} {clean:9.1f} {executed['clean build']:10d}   "
          f"overhead beyond the pages: {clean - pages:.1f} s = {(clean - pages) / pages:.0%} of them")
    print(f"{'pages own execution':24s} {pages:9.1f} {'':10s}   sum of sphinx-gallery's per-page times")
    print(f"{'no-op rebuild':24s} {median['no-op rebuild']:9.1f} {executed['no-op rebuild']:10d}   "
          f"{median['no-op rebuild'] / clean:.0%} of the clean build")
    print(f"{'one page edited':24s} {median['one page edited']:9.1f} "
          f"{executed['one page edited']:10d}   {args.page}")
    print(f"{'peak memory':24s} {peak_mib:9.0f} MiB (largest build process)")


if __name__ == "__main__":
    main()
