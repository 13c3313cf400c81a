"""Deciding what the build runs again, before sphinx-gallery runs the pages.

sphinx-gallery re-runs a page when its md5 record (``generated/<chapter>/<page>.py.md5``) is
missing or differs from the source. These hooks delete md5 records when a page must run for
another reason (another machine, a record that does not match its page), delete the output
of pages that are gone, and run few pages without workers.
"""

import json
import os
import re
from pathlib import Path

import internals

ROOT = Path(__file__).resolve().parents[1]


def rerun_pages_on_a_new_machine(app, config):
    """Another Python, torch or device than the last build: forget sphinx-gallery's md5 cache.

    Before the gallery runs (config-inited). Pages without an md5 record run again; if the
    build stops half-way, the pages it did not reach still have none and run the next time.
    """
    from machine import update

    if update(ROOT / "generated" / "machine.txt"):
        for md5 in (ROOT / "generated").glob(f"*/*.py{internals.MD5_SUFFIX}"):
            md5.unlink()


def rerun_pages_without_a_current_record(app, config):
    """A page whose claim record is missing, is not of its source as it is now, or was made by
    an older recorder (``claim_files.RECORDER``), runs again.

    sphinx-gallery skips a page whose md5 record matches its source; the page's claim record
    is then normally of that same source. Not so for a record lost, or made before records
    carried the hash of their source: forgetting the md5 lets the page run and record again.
    """
    from claim_files import RECORDER, current_sources

    for page, sha256 in current_sources(ROOT).items():
        chapter, stem = page.split("/")
        md5 = internals.md5_record(ROOT / "generated" / chapter, f"{stem}.py")
        claims = ROOT / "generated" / f"{page}.claims.json"
        if not md5.is_file():
            continue
        record = json.loads(claims.read_text()) if claims.is_file() else {}
        if record.get("source_sha256") != sha256 or record.get("recorder") != RECORDER:
            md5.unlink()


def forget_removed_pages(app, config):
    """Delete what sphinx-gallery generated for pages whose source is gone (renamed, removed).

    sphinx-gallery never deletes its output; a stale page would stay in the build, outside
    every toctree (a warning, so an error under -W), and its figures would be copied along.
    """
    import shutil

    generated, gallery = ROOT / "generated", ROOT / "gallery"
    for chapter in (p for p in generated.glob("*") if p.is_dir()):
        if not (gallery / chapter.name).is_dir():
            shutil.rmtree(chapter)
            continue
        for rst in chapter.glob("plot_*.rst"):
            if not (gallery / chapter.name / f"{rst.stem}.py").is_file():
                for path in [*chapter.glob(f"{rst.stem}.*"),
                             *chapter.glob(f"images/sphx_glr_{rst.stem}_[0-9]*.png"),
                             *chapter.glob(f"images/thumb/sphx_glr_{rst.stem}_thumb.*")]:
                    path.unlink()


def few_pages_run_in_process(app):
    """Worker processes pay off from two pages on: fewer run in the build's own process.

    At builder-inited, before sphinx-gallery (which would start the workers only to find most
    pages unchanged): a page runs if it matches PAGE and its md5 record is missing or differs.
    Starting two workers costs about 1.2 s on 2 cores (issue 6). The setting is changed for
    this build only; it is not what the next build's configuration compares with.
    """
    conf = app.config.sphinx_gallery_conf
    if not conf.get("parallel"):
        return
    srcdir, pattern = Path(app.srcdir), re.compile(conf["filename_pattern"])
    to_run = 0
    for examples, gallery in zip(conf["examples_dirs"], conf["gallery_dirs"]):
        for src in (srcdir / examples).glob("*.py"):
            md5 = internals.md5_record(srcdir / gallery, src)
            to_run += bool(pattern.search(os.path.normpath(src))) and (
                not md5.is_file() or md5.read_text() != internals.md5_of(src))
    if to_run < 2:
        conf["parallel"] = False
