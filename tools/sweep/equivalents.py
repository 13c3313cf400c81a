"""The surviving mutants listed as equivalent (`equivalents.txt`): read, match, prune.

One entry a line, `page: original line => mutated line ## reason`; `#` lines and blank lines are
comments. An entry matches a mutant by content: the page, and the lines of the site with
comments dropped and blanks collapsed (`Mutant.before`, `Mutant.after`), so edits elsewhere on
the page do not invalidate it. Every entry needs a reason. An entry that no candidate mutant of
the current pages produces is stale: `prune` rewrites the file without it.
"""


class BadEntry(ValueError):
    """A line of the equivalents file that is not `page: before => after ## reason`."""


def parse(line):
    """`page: before => after ## reason` -> ((page, before, after), reason)."""
    try:
        body, reason = line.rsplit(" ## ", 1)
        page, rest = body.split(": ", 1)
        before, after = rest.split(" => ")
    except ValueError:
        raise BadEntry("expected `page: original line => mutated line ## reason`") from None
    if not reason.strip():
        raise BadEntry("an equivalent needs a reason")
    return (page.strip(), collapse(before), collapse(after)), reason.strip()


def collapse(text):
    return " ".join(text.split())


def is_entry(line):
    return bool(line.strip()) and not line.startswith("#")


def read(path):
    """{(page, before, after): reason} of an equivalents file ({} if there is none)."""
    out = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if is_entry(line):
            try:
                key, reason = parse(line)
            except BadEntry as err:
                raise BadEntry(f"{path}:{n}: {err}") from None
            out[key] = reason
    return out


def stale(entries, produced, in_scope):
    """The entries whose page is in scope (swept) and that no candidate mutant produces.

    `produced`: the (page, before, after) of every candidate of the swept pages;
    `in_scope(page)`: whether the sweep covers that page (an entry of a page not swept is
    neither matched nor judged).
    """
    return [key for key in entries if in_scope(key[0]) and key not in produced]


def prune(path, keys):
    """Rewrite the file without the entries of `keys`; return the lines dropped."""
    keys, kept, dropped = set(keys), [], []
    for line in path.read_text().splitlines():
        if is_entry(line) and parse(line)[0] in keys:
            dropped.append(line)
        else:
            kept.append(line)
    if dropped:
        path.write_text("\n".join(kept) + "\n")
    return dropped


def template(mutant):
    """The line to add for a survivor that is truly equivalent (the reason still to write)."""
    return f"{mutant.page}: {mutant.before} => {mutant.after} ## "
