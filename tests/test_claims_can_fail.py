"""A check that cannot fail proves nothing: break a from-scratch implementation, watch the build fail.

Each mutation is a classic slip. The build must exit non-zero and its message must name the
page, the line and the comparison (the assert) that caught it.
"""

import re

from conftest import ROOT, copy_sources, save_artifact, sphinx_build

# (page, text to break, broken text, why it is wrong)
MUTATIONS = [
    ("gallery/normalization/plot_01_common_recipe.py",
     "return (x - mean) / torch.sqrt(var + eps)",
     "return (x - mean) / (torch.sqrt(var) + eps)",
     "eps added to the standard deviation instead of the variance"),
    ("gallery/normalization/plot_02_batchnorm.py",
     "unbiased=False",
     "unbiased=True",
     "train-mode BatchNorm normalizing with the unbiased variance"),
    ("gallery/transformer/plot_01_self_attention.py",
     "attn = logits.softmax(dim=-1)",
     "attn = logits.softmax(dim=-2)",
     "attention softmax over the queries instead of the keys"),
    ("gallery/transformer/plot_03_causal_attention.py",
     "device=device).tril()  # (L, L), True = attend",
     "device=device).triu()  # (L, L), True = attend",
     "causal mask that lets tokens see the future instead of the past"),
]


def test_wrong_implementations_fail_the_build(tmp_path):
    src = copy_sources(tmp_path / "src")
    for page, good, bad, _ in MUTATIONS:
        path = src / page
        text = path.read_text()
        assert good in text, f"{page} no longer contains {good!r}: update this test"
        path.write_text(text.replace(good, bad, 1))  # the first occurrence only

    # Execute just the mutated pages: the other pages are not under test here.
    pattern = "|".join(re.escape(page.split("/")[-1]) for page, *_ in MUTATIONS)
    rc, log = sphinx_build(src, src / "_build" / "html", page=pattern)
    save_artifact("mutated_build.log", log)

    assert rc != 0, "the build passed although the implementations were wrong"
    assert "Unexpected failing examples" in log
    for page, _, _, why in MUTATIONS:
        name = page.split("/")[-1]
        # The deepest frame in the page is where the claim failed.
        hits = re.findall(rf'{re.escape(name)}", line (\d+), in \S+\n\s*(.+)', log)
        assert hits, f"the failure report does not name {name} and a line ({why})"
        line_no, code = int(hits[-1][0]), hits[-1][1]
        # The reported line is an assertion of the page itself: the claim that caught the slip.
        source_line = (src / page).read_text().splitlines()[line_no - 1].strip()
        assert source_line == code.strip() and "assert" in code, (why, code)


def test_mutations_target_real_code():
    """Guard against the test rotting: each pattern exists in the page as committed."""
    for page, good, _, _ in MUTATIONS:
        assert good in (ROOT / page).read_text(), page
