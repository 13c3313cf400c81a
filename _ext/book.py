"""Build-time hooks for sphinx-gallery. Nothing here is needed to run a page on its own."""


def reset_page(gallery_conf, fname):
    """Before each page: reseed torch and apply the house figure style.

    Pages seed themselves too (they must run standalone); this makes sure no page inherits
    random state or rcParams from the page built before it.
    """
    import matplotlib as mpl
    import torch

    torch.manual_seed(0)
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.titlesize": "medium",
            # White figures stay readable on furo's dark background.
            "figure.facecolor": "white",
            "savefig.facecolor": "white",
        }
    )
