"""What the pages' results depend on besides their own source: Python, PyTorch, transformers
(the reference of the pages that compare with Hugging Face models) and the device.

sphinx-gallery re-runs a page only when its source changes. The build (``_ext/book.py``) and
``make html`` also compare this fingerprint with the one of the last build; when it differs
(another torch, ``CUDA_VISIBLE_DEVICES=`` to verify on the CPU after a GPU build, ...) every
page runs again. It imports nothing heavy, since it runs before every build.

    python _ext/machine.py FILE    rewrite FILE only if the fingerprint changed
"""

import glob
import importlib.metadata
import os
import platform
import sys
from pathlib import Path


def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def fingerprint():
    return (f"python {platform.python_version()} on {platform.machine()}\n"
            f"torch {version('torch')}\n"
            f"transformers {version('transformers')}\n"
            f"CUDA_VISIBLE_DEVICES {os.environ.get('CUDA_VISIBLE_DEVICES', '(not set)')}\n"
            f"NVIDIA devices {' '.join(sorted(glob.glob('/dev/nvidia[0-9]*'))) or '(none)'}\n")


def update(path):
    """Write the fingerprint to ``path`` unless it is already there; True if it changed."""
    path, text = Path(path), fingerprint()
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


if __name__ == "__main__":
    update(sys.argv[1])
