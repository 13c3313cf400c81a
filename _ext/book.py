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
            "figure.constrained_layout.use": True,  # no clipped axis labels
            # White figures stay readable on furo's dark background.
            "figure.facecolor": "white",
            "savefig.facecolor": "white",
        }
    )


# Documents that describe the build itself: re-read (and so re-executed) on every build, so they
# never show another machine's versions or last week's timings.
ALWAYS_REBUILD = ["chapters/environment"]


def _always_outdated(app, env, added, changed, removed):
    return [doc for doc in ALWAYS_REBUILD if doc in env.found_docs]


def setup(app):
    app.connect("env-get-outdated", _always_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
