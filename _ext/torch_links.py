"""Links into PyTorch's documentation without network access at build time.

Intersphinx resolves a cross-reference such as :class:`torch.nn.LayerNorm` through a project's
inventory (objects.inv), and sphinx-gallery links names in the gallery's code through the same
inventories. PyTorch's real inventory lives on docs.pytorch.org, which a build must not fetch, so
the book keeps the part it uses as a reviewable text list, _ext/torch_inventory.txt
(name, role, page#anchor), and conf.py writes it as a local objects.inv before every build:

    intersphinx_mapping = {"torch": (TORCH_DOCS, write_inventory(TXT, "_build/torch.inv"))}

The Sphinx extension in this module adds one thing on top: in the gallery's prose (the rendered
comments of gallery/*/plot_*.py), an inline literal that is exactly an inventory name, such as
``torch.polar`` or ``nn.LayerNorm`` (the pages' ``nn``/``F`` aliases), becomes a link too.
"""

import hashlib
import re
import zlib
from pathlib import Path

ROLES = {"py:class", "py:function", "py:method", "py:attribute", "py:data", "py:module"}
# page.html#anchor, relative to the docs root: no scheme, no host, no "..".
_URI = re.compile(r"(?:[A-Za-z0-9_]+/)*[A-Za-z0-9_.]+\.html#[A-Za-z0-9_.]+")
_NAME = re.compile(r"torch(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# The gallery pages import `from torch import nn` and `import torch.nn.functional as F`.
ALIASES = {"nn.": "torch.nn.", "F.": "torch.nn.functional."}


def read_inventory(path):
    """Parse the text list: [(name, role, uri)], in file order. Raises ValueError on a bad line."""
    entries, seen = [], set()
    for lineno, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):  # uris hold "#": whole-line comments
            continue
        parts = raw.split()
        where = f"{path}:{lineno}"
        if len(parts) != 3:
            raise ValueError(f"{where}: expected 'name role uri', got {raw!r}")
        name, role, uri = parts
        if not _NAME.fullmatch(name):
            raise ValueError(f"{where}: {name!r} is not a dotted torch name")
        if role not in ROLES:
            raise ValueError(f"{where}: role {role!r} is not one of {sorted(ROLES)}")
        if not _URI.fullmatch(uri):
            raise ValueError(f"{where}: uri {uri!r} is not 'page.html#anchor'")
        if name in seen:
            raise ValueError(f"{where}: {name} is listed twice")
        seen.add(name)
        entries.append((name, role, uri))
    return entries


def inventory_bytes(entries, project="PyTorch", version=""):
    """Sphinx inventory format v2: four header lines, then zlib-compressed object lines."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    # name domain:role priority uri dispname ("-": the name itself)
    body = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in sorted(entries))
    return header.encode() + zlib.compress(body.encode(), 9)


def write_inventory(txt, inv):
    """Write the text list `txt` as the objects.inv `inv` (only when its bytes change)."""
    data = inventory_bytes(read_inventory(txt))
    inv = Path(inv)
    if not inv.is_file() or inv.read_bytes() != data:
        inv.parent.mkdir(parents=True, exist_ok=True)
        inv.write_bytes(data)
    return inv


def digest(txt):
    """Changes whenever the list does: a config value with it makes Sphinx re-read every page,
    so no page keeps a link resolved against an older list."""
    return hashlib.sha256(Path(txt).read_bytes()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Sphinx extension: link inventory names written as inline literals in the gallery's prose.
_names = {}


def _gallery_literal_links(app, doctree):
    """At read time, before references are resolved: wrap matching literals in pending_xref."""
    from docutils import nodes
    from sphinx import addnodes

    docname = app.env.docname
    if not docname.startswith("generated/") or not app.config.torch_inventory:
        return
    key = (app.config.torch_inventory, app.config.torch_inventory_digest)
    if key not in _names:
        _names[key] = {name for name, _, _ in read_inventory(key[0])}
    names = _names[key]
    for literal in list(doctree.findall(nodes.literal)):
        # Already a link; or a heading, whose text also goes into the tables of contents.
        if _has_ancestor(literal, (nodes.reference, addnodes.pending_xref, nodes.title)):
            continue
        text = literal.astext()
        bare = text[:-2] if text.endswith("()") else text
        for short, full in ALIASES.items():
            if bare.startswith(short):
                bare = full + bare[len(short):]
        if bare not in names:
            continue
        xref = addnodes.pending_xref(
            "", refdomain="py", reftype="obj", reftarget=bare, refexplicit=True, refwarn=True,
            refdoc=docname,
        )
        literal["classes"] += ["xref", "py", "py-obj"]
        literal.replace_self(xref)
        xref += literal


def _has_ancestor(node, types):
    node = node.parent
    while node is not None:
        if isinstance(node, types):
            return True
        node = node.parent
    return False


def setup(app):
    # Path of the text list: set by conf.py; its digest forces a full re-read when it changes.
    app.add_config_value("torch_inventory", "", "env")
    app.add_config_value("torch_inventory_digest", "", "env")
    app.connect("doctree-read", _gallery_literal_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
