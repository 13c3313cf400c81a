"""What a claim of a page is: the one definition the recorder, the tests and the sweep use.

A claim is a statement of a page that fails the page when what it says is false. Three forms:

``assert condition``
    kind ``assert``.
``torch.testing.assert_close(actual, expected, ...)``, a statement of its own
    kind ``assert_close``.
``try: <code> except E: ... else: raise AssertionError(...)``
    kind ``raises``: ``<code>`` must raise ``E`` (an erratum of the source notes shown
    failing, a shape PyTorch refuses). Its line is the ``raise``; it is checked each time
    an ``except`` clause of the ``try`` catches.

Any other ``raise AssertionError`` and any ``assert_close`` call inside an expression are
refused (``NotAClaim``): the recorder could not count them, so write an ``assert`` instead.
Used by ``recorder.py`` (what the ledger lists), ``tests/test_ledger.py`` (every claim is
recorded) and ``tools/sweep`` (the statements a slip must reach).
"""

import ast


class NotAClaim(ValueError):
    """A page checks something in a form the ledger cannot record."""


def is_assert_close(call):
    """``torch.testing.assert_close(...)`` or ``assert_close(...)``: a call node."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "assert_close") or (
        isinstance(func, ast.Name) and func.id == "assert_close")


def _raises_assertion_error(stmt):
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return isinstance(exc, ast.Name) and exc.id == "AssertionError"


def kind(stmt):
    """The claim kind of one statement (``assert``, ``assert_close``, ``raises``), or None.

    A ``raise AssertionError`` is a claim only as the ``else`` of a ``try`` (``errata_try``
    finds that ``try``); ``claim_sites`` refuses it anywhere else.
    """
    if isinstance(stmt, ast.Assert):
        return "assert"
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
            is_assert_close(stmt.value):
        return "assert_close"
    if _raises_assertion_error(stmt):
        return "raises"
    return None


def errata_try(node):
    """The ``raise AssertionError`` statement that makes a ``try`` a claim, or None."""
    if isinstance(node, ast.Try) and node.handlers:
        for stmt in node.orelse:
            if _raises_assertion_error(stmt):
                return stmt
    return None


def claim_sites(tree, segment=ast.unparse):
    """``{line: (kind, code)}`` for every claim of a parsed page, in source order.

    ``segment(node)`` gives a node's source text (``ast.get_source_segment`` bound to the
    page's text, say); the default unparses it. A ``raises`` claim's code is the ``try``
    body and the exceptions it must raise: ``bn(features)  # raises RuntimeError``.
    """
    sites, errata = {}, set()
    for node in ast.walk(tree):
        stmt = errata_try(node)
        if stmt is not None:
            errata.add(stmt)
            body = "; ".join(segment(s) for s in node.body)
            names = ", ".join(segment(h.type) if h.type is not None else "any exception"
                              for h in node.handlers)
            sites[stmt.lineno] = ("raises", f"{body}  # raises {names}")
    statements = {n.value for n in ast.walk(tree) if kind(n) == "assert_close"}
    stray = []
    for node in ast.walk(tree):
        k = kind(node) if isinstance(node, ast.stmt) else None
        if k == "raises":
            if node not in errata:
                stray.append(f"line {node.lineno}: raise AssertionError outside a try's else")
        elif k is not None:
            sites[node.lineno] = (k, segment(node.value if k == "assert_close" else node))
        elif isinstance(node, ast.Call) and is_assert_close(node) and node not in statements:
            stray.append(f"line {node.lineno}: assert_close inside an expression")
    if stray:
        raise NotAClaim("checks the ledger cannot record (write them as an assert statement "
                        "or a statement of assert_close): " + "; ".join(stray))
    return dict(sorted(sites.items()))
