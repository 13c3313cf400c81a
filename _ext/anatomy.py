"""The page anatomy on the HTML page: proofs and exercise answers collapsed, one click away.

A gallery page is a lesson first (../shared/STYLE.md, "Page anatomy"). Its sections titled
``Proof: ...`` hold what makes a claim airtight but is not the lesson (reference wiring, the
inputs where every term matters, device branches, the source notes' errata); its sections
titled ``Try it: ...`` are exercises, the prompt first, then the answer's code. Both run at
every build, are recorded in the ledger and stay whole in the downloads; on the HTML page

- a ``Proof:`` section becomes one closed sphinx-design dropdown titled with its heading
  (the heading stays in the page's contents and for screen readers, hidden on screen),
  which opens on a link to this page's rows in the proof ledger;
- a ``Try it:`` section keeps its heading and prompt (the text before its first code cell)
  and folds the answer;
- the section "Setup" (imports, seed, device, and blocks copied from other pages, if any)
  folds into one line like a proof;
- in the section "The idea", the code of a figure folds and the figure stays: the lesson
  there is the equation and the picture;
- the introduction ends on a line linking this page's rows in the proof ledger ("what
  proves this page"), and every other link of the page to the ledger opens it filtered to
  this page as well (``?page=chapter/plot_NN_topic``, read by ``ledger.js``).

sphinx-design renders the dropdowns as ``<details>``: no JavaScript, and the browser's
find-in-page opens them. sphinx-gallery's footer (running time, downloads), which it
appends to the last section, stays outside.
"""

import hashlib
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

import internals

PROOF, TRY_IT, IDEA, SETUP = "Proof:", "Try it:", "The idea", "Setup"
COPY_MARK = "# Copied from "
LEDGER = "chapters/ledger"
BLOCK = internals.BLOCK_MARKER  # sphinx-gallery's comment before each block of a page
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
    """What an exercise's prompt can hold (text, never code)."""
    return isinstance(node, (nodes.paragraph, nodes.bullet_list, nodes.enumerated_list,
                             nodes.math_block, nodes.target, nodes.comment))


def _ledger_link(docname):
    """A paragraph linking the ledger, filtered to this page's rows."""
    return nodes.paragraph("", "", nodes.Text("Every check below, with its measured "
                                              "discrepancy and tolerance: "),
                           nodes.reference("", "this page in the proof ledger",
                                           refuri=_ledger_uri(docname)),
                           nodes.Text("."), classes=["anatomy-ledger-link"])


def _ledger_uri(docname):
    """The ledger's address from a gallery page, filtered to that page's rows."""
    return "../" * docname.count("/") + f"{LEDGER}.html?page={docname.removeprefix('generated/')}"


def _what_proves_this_page(docname):
    """The introduction's last line: where every claim of this page is, as the build checked it."""
    return nodes.paragraph("", "", nodes.strong("", "What proves this page: "),
                           nodes.reference("", "its claims in the proof ledger",
                                           refuri=_ledger_uri(docname)),
                           nodes.Text(", as measured."),
                           classes=["anatomy-ledger-link", "anatomy-proved-by"])


def filter_ledger_links(app, doctree, docname):
    """On a gallery page, every link to the ledger (a ``:doc:`` in its text, say) opens it
    filtered to the page's own rows (doctree-resolved: the links are resolved by then)."""
    if not docname.startswith("generated/") or docname.endswith("/index"):
        return
    whole = "../" * docname.count("/") + f"{LEDGER}.html"
    for ref in doctree.findall(nodes.reference):
        uri = ref.get("refuri", "")
        if uri == whole or uri.startswith(whole + "#"):
            ref["refuri"] = _ledger_uri(docname) + uri[len(whole):]


def fold(section, start, title, classes, extra=()):
    """Move the section's children from ``start`` (up to sphinx-gallery's footer) into a
    closed dropdown titled ``title`` (inline nodes); ``extra`` goes first inside it."""
    children = section.children[start:]
    end = next((i for i, c in enumerate(children) if _is_footer(c)), len(children))
    body, footer = children[:end], children[end:]
    if not body:
        return False
    for child in children:
        section.remove(child)
    section += internals.dropdown(title, [*extra, *body], classes)
    section.extend(footer)
    return True


def fold_figure_code(section):
    """In "The idea" every code cell folds (it draws the figure); the equation, the figure
    and any printed output stay in view."""
    children = [c for c in section.children if not isinstance(c, nodes.comment)]
    for cell, after in zip(children, children[1:] + [None]):
        # (a code cell is a Python literal block: book.py wraps it for the ledger later)
        if isinstance(cell, nodes.literal_block) and cell.get("language") == "Python":
            title = ("Show the code of this figure"
                     if isinstance(after, internals.figure_node()) else "Show the code")
            box = internals.dropdown([nodes.Text(title)], [], ["anatomy-figure-code"])
            cell.replace_self(box)
            box += cell


class FoldProofs(SphinxTransform):
    default_priority = 700

    def apply(self):
        docname = self.env.docname
        if not docname.startswith("generated/") or docname.endswith("/index"):
            return
        top = next(iter(self.document.findall(nodes.section)), None)
        if top is not None:  # after the introduction, before the first section (Setup)
            first = next((i for i, c in enumerate(top.children)
                          if isinstance(c, nodes.section)), len(top.children))
            top.insert(first, _what_proves_this_page(docname))
        for section in list(self.document.findall(nodes.section)):
            if not section.children or not isinstance(section[0], nodes.title):
                continue
            heading = section[0].astext()
            if heading.startswith(PROOF):
                # One line folded: the heading's words are the dropdown's title; the heading
                # stays for the page's contents, links and screen readers, hidden on screen.
                title = [child.deepcopy() for child in section[0].children]
                if fold(section, 1, title, ["anatomy-proof"], extra=[_ledger_link(docname)]):
                    section["classes"].append("anatomy-folded")
            elif heading == SETUP:
                # The imports, seed and device: needed to run the cells, not the lesson.
                # A page that reuses blocks taught elsewhere may copy them here (marked
                # "# Copied from <page>: <name>"): the title says so.
                copies = any(COPY_MARK in c.astext()
                             for c in section.findall(nodes.literal_block))
                label = ("Setup: imports, seed, device and the blocks copied from other "
                         "pages" if copies else "Setup: imports, seed and device")
                if fold(section, 1, [nodes.Text(label)], ["anatomy-setup"]):
                    section["classes"].append("anatomy-folded")
            elif heading == IDEA:
                fold_figure_code(section)
            elif heading.startswith(TRY_IT):
                # The prompt is the rest of the heading's text block: the next block (text
                # with the answer's explanation, or code) starts at sphinx-gallery's marker.
                start = next((i for i, c in enumerate(section.children) if i and (
                    isinstance(c, nodes.comment) and c.astext().startswith(BLOCK)
                    or not _is_prompt(c))), len(section))
                fold(section, start, [nodes.Text("Show the answer")], ["anatomy-answer"])
                section["classes"].append("anatomy-exercise")


def setup(app):
    app.add_transform(FoldProofs)
    app.connect("doctree-resolved", filter_ledger_links)
    # A change to this file changes every gallery page's doctree: its digest as the
    # extension's env_version makes Sphinx read every page again (as after a config change).
    digest = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": digest}
