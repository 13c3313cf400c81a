# Two commands do everything on a fresh clone:
#   make html   set up .venv from requirements.txt if missing or stale, run every page, build the site
#   make test   same set-up, then the test suite (tests/)
# See README.md for the rest (make clean, make livehtml, PAGE=...).

PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
BUILDDIR   ?= _build
# Warnings are errors, nitpicky cross-references, report every failure before exiting.
SPHINXOPTS ?= -W --keep-going -n
# Only execute gallery pages whose path matches this regex (e.g. PAGE=batchnorm).
PAGE       ?=

.PHONY: help html test bench clean livehtml venv

help:
	@echo "make html      build the site into $(BUILDDIR)/html (runs every changed page)"
	@echo "make test      run the test suite (clean build, standalone scripts, notebooks, failing claims)"
	@echo "make bench     time a clean build, a no-op rebuild and a one-page rebuild (no asserts)"
	@echo "make livehtml  live preview on http://127.0.0.1:8000, reloads on save"
	@echo "make clean     remove the build and every generated page"

# The stamp is newer than requirements.txt exactly when the venv matches it.
$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed, found " + sys.version)'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

venv: $(VENV)/.installed

html: venv
	PAGE='$(PAGE)' $(PY) -m sphinx -b html $(SPHINXOPTS) . $(BUILDDIR)/html

test: venv
	$(PY) -m pytest

bench: venv
	$(PY) tests/bench.py $(BENCHOPTS)

livehtml: venv
	PAGE='$(PAGE)' $(VENV)/bin/sphinx-autobuild -b html --keep-going -n . $(BUILDDIR)/html \
		--watch gallery --ignore '$(BUILDDIR)/*' --ignore 'generated/*' --ignore 'sg_execution_times.rst' --ignore 'jupyter_execute/*'

clean:
	rm -rf $(BUILDDIR) generated jupyter_execute sg_execution_times.rst
