"""The page anatomy on the HTML page: proofs and exercise answers collapsed, one click away.

A gallery page is a lesson first (../shared/STYLE.md, "Page anatomy"). Its sections titled
``Proof: ...`` hold what makes a claim airtight but is not the lesson (reference wiring, the
inputs where every term matters, device branches, the source notes' errata); its sections
titled ``Try it: ...`` are exercises, the prompt first, then the answer's code. Both run at
every build, are recorded in the ledger and stay whole in the downloads; on the HTML page

- a ``Proof:`` section keeps its heading (in the page's contents too) and folds everything
  under it into a closed sphinx-design dropdown, which opens on a link to this page's rows
  in the proof ledger;
- a ``Try it:`` section keeps its heading and prompt (the text before its first code cell)
  and folds the answer.

sphinx-design renders the dropdowns as ``<details>``: no JavaScript, and the browser's
find-in-page opens them. sphinx-gallery's footer (running time, downloads), which it
appends to the last section, stays outside.
"""

import hashlib
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

import internals

PROOF, TRY_IT = "Proof:", "Try it:"
LEDGER = "chapters/ledger"
FOOTER = {"sphx-glr-timing", "sphx-glr-footer", "sphx-glr-signature"}


def _is_footer(node):
    """sphinx-gallery's own closing nodes: running time, download target and buttons."""
    if isinstance(node, nodes.Element) and FOOTER & set(node.get("classes", [])):
        return True
    if isinstance(node, nodes.target) and any(i.startswith("sphx-glr-download")
                                             for i in node.get("ids", [])):
        return True
    return type(node).__name__ == "only"  # the html-only footer blocks


def _is_prompt(node):
    """Text of an exercise's prompt: what comes before the first code cell."""
    return isinstance(node, (nodes.paragraph, nodes.bullet_list, nodes.enumerated_list,
                             nodes.math_block, nodes.target, nodes.comment))


def _ledger_link(docname):
    """A paragraph linking the ledger, filtered to this page's rows."""
    page = docname.removeprefix("generated/")
    depth = docname.count("/")
    uri = "../" * depth + f"{LEDGER}.html?page={page}"
    return nodes.paragraph("", "", nodes.Text("Every check below, with its measured "
                                              "discrepancy and tolerance: "),
                           nodes.reference("", "this page in the proof ledger", refuri=uri),
                           nodes.Text("."), classes=["anatomy-ledger-link"])


def fold(section, start, title, classes, extra=()):
    """Move the section's children from ``start`` (up to sphinx-gallery's footer) into a
    closed dropdown titled ``title``; ``extra`` goes first inside it."""
    children = section.children[start:]
    end = next((i for i, c in enumerate(children) if _is_footer(c)), len(children))
    body, footer = children[:end], children[end:]
    if not body:
        return False
    for child in children:
        section.remove(child)
    section += internals.dropdown([nodes.Text(title)], [*extra, *body], classes)
    section.extend(footer)
    return True


class FoldProofs(SphinxTransform):
    default_priority = 700

    def apply(self):
        docname = self.env.docname
        if not docname.startswith("generated/") or docname.endswith("/index"):
            return
        for section in list(self.document.findall(nodes.section)):
            if not section.children or not isinstance(section[0], nodes.title):
                continue
            heading = section[0].astext()
            if heading.startswith(PROOF):
                fold(section, 1, "Show the proof", ["anatomy-proof"],
                     extra=[_ledger_link(docname)])
            elif heading.startswith(TRY_IT):
                start = 1
                while start < len(section) and _is_prompt(section[start]):
                    start += 1
                fold(section, start, "Show the answer", ["anatomy-answer"])


def setup(app):
    app.add_transform(FoldProofs)
    # A change to this file changes every gallery page's doctree: its digest as the
    # extension's env_version makes Sphinx read every page again (as after a config change).
    digest = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": digest}
