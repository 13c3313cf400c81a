"""Every ``rope_type`` of the pinned transformers has a row in the positional chapter's
scaling table (issue 26): a new type in a future pin fails here, with its name."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TITLE = ".. list-table:: Positions for long contexts"


def scaling_table():
    """The text of the chapter's scaling table: its directive and its indented rows."""
    text = (ROOT / "chapters" / "positional.rst").read_text()
    start = text.index(TITLE)
    end = re.compile(r"^\S", re.M).search(text, text.index("\n", start) + 1)
    return text[start:end.start() if end else len(text)]


def rope_types():
    """The pinned library's rope types: ROPE_INIT_FUNCTIONS' keys and "default"."""
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
    return sorted(set(rope_utils.ROPE_INIT_FUNCTIONS) | {"default"})


def test_the_table_is_found_and_holds_rows():
    table = scaling_table()
    assert table.count("   * - ") > 8  # the header and the variants, not a stub


@pytest.mark.parametrize("rope_type", rope_types())
def test_every_rope_type_has_a_row(rope_type):
    table = scaling_table()
    assert f'``"{rope_type}"``' in table or f"``{rope_type}``" in table, (
        f"rope_type {rope_type!r} of the pinned transformers is not in the table "
        f"{TITLE!r} of chapters/positional.rst: add a row and a page that proves it")


def test_the_pin_has_the_types_the_book_proves():
    # the pin of the book (5.23): a smaller set means the parametrization lost its source
    assert {"linear", "dynamic", "yarn", "llama3", "longrope", "proportional",
            "default"} <= set(rope_types())
