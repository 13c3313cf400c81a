"""Where the book's source lives, for the landing page's "re-verify on your machine".

``conf.py`` asks git for the checkout's remote (``origin``). A public address (https, or
an ssh address of a forge, written as https) becomes a link; a local path or no remote
is said plainly, since the site cannot link what it does not know."""

import re
import subprocess


def https_remote(url):
    """``url`` as an https address a browser opens, or None (empty, a path, file://)."""
    url = url.strip()
    ssh = re.fullmatch(r"(?:ssh://)?git@([^:/]+)[:/](.+)", url)
    if ssh:
        url = f"https://{ssh[1]}/{ssh[2]}"
    if not url.startswith("https://"):
        return None
    return url.removesuffix("/").removesuffix(".git")


def remote_of(root):
    """The https address of the checkout at ``root``'s ``origin``, or None."""
    try:
        done = subprocess.run(["git", "remote", "get-url", "origin"], cwd=root,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return https_remote(done.stdout) if done.returncode == 0 else None


def clone_sentence(url):
    """reST for "clone ..." on the landing page: a link, or a plain statement."""
    if url:
        return f"clone `the book's repository <{url}>`__"
    return ("clone the repository this copy of the book came from (the checkout it was "
            "built from names no public remote, so the site cannot link it)")
