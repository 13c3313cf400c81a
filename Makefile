# Two commands do everything on a fresh clone:
#   make html   set up .venv from requirements.txt if missing or stale, run every page, build the site
#   make test   same set-up, then the test suite (tests/)
# See README.md for the rest (make clean, make livehtml, PAGE=...).

PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
BUILDDIR   ?= _build
# Worker processes for the pages and for Sphinx: one per core, at most 4 (a chapter has about
# 7 pages; each worker holds its own torch). JOBS=1 runs everything in one process.
JOBS       ?= $(shell $(PYTHON) -c 'import os; print(min(4, os.cpu_count() or 1))')
# Warnings are errors, nitpicky cross-references, report every failure before exiting.
SPHINXOPTS ?= -W --keep-going -n -j $(JOBS)
# Only execute gallery pages whose path matches this regex (e.g. PAGE=batchnorm).
PAGE       ?=
# Everything a build reads (verified/: the claim records of other machines, merged into the
# ledger). If none of it is newer than the last successful full build, and Python, torch and
# the device are the same (_ext/machine.py), `make html` has nothing to do.
# (verified/. names the folder, not the target `make verified`.)
SOURCES    := conf.py index.rst references.bib verified/. $(shell find chapters gallery _static _ext verified \
                -name __pycache__ -prune -o -name .ruff_cache -prune -o -path verified -o -print)
STAMP      := $(BUILDDIR)/.html-built
# The installer of the set-up (pip installs it into the venv first).
UV_VERSION := 0.13.9
# No network at build time: Hugging Face models are built from configs, never downloaded
# (the pages that use transformers set it too, for a reader who runs them as scripts).
export HF_HUB_OFFLINE := 1

.PHONY: help html verified test bench clean livehtml serve venv FORCE

help:
	@echo "make html      build the site into $(BUILDDIR)/html (runs every changed page)"
	@echo "make verified  after a complete make html: this machine's claim records -> verified/"
	@echo "make test      run the test suite (clean build, standalone scripts, notebooks, failing claims)"
	@echo "make bench     time a clean build, a no-op rebuild and a one-page rebuild (no asserts)"
	@echo "make livehtml  live preview on http://127.0.0.1:8000, reloads on save"
	@echo "make serve     serve the built site on http://127.0.0.1:8000 (search with quotes)"
	@echo "make clean     remove the build and every generated page"

# The stamp is newer than requirements.txt exactly when the venv matches it.
$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed, found " + sys.version)'
	$(PYTHON) -m venv $(VENV)
	@# uv (pinned) installs the pinned requirements in seconds (pip took about 100 s on 2
	@# cores); where uv cannot be installed or fails, pip does it. Both take torch from the
	@# wheels folder the machine's pip is told of (PIP_FIND_LINKS), if any. Both write the
	@# packages' bytecode (uv only when asked: --compile-bytecode), about 13 s on 2 cores once:
	@# where PYTHONDONTWRITEBYTECODE is set, every Python process would otherwise compile what
	@# it imports from source again (import torch 2.3 s instead of 1.1 s; Sphinx 0.8 s, 0.3 s).
	@if $(PY) -m pip install -qq --disable-pip-version-check uv==$(UV_VERSION); then \
	  $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) \
	    $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) -r requirements.txt \
	  || { echo "uv failed: installing with pip instead"; \
	       $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt; }; \
	else echo "uv $(UV_VERSION) could not be installed: installing with pip instead"; \
	  $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt; fi
	touch $@

venv: $(VENV)/.installed

html: $(STAMP)

# The stamp gets the time the build started, so a file saved during a build is newer than it.
# PAGE=... builds run every time and leave no stamp: they executed only some pages.
$(STAMP): $(VENV)/.installed $(SOURCES) $(BUILDDIR)/machine.txt $(if $(PAGE),FORCE)
	@rm -f $@ && mkdir -p $(BUILDDIR) && touch $@.start
	PAGE='$(PAGE)' $(PY) -m sphinx -b html $(SPHINXOPTS) . $(BUILDDIR)/html
	@$(if $(PAGE),rm -f $@.start,mv $@.start $@)

$(BUILDDIR)/machine.txt: FORCE $(VENV)/.installed
	@$(PY) _ext/machine.py $@

FORCE:

# This machine's claim records, of a complete and current build, into one committed file
# verified/<device>-<device name>-torch<version>.json; refuses (exit 1) otherwise.
verified: venv
	@$(PY) _ext/claim_files.py export

# Test processes (pytest-xdist): as many as JOBS; TESTJOBS=1 runs the tests in one process.
# The clean build they read is made once and shared (tests/conftest.py). A test file stays in
# one process (--dist loadfile), so its module fixtures (a browser, the page runner, the
# notebook kernels) are made once. (--dist loadgroup does not group under pytest 9.2 with
# pytest-xdist 3.8: tried.)
TESTJOBS   ?= $(JOBS)
test: venv
	$(PY) -m pytest $(if $(filter-out 1,$(TESTJOBS)),-n $(TESTJOBS) --dist loadfile)

bench: venv
	$(PY) tools/bench.py $(BENCHOPTS)

livehtml: venv
	PAGE='$(PAGE)' $(VENV)/bin/sphinx-autobuild -b html --keep-going -n -j $(JOBS) . $(BUILDDIR)/html \
		--watch gallery --watch verified --ignore '$(BUILDDIR)/*' --ignore 'generated/*' --ignore 'sg_execution_times.rst'

clean:
	rm -rf $(BUILDDIR) generated sg_execution_times.rst

# The built site over HTTP on this machine only: the search quotes each result's text, which
# a page opened from disk (file://) may not fetch.
serve: html
	@echo "Serving $(BUILDDIR)/html on http://127.0.0.1:8000 (Ctrl-C stops)"
	$(PY) -m http.server 8000 --bind 127.0.0.1 --directory $(BUILDDIR)/html
