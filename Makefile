# The two commands of the README's quick start, and the pieces they are made of.
#   make sweep   set up orch + PyTorch (CPU) in .venv and run `orch sweep --nodes 1,2,4` here
#   make docs    build the documentation site into site/ (warnings fail the build)
#   make test    set up the test tools and the 4-node test Slurm cluster (as root), run all tests
# CI (.ci/run) calls `make test`.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: sweep test docs lint envs cluster-up cluster-down container-tools browser images clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch==2.13.0 is the CPU wheel (an unpinned torch would pull a multi-GB CUDA build).
	# docs: MkDocs, which tests/test_docs_site.py builds the site with, as `make docs` does.
	# trainer: Hugging Face's Trainer, the PyPI trainer the trainer mode's how-to runs.
	$(BIN)/python -m pip install --quiet -e '.[torch,test,docs,trainer]'
	touch $@

sweep: $(STAMP)
	$(BIN)/orch sweep --nodes 1,2,4

# The Slurm-backed tests need root to install and start the test cluster; without root they
# skip, except under CI=true where they fail.
cluster-up:
	@if [ "$$(id -u)" = 0 ]; then scripts/testcluster up; \
	else echo "not root: the test Slurm cluster is not started (its tests will skip)"; fi

cluster-down:
	scripts/testcluster down

# Charliecloud's runtime and the tools that build its images without a registry (as root).
# charliecloud-runtime only, --no-install-recommends: the `charliecloud` package pulls docker.io.
# shellcheck: tests/test_shellcheck.py lints every rendered script with it. siftool: SIF files
# (Apptainer's format) assembled without Apptainer, which Debian 12 does not package.
CONTAINER_TOOLS := charliecloud-runtime debootstrap squashfs-tools siftool shellcheck
container-tools:
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "not root: container tools not installed (the Charliecloud tests will skip)"; \
	elif ! dpkg -s $(CONTAINER_TOOLS) >/dev/null 2>&1; then \
	  apt-get -o DPkg::Lock::Timeout=600 update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $(CONTAINER_TOOLS); fi

# Headless Chromium (Debian's package, no browser download at test time): tests/test_docs_site.py
# opens every page of the built documentation site in it (as root; without it that test skips,
# except under CI=true where it fails).
BROWSER_TOOLS := chromium-headless-shell
browser:
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "not root: headless Chromium not installed (the browser check of the docs will skip)"; \
	elif ! dpkg -s $(BROWSER_TOOLS) >/dev/null 2>&1; then \
	  apt-get -o DPkg::Lock::Timeout=600 update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $(BROWSER_TOOLS); fi

# The torch image (debootstrap + chroot, ~/.cache/orch/images, reused while its spec is
# unchanged), and torch.sif assembled from it with siftool (seconds, once the directory and its
# SquashFS exist). The tests build them too when they are missing.
images: $(STAMP) container-tools
	$(BIN)/orch container build torch --runtime charliecloud
	$(BIN)/orch container build torch --runtime apptainer

# Every framework environment the local site describes (the test cluster shares them), built
# once and reused while their descriptions do not change.
envs: $(STAMP)
	$(BIN)/orch env build --site local

# The documentation site (mkdocs.yml), strict: a broken link or anchor, a page missing from the
# nav or a nav entry without a page is an error, not a warning.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests benchmarks

test: $(STAMP) cluster-up container-tools browser lint envs
	$(BIN)/python -m pytest -ra --durations=40

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
