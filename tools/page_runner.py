"""Run gallery pages as plain scripts, each in a process of its own, without paying for the
imports of torch and matplotlib every time.

``python plot_NN_x.py`` spends seconds importing torch and matplotlib before the page's first
line; ``make test`` paid it once per page. Here a server process imports them once (and runs
no tensor operation, so no thread pool exists yet), then forks a fresh process for every
page: its own memory and random state, a fresh ``__main__`` namespace (a page that forgets an
import still fails with ``NameError``), the page's folder first on ``sys.path`` and an empty
working folder, as for ``python page.py``; stdout and stderr go to files in that folder. What
differs from ``python page.py`` is only that ``torch``, ``matplotlib`` (not
``matplotlib.pyplot``) and ``transformers`` are already in ``sys.modules``.

    with PageRunner(env) as runner:
        code, stdout, stderr = runner.run(page, folder, timeout=300)
"""

import json
import os
import runpy
import subprocess
import sys
import time
import traceback
from pathlib import Path

# What the server imports; transformers' top level is light (its models load on first use),
# and it reads HF_HUB_OFFLINE when imported: the server gets the environment the pages get.
PRELOAD = ["torch", "matplotlib", "transformers"]


def _run_in_child(page, folder):
    """In the forked process: the page as ``__main__`` in ``folder``; never returns."""
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        file = os.open(Path(folder) / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    os.chdir(folder)
    sys.argv = [page]
    sys.path[0] = str(Path(page).parent)  # as `python page.py` sets it
    code = 0
    try:
        runpy.run_path(page, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (stop.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _wait(pid, timeout):
    """The child's exit code; -9 if it was killed after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return -9
        time.sleep(0.02)


def serve():
    """The server: one JSON request per line on stdin, one JSON answer per line on stdout."""
    for name in PRELOAD:
        __import__(name)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    print(json.dumps({"ready": PRELOAD}), file=answers)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_in_child(request["page"], request["folder"])
        start = time.perf_counter()
        code = _wait(pid, request["timeout"])
        print(json.dumps({"code": code, "seconds": time.perf_counter() - start}), file=answers)


class PageRunner:
    """The client: starts the server with this Python, in environment ``env`` (default: this
    process's), which every page then runs in."""

    def __init__(self, env=None):
        self.env = env

    def __enter__(self):
        self.server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1,
                                       env=self.env)
        ready = self.server.stdout.readline()
        if not ready:
            raise RuntimeError("the page runner did not start")
        return self

    def run(self, page, folder, timeout=300):
        """Run ``page`` in ``folder`` (made if needed); return (exit code, stdout, stderr)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        request = {"page": str(Path(page).resolve()), "folder": str(folder), "timeout": timeout}
        self.server.stdin.write(json.dumps(request) + "\n")
        answer = json.loads(self.server.stdout.readline())

        def read(name):
            return (folder / name).read_text() if (folder / name).is_file() else ""

        return answer["code"], read("stdout.txt"), read("stderr.txt")

    def __exit__(self, *exc):
        self.server.stdin.close()
        self.server.wait(timeout=30)


if __name__ == "__main__":
    serve()
