#!/usr/bin/env bash
# Here, before a GPU session (docs/SPEED.md, "A GPU session"): build what scripts/device/gpu_session.sh needs beside
# the tree, in folders .git/info/exclude ignores, all within the device tool's 64 MiB working-tree limit (about 62 MiB
# with the runs below; the paper-recipe run folder, 10 MiB, does not fit beside them: carry it in its own session).
#     bash scripts/device/prepare.sh [run folder ...]          then carry [".whl", ".gpu"]
set -eu
PY=${PY:-.venv/bin/python}
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gpu/\n' >> .git/info/exclude
rm -rf .whl .gpu; mkdir -p .whl .gpu/data/mnist .gpu/data/fashionmnist .gpu/runs
plat="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
# what the machine lacks (its README lists what it has); POT 0.9.5: 0.9.7's wheel is 33 MB
for p in hydra-core==1.3.8 omegaconf==2.3.1 dp-accounting==0.6.0 dm-tree==0.1.10 opacus==1.6.0 geomloss==0.3.1 \
         POT==0.9.5 PyWavelets==1.9.0 pytorch-fid==0.3.0 prdc==0.2 submitit==1.5.4 hydra-submitit-launcher==1.2.0 \
         hydra-joblib-launcher==1.2.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: $plat -d .whl "$p"
done
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 autodp==0.2.3.1   # sdists only
W=$($PY -c "from dpgen.eval.fid import find_fid_weights; print(find_fid_weights())")
$PY scripts/device/fid_weights_pack.py pack "$W" .gpu/w
root=${DPGEN_DATA_ROOT:-../shared/data}
# MNIST's training split and both test splits: Fashion-MNIST's training split (22.6 MB as xz) does not fit beside
# the weights (measured 2026-12-02 with no run folder: 81 MiB with the tree), so its runs are CPU work here
for f in "$root"/mnist/*-ubyte.gz "$root"/fashionmnist/t10k-*-ubyte.gz; do
  zcat "$f" | xz -T2 -9e > .gpu/data/$(basename "$(dirname "$f")")/$(basename "$f" .gz).xz
done
for r in "$@"; do cp -r "$r" .gpu/runs/ && rm -rf ".gpu/runs/$(basename "$r")"/{samples.png,fid_partial}; done
sizes=$(du -sb .whl .gpu); echo "$sizes"
total=$(( ( $(awk '{s+=$1} END {print s}' <<< "$sizes") + $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) ) / 1048576 ))
echo "with the tree: $total MiB of 64"
[ "$total" -le 64 ] || { echo "too big for the device tool's 64 MiB: carry fewer run folders" >&2; exit 1; }
