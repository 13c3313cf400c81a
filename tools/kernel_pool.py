"""Jupyter kernels for running the downloaded notebooks, one kept started ahead.

A notebook test used to start its kernel and then wait for it: IPython's start-up, then the
notebook's first cell importing torch, matplotlib and transformers, about as long as many
pages' own work. Here each kernel imports those three when it starts (binding no name: the
notebook must still import what it uses), and the next kernel is started as soon as one is
taken, so its start-up overlaps the notebook running before it. Every notebook still gets a
kernel of its own, in a fresh empty folder, with the environment given.

    pool = KernelPool(env, folder)
    km, cwd = pool.take()        # a started jupyter_client.KernelManager and its folder
    ...                          # NotebookClient(nb, km=km, ...).execute(); km.shutdown_kernel()
    pool.close()
"""

import json
import sys
import tempfile
from pathlib import Path

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

NAME = "book-python"
PRELOAD = ["torch", "matplotlib", "transformers"]
# `python -c`: import the modules without binding a name, then run ipykernel as usual.
LAUNCH = ("import sys; [__import__(m) for m in sys.argv.pop(1).split(',')]; "
          "from ipykernel import kernelapp; kernelapp.launch_new_instance()")


class KernelPool:
    def __init__(self, env, folder):
        self.env, self.folder = env, Path(folder)
        spec = self.folder / "kernels" / NAME
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-c", LAUNCH, ",".join(PRELOAD), "-f",
                     "{connection_file}"],
            "display_name": "Python 3 (torch preloaded)", "language": "python"}))
        self.specs = KernelSpecManager(kernel_dirs=[str(self.folder / "kernels")])
        self.next = self._start()

    def _start(self):
        cwd = Path(tempfile.mkdtemp(prefix="notebook-", dir=self.folder))
        # IPC sockets beside the kernel's folder: local only (no TCP port, no warning about one)
        km = KernelManager(kernel_name=NAME, kernel_spec_manager=self.specs, transport="ipc",
                           ip=str(cwd.with_suffix(".ipc")))
        km.start_kernel(cwd=str(cwd), env=self.env)
        return km, cwd

    def take(self):
        """A started kernel (it may still be starting) and its empty working folder."""
        taken, self.next = self.next, self._start()
        return taken

    def close(self):
        km, _ = self.next
        km.shutdown_kernel(now=True)
