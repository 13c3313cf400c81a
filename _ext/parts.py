"""The book's parts: each chapter's pages in groups a learner reads in order (issue 25).

A part is a document under chapters/<chapter>/ that lists its pages once, in reading order:

    .. part::

       normalization/plot_01_common_recipe
       normalization/plot_02_batchnorm

which renders its reading time ("2 pages, about 15 min"), its pages' cards (sphinx-gallery's
``minigallery``) and a hidden toctree of its pages, so the sidebar and prev/next follow the
parts. Elsewhere (the landing page, the chapters' maps),

    .. part-cards:: /chapters/normalization/foundations

renders that part's title as a link, its reading time and its cards, reading the list from
the part's own document: one list per part, nowhere repeated.

A page's reading time counts what its HTML page shows with
every fold closed (_ext/anatomy.py): the docstring and the text of its sections at
``WORDS_PER_MINUTE``, and the code of its sections at ``LINES_PER_MINUTE``, leaving out what
the page folds: the section "Setup", the ``Proof:`` sections, the answers of the ``Try it:``
exercises (their prompts count) and the code that draws the figure of "The idea". The sum
over the pages is rounded up to 5 minutes.
"""

import json
import math
import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util.docutils import SphinxDirective

import internals
from anatomy import IDEA, PROOF, SETUP, TRY_IT, _is_footer

ROOT = Path(__file__).resolve().parents[1]
WORDS_PER_MINUTE = 200  # prose
LINES_PER_MINUTE = 15  # code: read, not skimmed
HEADING = re.compile(r"^(\S.*)\n([-~=^])\2+\s*$", re.M)


def visible(path):
    """``(words, code lines)`` of the page at ``path`` that its HTML shows, folds closed."""
    words = lines = 0
    section = folded = ""  # the current section's title; the folded one it sits in, if any
    for label, content, _ in internals.split_page(path):
        if label == "text":
            for title, underline in HEADING.findall(content):
                top = underline in "-="  # a subsection (~, ^) sits in its section's fold
                if top or not folded:
                    section = title.strip()
                    folded = section if section.startswith(PROOF) or section == SETUP else ""
            if not folded:
                # A heading's underline is no word; sphinx-gallery's own lines neither.
                words += len(HEADING.sub(r"\1", content).split())
        elif not (folded or section.startswith(TRY_IT) or section == IDEA):
            lines += sum(1 for line in content.splitlines()
                         if line.strip() and not line.lstrip().startswith("#"))
    return words, lines


def minutes(paths):
    """The reading time of ``paths``, in minutes, rounded up to 5."""
    words, lines = map(sum, zip(*(visible(p) for p in paths))) if paths else (0, 0)
    total = words / WORDS_PER_MINUTE + lines / LINES_PER_MINUTE
    return 5 * math.ceil(total / 5)


PART = re.compile(r"^\.\. part::[ \t]*\n\n((?:[ \t]+\S+[ \t]*\n)+)", re.M)


def part_pages(docname):
    """The pages (``chapter/plot_NN_topic``) the part ``docname`` lists, in its order."""
    text = (ROOT / f"{docname.strip('/')}.rst").read_text()
    found = PART.search(text)
    if not found:
        raise ValueError(f"{docname}: no '.. part::' list of pages")
    return found.group(1).split()


PREREQS = re.compile(r"\*\*Prerequisites:\*\*(.*?)(?:\n\n|\Z)", re.S)
DOC = re.compile(r":doc:`(?:[^`<]*<)?([^`>]+)>?`")


def prerequisites(page):
    """The pages (``chapter/plot_NN_topic``) ``page`` names in its **Prerequisites:**."""
    text = source(page).read_text()
    docstring = text.split('"""')[1] if text.count('"""') >= 2 else ""
    found = PREREQS.search(docstring)
    chapter = page.split("/")[0]
    return [] if not found else [
        t.removeprefix("/generated/") if t.startswith("/generated/") else f"{chapter}/{t}"
        for t in DOC.findall(found.group(1)) if "plot_" in t]


def builders():
    """``{page: [the pages that name it as a prerequisite, in file order]}``."""
    out = {}
    for path in sorted(ROOT.glob("gallery/*/plot_*.py")):
        page = f"{path.parent.name}/{path.stem}"
        for needed in prerequisites(page):
            out.setdefault(needed, []).append(page)
    return out


GRAPH = ROOT / "generated" / "builds_on.json"


def write_graph(app):
    """builder-inited: the pages that build on each page, rewritten only when it changes."""
    text = json.dumps(builders(), indent=1, sort_keys=True) + "\n"
    if not GRAPH.is_file() or GRAPH.read_text() != text:
        GRAPH.parent.mkdir(parents=True, exist_ok=True)
        GRAPH.write_text(text)


class BuildsOnThis(SphinxTransform):
    """At a gallery page's end, before sphinx-gallery's footer: the pages that build on it
    (those whose Prerequisites name it), as links titled by the pages' titles."""
    default_priority = 710  # after anatomy.py's folds (700)

    def apply(self):
        docname = self.env.docname
        if not docname.startswith("generated/") or docname.endswith("/index"):
            return
        page = docname.removeprefix("generated/")
        # Re-read when the graph of prerequisites changes (write_graph), not on any edit.
        self.env.note_dependency(str(GRAPH))
        later = json.loads(GRAPH.read_text()).get(page, []) if GRAPH.is_file() else []
        if not later:
            return
        para = nodes.paragraph("", "", nodes.strong("", "Pages that build on this one: "),
                               classes=["builds-on-this"])
        for i, other in enumerate(later):
            if i:
                para += nodes.Text(", ")
            ref = addnodes.pending_xref("", refdomain="std", reftype="doc",
                                        reftarget=f"/generated/{other}", refexplicit=False,
                                        refdoc=docname, refwarn=True)
            ref += nodes.inline("", other, classes=["xref", "std", "std-doc"])
            para += ref
        para += nodes.Text(".")
        # sphinx-gallery appends its footer (running time, downloads) to the last section
        holder = next((sec for sec in reversed(list(self.document.findall(nodes.section)))
                       if any(_is_footer(child) for child in sec.children)), None)
        if holder is None:
            return
        footer = next(i for i, child in enumerate(holder.children) if _is_footer(child))
        holder.insert(footer, para)


def source(page):
    return ROOT / "gallery" / f"{page}.py"


def reading_time(pages):
    n = len(pages)
    return f"{n} page{'s' if n > 1 else ''}, about {minutes([source(p) for p in pages])} min"


class _Cards(SphinxDirective):
    """What a part and its cards share: the cards of ``self.pages``, parsed in place."""

    def render(self, lines):
        for path in [source(p) for p in self.pages]:  # the reading time changes with them
            self.env.note_dependency(str(path))
        node = nodes.container(classes=["book-part"])
        self.state.nested_parse(StringList(lines, self.env.docname), self.content_offset,
                                node)
        return [node]

    def cards(self):
        return [f".. minigallery:: {' '.join(f'gallery/{p}.py' for p in self.pages)}", ""]


class Part(_Cards):
    """The pages of this part: reading time, cards, hidden toctree."""
    has_content = True

    def run(self):
        self.pages = [line.strip() for line in self.content if line.strip()]
        missing = [p for p in self.pages if not source(p).exists()]
        if missing:
            raise self.error(f"part: no such page {missing}")
        lines = [f"*{reading_time(self.pages)}*", "", *self.cards(),
                 ".. toctree::", "   :hidden:", "",
                 *[f"   /generated/{p}" for p in self.pages]]
        return self.render(lines)


class PartCards(_Cards):
    """Another document's part: its title as a link, its reading time, its cards."""
    required_arguments = 1

    def run(self):
        docname = self.arguments[0]
        self.env.note_dependency(str(ROOT / f"{docname.strip('/')}.rst"))
        self.pages = part_pages(docname)
        lines = [f":doc:`{docname}` · *{reading_time(self.pages)}*", "",
                 *self.cards()]
        return self.render(lines)


def setup(app):
    app.add_directive("part", Part)
    app.add_directive("part-cards", PartCards)
    app.add_transform(BuildsOnThis)
    app.connect("builder-inited", write_graph)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
