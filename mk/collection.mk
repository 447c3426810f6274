# The kdtree.fleet collection: roles/, plugins/, playbooks/, molecule/, inventory/ (docs/operations.md).
.PHONY: demo lint-ansible test-roles-fast test-repository test-units-fast test-traffic-fleet test-molecule test-molecule-default test-molecule-crash \
	test-molecule-rollback test-molecule-operator test-molecule-batch test-molecule-faults test-molecule-engine collection release bench-smoke bench-noop bench-fleet

FLEET_LOG_DIR := $(ROOT)/.cache/fleet

# Build the local test fleet, deploy to it and print the fleet report.
# Build the local test fleet (three hosts with the SGLang test double, one with the real engine), deploy
# to all four; the deploy ends with the fleet report (one line per host: patched schedulers, kernel
# calls, fallbacks, ...; the JSON path it prints).
demo: venv fleet-up engine-host-up
	@mkdir -p $(FLEET_LOG_DIR)
	@set -o pipefail; ansible-playbook playbooks/deploy.yml -l gpu-hosts 2>&1 | tee $(FLEET_LOG_DIR)/demo.log

# ansible-lint of the whole collection (production profile).
# ansible-lint, production profile, configured by .ansible-lint (the collection as a whole).
lint-ansible: venv
	$(VBIN)/ansible-lint

# The collection tarball: build/kdtree-fleet-<version>.tar.gz.
# The collection tarball a user installs or Galaxy imports: build/kdtree-fleet-<version>.tar.gz, the
# publish checks' build (scripts/publish/build.sh). galaxy.yml's `repository` is this clone's origin
# or COLLECTION_REPOSITORY=<url>; with neither it refuses (scripts/publish/repository.sh).
collection: venv
	@scripts/publish/build.sh $(VENV) $(ROOT)/build

# Tag HEAD v<galaxy.yml version> and build its tarball (docs/release.md).
# Refuses a dirty tree, an existing tag, a version the changelog has not released and fragments left
# unreleased (scripts/publish/release.sh); the tag is local: git push origin v<version> publishes it.
release: venv
	@scripts/publish/release.sh $(VENV) $(ROOT)/build

# The roles, playbooks and modules run on localhost (no containers).
# The roles and the tools around them: the drop-in template, modules and roles run through
# ansible/ansible-playbook on localhost (no containers). The plugins' own logic: tests/unit; the checks
# of the repository as a whole: tests/repository (test-repository).
test-roles-fast: venv
	$(VBIN)/pytest -q tests/roles

# The repository-wide checks: docs, make targets, role interfaces, plugin layers.
# What holds across the repository, read from its files (tests/repository): names and paths the docs
# give exist, every make target is listed in `make help`, each role's interface is declared once, one
# owner per fact, module_utils import nothing of the controller's, the whole test tree collects; and
# make test's own timing table (tests/ci, scripts/testtime.py).
test-repository: venv
	$(VBIN)/pytest -q tests/repository tests/ci

# The plugins' unit tests (tests/unit) with the tools venv's pytest; make test runs them with
# ansible-test units instead (test-publish-units, mk/publish.mk).
test-units-fast: venv
	$(VBIN)/pytest -q tests/unit

# The drain and the bake under traffic on real test hosts, behind the real router, with Prometheus.
# tests/trafficfleet: three double hosts of their own (kdtree-traffic1..3, removed afterwards) behind
# sglang-router under continuous streamed traffic, scraped by a real Prometheus: a drained deploy whose
# bake passes, a drained crash deploy rolled back, a slowed host's batch rolled back by the bake read from
# Prometheus, a drained rollback.yml (none drops a request), and the control with the drain and the
# router's retries off (requests fail). docs/drain.md, docs/bake.md.
test-traffic-fleet: venv router-venv testhost-image collection-link system-deps
	KDTREE_REQUIRE_PROMETHEUS=1 KDTREE_ROUTER_VENV=$(ROUTER_VENV) $(VBIN)/pytest -q -s tests/trafficfleet
TEST_TARGETS += test-traffic-fleet

# Molecule on real systemd hosts (podman): every scenario, MOLECULE_JOBS (2) side by side; the shared
# base is .config/molecule/config.yml. Each scenario has its own host (kdtree-mol-<scenario>) and its
# output is printed whole when it ends. The list is the start order: default (whose kernel build the
# later scenarios seed from) and engine (the longest) first; oldest (the real engine on the window's
# oldest release) next, beside it. default also deploys as a user would, from the installed tarball in a
# separate project (its side effect, molecule/default/consumer.yml).
MOLECULE_JOBS ?= 2
MOLECULE_SCENARIOS := default engine oldest crash rollback operator batch faults
# Every molecule scenario, MOLECULE_JOBS (2) at a time.
test-molecule: venv collection-link testhost-image engine-model sglang-venv-oldest publish-venv-core-2.21
	@start=$$(date +%s); $(MAKE) --no-print-directory -j$(MOLECULE_JOBS) --output-sync=target \
	  $(MOLECULE_SCENARIOS:%=molecule-run-%); \
	  echo "molecule: $(words $(MOLECULE_SCENARIOS)) scenarios passed in $$(( $$(date +%s) - start )) s ($(MOLECULE_JOBS) at a time)"

# One molecule scenario on its own test host (crash, rollback, operator, batch, faults).
test-molecule-crash test-molecule-rollback test-molecule-operator test-molecule-batch \
  test-molecule-faults: test-molecule-%: venv collection-link testhost-image
	@$(MOLECULE_RUN)

# Molecule's default scenario: check mode, deploy, idempotence, every tag, then as a user would.
# Its side effect deploys as a user does: the tarball installed into a project of its own with
# ansible-core 2.21 (mk/publish.mk's core-2.21 venv), a rollback to stock and a first deploy from there.
test-molecule-default: test-molecule-%: venv collection-link testhost-image publish-venv-core-2.21
	@$(MOLECULE_RUN)

# Molecule's engine scenario: the real SGLang engine on a test host.
# The real SGLang engine (tests/engine): deploy + generation equality + dispatch counts, rollback, crash.
test-molecule-engine: test-molecule-%: venv collection-link testhost-image engine-model
	@$(MOLECULE_RUN)

# Molecule's oldest scenario: the real engine on the oldest release.
# The real SGLang engine on the window's oldest release (its own venv): one NGRAM deploy in validate,
# smoke traffic, compared calls and no mismatch.
test-molecule-oldest: test-molecule-%: venv collection-link testhost-image engine-model sglang-venv-oldest
	@$(MOLECULE_RUN)

# The recipe alone, no prerequisites (test-molecule has made them): make -j starts these in list order.
molecule-run-%: collection-link
	@$(MOLECULE_RUN)

MOLECULE_RUN = start=$$(date +%s); molecule test -s $*; \
	echo "molecule $*: passed in $$(( $$(date +%s) - start )) s"

# Time from a crash traceback to the failed host (double, engine, batch).
# Time from the traceback reaching the journal to Ansible failing the host (child crash 3 s in).
# The same for the real engine (a model path that does not exist): engine_detect_s. And in a batch of
# four (the three double hosts and the engine host), kdtree-host2 crashing: batch_detect_s.
bench-smoke: venv fleet-up engine-host-up
	$(VBIN)/python bench/smoke.py --host kdtree-host1 --crash double
	$(VBIN)/python bench/smoke.py --host $(ENGINE_HOST) --crash missing-model
	$(VBIN)/python bench/smoke.py --batch kdtree-host1,kdtree-host2,kdtree-host3,$(ENGINE_HOST)

# A second deploy over the three hosts: wall time and changed=0.
bench-noop: venv fleet-up
	$(VBIN)/python bench/noop.py

# Fleet sizes of make bench-fleet (comma-separated).
BENCH_FLEET_SIZES ?= 1,4,8,16
# Deploy, no-op and rollback times over fleets of 1 to 16 hosts (long).
# Not part of make bench (it takes long): deploy (warm build cache), no-op redeploy and rollback over
# fresh fleets of $(BENCH_FLEET_SIZES) test-double hosts of its own (kdtree-bench-h*), wall time per run
# and per canary batch (bench/fleet.py); its containers are removed afterwards.
bench-fleet: venv collection-link testhost-image
	$(VBIN)/python bench/fleet.py --sizes $(BENCH_FLEET_SIZES)

LINT_TARGETS += lint-ansible
TEST_FAST_TARGETS += test-roles-fast test-repository test-units-fast
TEST_TARGETS += test-roles-fast test-repository test-molecule
