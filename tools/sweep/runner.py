"""The fork server: runs pages (mutated or not) in forked children of one prepared parent.

The parent imports torch, matplotlib (Agg) and what the pages import once, and runs no tensor
operation (so no intra-op thread pool and no CUDA context exist before fork). Each child gets
one torch thread, `CUDA_VISIBLE_DEVICES=""`, a fresh temporary directory and the page's text
executed as `__main__`; it reports its verdict as JSON through a pipe. `run_all` keeps one
child per worker running and kills a child past its timeout.
"""

import ast
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from typing import NamedTuple


class Job(NamedTuple):
    key: str
    path: object      # the page's file (its name in tracebacks, its __file__)
    source: str       # the text to run: the page's own, or a mutant of it
    trace: bool       # record the lines executed and the modules imported
    timeout: float    # seconds


def prepare_parent(pages):
    """Import what the pages import, once; run no tensor operation (fork-safe)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ["HF_HUB_OFFLINE"] = "1"  # read when huggingface_hub is imported, i.e. here
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.testing  # noqa: F401
    try:  # assert_close imports it (and sympy) on its first call: 2-3 s per child otherwise
        import torch.distributed.tensor  # noqa: F401
    except Exception:
        pass
    for path in pages:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                try:
                    __import__(name)
                except Exception:
                    pass


def child(job, tmp_root, wfd):
    """In the forked child: run the job's source as __main__; report through wfd."""
    result = {"status": "survived", "detail": "", "lines": [], "modules": []}
    preloaded = set(sys.modules)
    filename = str(job.path)
    try:
        os.chdir(tempfile.mkdtemp(prefix="mutant-", dir=tmp_root))
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import torch
        torch.set_num_threads(1)
        code = compile(job.source, filename, "exec")
        glob = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
        sys.argv = [filename]
        lines = set()
        if job.trace:
            def local(frame, event, arg):
                if event == "line":
                    lines.add(frame.f_lineno)
                return local

            def global_(frame, event, arg):
                if frame.f_code.co_filename == filename:
                    lines.add(frame.f_lineno)
                    return local
                return None
            sys.settrace(global_)
        try:
            exec(code, glob)
        finally:
            # A trace function is dropped when it raises (a RecursionError on the page does
            # that): then the lines are unknown, not unexecuted.
            intact = sys.gettrace() is global_ if job.trace else False
            sys.settrace(None)
            result["lines"] = sorted(lines) if intact else None
    except SystemExit as e:
        if e.code not in (None, 0):
            result.update(status="error", detail=f"SystemExit({e.code})")
    # Every failure of the page is a verdict.
    except BaseException as e:  # noqa: BLE001
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        status = "assert" if isinstance(e, AssertionError) else "error"
        msg = str(e).strip().splitlines()
        result.update(status=status, line=line,
                      detail=f"{type(e).__name__}: {msg[0][:120] if msg else ''}")
    if job.trace:  # what the page imported lazily (torch.testing pulls in sympy): preload it
        result["modules"] = sorted(set(sys.modules) - preloaded)
    data = json.dumps(result).encode()
    while data:
        data = data[os.write(wfd, data):]
    os._exit(0)


def run_all(jobs, workers, progress=None):
    """Run every Job, `workers` at a time. Returns {key: result}: `status` (survived, assert,
    error, timeout), `detail`, `seconds`, and for a traced job `lines` and `modules`."""
    tmp_root = tempfile.mkdtemp(prefix="mutation-sweep-")
    try:
        return _run_all(jobs, workers, progress, tmp_root)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)


def _run_all(jobs, workers, progress, tmp_root):
    pending = list(jobs)
    running = {}  # pid -> [key, rfd, started, timeout, chunks]
    results = {}
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop(0)
            rfd, wfd = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                try:
                    child(job, tmp_root, wfd)
                finally:
                    os._exit(70)
            os.close(wfd)
            running[pid] = [job.key, rfd, time.monotonic(), job.timeout, []]
        fds = {v[1]: pid for pid, v in running.items()}
        ready, _, _ = select.select(list(fds), [], [], 0.05)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fds[fd]][4].append(chunk)
        now = time.monotonic()
        for pid, (key, rfd, started, timeout, chunks) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0 and now - started > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(rfd)
                results[key] = {"status": "timeout", "detail": f"over {timeout:.0f} s",
                                "seconds": now - started}
            elif done:
                while True:
                    chunk = os.read(rfd, 65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                os.close(rfd)
                try:
                    res = json.loads(b"".join(chunks))
                except ValueError:
                    res = {"status": "error", "detail": f"child died ({status})"}
                res["seconds"] = time.monotonic() - started
                results[key] = res
            else:
                continue
            del running[pid]
            if progress:
                progress(len(results), len(jobs))
    return results
