"""A check that cannot fail proves nothing: break a from-scratch implementation, watch the build
fail.

Each mutation is a classic slip. The build must exit non-zero and its message must name the
page, the line and the comparison (the assert) that caught it.
"""

import re

from conftest import ROOT, copy_sources, make_html, save_artifact

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
    ("gallery/transformer/plot_04_causal_attention.py",
     "return torch.ones(L, L, dtype=torch.bool, device=device).tril()",
     "return torch.ones(L, L, dtype=torch.bool, device=device).triu()",
     "causal mask that lets tokens see the future instead of the past"),
    ("gallery/positional/plot_04_rope.py",
     "def rope_complex(x, pos, base=10000.0):",
     "def rope_complex(x, pos, base=1000.0):",
     "RoPE with a wrong frequency base"),
    ("gallery/positional/plot_04_rope.py",
     "out_even = x_even * cos - x_odd * sin  # out[2i]",
     "out_even = x_even * cos + x_odd * sin  # out[2i]",
     "RoPE rotating with the wrong sign"),
]


def test_wrong_implementations_fail_the_build(tmp_path):
    """Each mutation goes into its own copy of its page, so each is judged on its own."""
    src = copy_sources(tmp_path / "src")
    mutants = []
    for i, (page, good, bad, why) in enumerate(MUTATIONS):
        text = (src / page).read_text()
        assert good in text, f"{page} no longer contains {good!r}: update this test"
        mutant = (src / page).with_name(f"{(src / page).stem}_mut{i}.py")
        mutant.write_text(text.replace(good, bad, 1))  # the first occurrence only
        mutants.append((mutant, why))

    # Execute just the mutants; the original pages are not under test here. (The mutants are in
    # no toctree, so the build also warns about that: the assertions below are per mutant.)
    rc, log = make_html(src, page=r"_mut\d+\.py$")
    save_artifact("mutated_build.log", log)

    assert rc != 0, "the build passed although the implementations were wrong"
    assert "Unexpected failing examples" in log
    for mutant, why in mutants:
        # The deepest frame in the page is where the claim failed.
        hits = re.findall(rf'{re.escape(mutant.name)}", line (\d+), in \S+\n\s*(.+)', log)
        assert hits, f"the failure report does not name {mutant.name} and a line ({why})"
        line_no, code = int(hits[-1][0]), hits[-1][1]
        # The reported line is an assertion of the page itself: the claim that caught the slip.
        source_line = mutant.read_text().splitlines()[line_no - 1].strip()
        assert source_line == code.strip() and "assert" in code, (why, code)


def test_mutations_target_real_code():
    """Guard against the test rotting: each pattern exists in the page as committed."""
    for page, good, _, _ in MUTATIONS:
        assert good in (ROOT / page).read_text(), page
