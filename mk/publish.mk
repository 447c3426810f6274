# Publishing checks (issue 20): what Galaxy / Automation Hub and the maintained ansible-core releases
# ask of the collection. Venvs are cached under .cache/publish (scripts/publish/venv.sh; CI keeps .cache).
.PHONY: test-publish publish-venvs test-publish-sanity test-publish-sanity-older test-publish-units test-publish-importer \
	test-publish-docs test-publish-changelog test-publish-ee test-publish-build ee-context

# PUB: where the venvs live (a cold-cache measurement points it at an empty directory).
PUB ?= $(ROOT)/.cache/publish
PUB_PYTHON ?= $(firstword $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) python3.12)
PUB_OUT := $(ROOT)/build/publish
PUB_TARBALL = $(PUB_OUT)/kdtree-fleet-$(shell sed -n 's/^version: *//p' galaxy.yml).tar.gz
PUB_TIME = start=$$(date +%s); trap 'echo "$@: $$(( $$(date +%s) - start )) s"' EXIT;

# The check venvs: ansible-core 2.19, 2.20, 2.21 and the publishing tools.
# The check venvs: ansible-core 2.19, 2.20, 2.21 (2.20 and 2.21 need a Python >= 3.12 controller:
# PUB_PYTHON), the docs, changelog and builder tools (in 2.21's) and Galaxy's importer.
# Built side by side (pip downloads and installs overlap; each venv has its own lock), then all waited for.
publish-venvs:
	@pids=(); for kind in core-2.19 core-2.20 core-2.21 importer; do \
	  scripts/publish/venv.sh $(PUB)/$$kind $$kind $(PUB_PYTHON) & pids+=($$!); done; \
	  for pid in "$${pids[@]}"; do wait "$$pid"; done

# One check venv alone, e.g. publish-venv-core-2.21 (the consumer molecule scenario's user Ansible).
publish-venv-%:
	@scripts/publish/venv.sh $(PUB)/$* $* $(PUB_PYTHON)

# Molecule default's consumer side effect (molecule/default/consumer.yml) deploys as a user with the
# newest supported release.
export KDTREE_CONSUMER_VENV = $(PUB)/core-2.21

# ansible-test sanity on 2.21, every test.
# ansible-test sanity, every test, with the newest supported ansible-core (2.21), on the controller's
# Python: on the repository tree as a clone holds it (what the tarball leaves out too: tests,
# benchmarks, scripts, molecule; symlinks, shebangs, file names, yamllint, pep8, compile ...), except
# pylint and shellcheck, which hold the shipped code to Ansible's rules and run on the shipped tree (the
# project's own tests, benchmarks and scripts follow ruff, make lint: pylint and shellcheck of the whole
# repository find 104 + 9 style points there and cost ~18 minutes); then import and compile on
# Python 3.9, the oldest host Python (tests/config.yml). One pass over each file, one test each.
test-publish-sanity: publish-venvs
	@$(PUB_TIME) scripts/publish/ansible-test.sh $(PUB)/core-2.21 repo sanity --python 3.12 \
	    --skip-test pylint --skip-test shellcheck && \
	  scripts/publish/ansible-test.sh $(PUB)/core-2.21 shipped sanity --python 3.12 \
	    --test pylint --test shellcheck && \
	  scripts/publish/ansible-test.sh $(PUB)/core-2.21 shipped sanity --python 3.9 --test import --test compile

# ansible-test sanity's subset on 2.19 and 2.20.
# The older maintained releases (2.19, 2.20): validate-modules, import, and ansible-doc of every plugin and role.
test-publish-sanity-older: publish-venvs collection-link
	@$(PUB_TIME) for core in 2.19 2.20; do \
	  scripts/publish/ansible-test.sh $(PUB)/core-$$core shipped sanity --python 3.12 \
	    --test validate-modules --test import --test ansible-doc || exit 1; \
	  ANSIBLE_COLLECTIONS_PATH=$(ROOT)/collections $(PUB)/core-$$core/bin/ansible-doc -t role \
	    $$(ls roles | sed 's/^/kdtree.fleet./') >/dev/null || exit 1; done

# The plugins' unit tests as ansible-test units runs them (2.21).
# The plugins' unit tests (tests/unit, laid out as plugins/) as ansible-test units runs them: the newest
# supported release on its Python 3.12 controller, in the shipped tree, --local: core-2.21's pytest (a
# venv of ansible-test's own cost ~170 s more here). make test-fast runs them with the tools venv's
# pytest: test-units-fast.
test-publish-units: publish-venv-core-2.21
	@$(PUB_TIME) scripts/publish/ansible-test.sh $(PUB)/core-2.21 shipped units --python 3.12

# Galaxy's importer accepts the tarball.
# Galaxy's importer accepts the tarball (metadata, a README per role, the docs of every plugin and role).
# The tarball is make collection's; in a clone with no repository URL (scripts/publish/repository.sh)
# it names a stand-in, example.invalid: the importer checks that a URL is there, not which.
test-publish-importer: publish-venvs
	@$(PUB_TIME) repo=$$(scripts/publish/repository.sh 2>/dev/null) || \
	  { repo=https://example.invalid/kdtree-fleet.git; echo "$@: no repository URL here: $$repo"; }; \
	  COLLECTION_REPOSITORY=$$repo scripts/publish/build.sh $(PUB)/core-2.21 $(PUB_OUT) >/dev/null && \
	  scripts/publish/importer.sh $(PUB)/importer $(PUB_TARBALL)

# The docs site's build (antsibull-docs) and every filter's doc.
# The docs the docs site renders (antsibull-docs), every filter documented (ansible-doc -t filter).
test-publish-docs: publish-venvs collection-link
	@$(PUB_TIME) PATH=$(PUB)/core-2.21/bin:$$PATH ANSIBLE_COLLECTIONS_PATH=$(ROOT)/collections \
	  antsibull-docs lint-collection-docs --plugin-docs . && \
	  ANSIBLE_COLLECTIONS_PATH=$(ROOT)/collections $(PUB)/core-2.21/bin/ansible-doc -t filter \
	    $$(ls plugins/filter/*.yml | xargs -n1 basename | sed 's/\.yml$$//; s/^/kdtree.fleet./') >/dev/null

# The changelog's fragments lint; CHANGELOG.md is what generate writes.
# The changelog: changelogs/changelog.yaml and its fragments lint; CHANGELOG.md is what `generate` writes.
test-publish-changelog: publish-venvs
	@$(PUB_TIME) $(PUB)/core-2.21/bin/antsibull-changelog lint && mkdir -p $(PUB_OUT) && \
	  cp CHANGELOG.md $(PUB_OUT)/CHANGELOG.md.before && $(PUB)/core-2.21/bin/antsibull-changelog generate && \
	  if ! cmp -s $(PUB_OUT)/CHANGELOG.md.before CHANGELOG.md; then \
	    diff -u CHANGELOG.md $(PUB_OUT)/CHANGELOG.md.before || true; cp $(PUB_OUT)/CHANGELOG.md.before CHANGELOG.md; \
	    echo "CHANGELOG.md is not what antsibull-changelog generate writes: add a fragment, do not edit it" >&2; exit 1; fi

# ee-context's output directory and source (empty: this clone's tarball).
EE_OUT := $(ROOT)/build/ee
EE_REF ?=

# An execution environment build context (build/ee/context) with this clone's tarball.
# With EE_REF=<git ref> (a release tag: make release) from the repository at that ref instead (the
# URL: scripts/publish/repository.sh). scripts/publish/ee.py writes build/ee/execution-environment.yml
# from meta/execution-environment.yml; then `podman build -t kdtree-fleet-ee build/ee/context`.
ee-context: publish-venv-core-2.21
	@if [[ -n "$(EE_REF)" ]]; then src=(--git-ref "$(EE_REF)" --repository "$$(scripts/publish/repository.sh)"); \
	  else scripts/publish/build.sh $(PUB)/core-2.21 $(PUB_OUT) >/dev/null && src=(--tarball $(PUB_TARBALL)); fi; \
	  $(PUB)/core-2.21/bin/python scripts/publish/ee.py --out $(EE_OUT) "$${src[@]}"

# The execution environment's build context from a tarball and from a git ref.
# ansible-builder create on the definition scripts/publish/ee.py writes, for a local tarball and for a
# git ref: the context installs that source (tests/publish/test_execution_environment.py; no image is
# built here: no container build).
test-publish-ee: venv publish-venvs
	@$(PUB_TIME) KDTREE_PUBLISH_VENV=$(PUB)/core-2.21 $(VBIN)/pytest -q -p no:cacheprovider \
	  tests/publish/test_execution_environment.py

# make collection's and make release's tarball and refusals.
# make collection in a copy of this clone: refuses without a repository URL (no origin), with one its
# tarball's MANIFEST.json names it; make release tags v<version> once, refuses a second time
# (tests/publish/test_collection_build.py).
test-publish-build: venv
	@$(PUB_TIME) $(VBIN)/pytest -q -p no:cacheprovider tests/publish/test_collection_build.py

# Every publishing check above, one after the other (about 4 min).
# Everything above (about 4 minutes on 2 cores with the venvs cached), one after the other even under
# make -j (make test's phases): they share the trees under build/publish, which each one makes afresh.
test-publish: publish-venvs
	@$(MAKE) --no-print-directory -j1 test-publish-sanity test-publish-sanity-older test-publish-units \
	  test-publish-importer test-publish-docs test-publish-changelog test-publish-ee test-publish-build

TEST_TARGETS += test-publish
