#!/usr/bin/env bash
# Build one environment of the compatibility matrix (see tests/compat/README.md):
#   tests/compat/build_env.sh NAME DIR
# NAME: mf1.7 | mf1.8 | mf1.9 | mf1.9-ms2.10 | mf2.0 | checkout-r1.7 | checkout-r1.8. DIR: the virtual environment to create.
# Idempotent: DIR/.built holds the recipe it was built with; an environment with the same recipe is
# reused, any other content of DIR (a virtual environment) is rebuilt from scratch.
# checkout-*: MindSpore and the release's requirements but no installed mindformers, plus a stand-in
# release checkout in DIR/mindformers-checkout (the release's wheel unpacked, its run_mindformer.py at the root).
set -euo pipefail

name="${1:?usage: build_env.sh NAME DIR}"
dir="$(realpath -m "${2:?usage: build_env.sh NAME DIR}")"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
log() { echo "[build_env $name] $*"; }
sha() { sha256sum "$@" | cut -c1-16 | tr '\n' ' '; }

case "$name" in
  mf1.7) pair=(mindspore==2.7.1 mindformers==1.7.0) ;;
  mf1.8) pair=(mindspore==2.7.2 mindformers==1.8.0) ;;
  mf1.9) pair=(mindspore==2.9.0 mindformers==1.9.0) ;;
  mf1.9-ms2.10) pair=(mindspore==2.10.0 mindformers==1.9.0) ;;
  mf2.0) pair=(mindspore==2.10.0 mindformers==2.0.0) ;;
  checkout-r1.7) pair=(mindspore==2.7.1 mindformers==1.7.0) branch=r1.7.0 ;;
  checkout-r1.8) pair=(mindspore==2.7.2 mindformers==1.8.0) branch=r1.8.0 ;;
  *) echo "build_env.sh: unknown environment '$name'" >&2; exit 2 ;;
esac

# mindformers 2.0.0's requirements other than hyper-parallel (not on the package registry); pyarrow
# pinned: newer ones need numpy 2, mindformers needs numpy<2.
mf20_requirements=('setuptools>=83.0.0' 'sentencepiece>=0.2.1' 'ftfy>=6.1.1' 'regex>=2022.10.31' 'tqdm>=4.65.0'
  'pyyaml>=6.0' 'jieba>=0.42.1' 'rouge_chinese>=1.0.3' 'nltk==3.9.1' 'mindpet==1.0.4' opencv-python-headless
  'pyarrow==23.0.1' tokenizers 'astunparse>=1.6.3' 'numpy<2.0.0' tiktoken jinja2 setproctitle safetensors
  tensorboardX 'deprecated>=1.2.0' pybind11 'transformers==4.57.1' 'datasets>=4.0.0' 'mindspore==2.10.0')

# mindformers 1.9.0's requirements other than its mindspore~=2.9.0 (for a site that moved MindSpore on).
mf19_requirements=(setuptools 'sentencepiece>=0.2.0' 'ftfy>=6.1.1' 'regex>=2022.10.31' 'tqdm>=4.65.0' 'pyyaml>=6.0'
  'jieba>=0.42.1' 'rouge_chinese>=1.0.3' 'nltk==3.9.1' 'mindpet==1.0.4' opencv-python-headless 'pyarrow==19.0.0'
  tokenizers 'astunparse>=1.6.3' 'numpy<2.0.0' tiktoken jinja2 setproctitle safetensors tensorboardX
  'deprecated>=1.2.0' pybind11 'transformers==4.57.1' 'datasets>=4.0.0' 'mindspore==2.10.0')

# The recipe, written to the stamp: a change to it (or to a vendored file it uses) rebuilds the environment.
case "$name" in
  mf2.0)
    recipe="pip install ${pair[0]}; pip install --no-deps ${pair[1]}; pip install ${mf20_requirements[*]};"
    recipe+=" hyper-parallel from mf2x_cpu: $(sha "$here"/mf2x_cpu/{hyper-parallel-fdd0a80.tar.gz,patch_hp.sh,autograd_compat.py})"
    ;;
  mf1.9-ms2.10)
    recipe="pip install ${pair[0]}; pip install --no-deps ${pair[1]}; pip install ${mf19_requirements[*]}"
    ;;
  checkout-*)
    recipe="pip install ${pair[*]}; pip uninstall mindformers;"
    recipe+=" checkout: ${pair[1]} wheel + $branch/run_mindformer.py $(sha "$here/run_mindformer/$branch/run_mindformer.py")"
    ;;
  *) recipe="pip install ${pair[*]}" ;;
esac
recipe="$name: $("$python" --version 2>&1): $recipe"

if [[ -f "$dir/.built" && "$(cat "$dir/.built")" == "$recipe" ]]; then
  log "reusing $dir"
  exit 0
fi
if [[ -e "$dir" ]]; then
  [[ -f "$dir/pyvenv.cfg" ]] || { echo "build_env.sh: $dir exists and is not a virtual environment; not touching it" >&2; exit 2; }
  log "recipe changed or build incomplete: removing $dir"
  rm -rf "$dir"
fi

log "creating $dir ($("$python" --version 2>&1))"
"$python" -m venv "$dir"
py="$dir/bin/python"
pip=("$py" -m pip install -q)
"${pip[@]}" --upgrade pip

case "$name" in
  mf2.0)
    log "pip install ${pair[0]}; ${pair[1]} without its requirements, then those but hyper-parallel"
    "${pip[@]}" "${pair[0]}"
    "${pip[@]}" --no-deps "${pair[1]}"
    "${pip[@]}" "${mf20_requirements[@]}"
    log "hyper-parallel: vendored snapshot, reshaped to the 1.0 import layout by patch_hp.sh"
    src="$(mktemp -d)"
    tar -xzf "$here/mf2x_cpu/hyper-parallel-fdd0a80.tar.gz" -C "$src"
    "${pip[@]}" --no-deps --no-build-isolation "$src/hyper-parallel"
    rm -rf "$src"
    hp="$("$py" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("hyper_parallel").origin))')"
    bash "$here/mf2x_cpu/patch_hp.sh" "$hp"
    # (importing mindformers writes output/log below the working directory: check from a scratch one)
    (cd "$(mktemp -d)" && "$py" -c "from mindformers.pynative.trainer import Trainer; import mindformers; print('[build_env $name] mindformers', mindformers.__version__, 'PyNative trainer imports')")
    ;;
  mf1.9-ms2.10)
    log "pip install ${pair[0]}; ${pair[1]} without its requirements (it asks for mindspore~=2.9.0), then the others"
    "${pip[@]}" "${pair[0]}"
    "${pip[@]}" --no-deps "${pair[1]}"
    "${pip[@]}" "${mf19_requirements[@]}"
    ;;
  checkout-*)
    log "pip install ${pair[*]}, then pip uninstall mindformers (its requirements stay)"
    "${pip[@]}" "${pair[@]}"
    "$py" -m pip uninstall -q -y mindformers
    checkout="$dir/mindformers-checkout"
    log "stand-in $branch checkout: ${pair[1]} wheel unpacked into $checkout, $branch's run_mindformer.py at its root"
    wheels="$(mktemp -d)"
    "$py" -m pip download -q --no-deps --dest "$wheels" "${pair[1]}"
    mkdir -p "$checkout"
    "$py" -m zipfile -e "$wheels"/mindformers-*.whl "$checkout"
    rm -rf "$wheels" "$checkout"/mindformers-*.dist-info  # a source checkout has no installed-package metadata
    cp "$here/run_mindformer/$branch/run_mindformer.py" "$checkout/"
    ;;
  *)
    log "pip install ${pair[*]}"
    "${pip[@]}" "${pair[@]}"
    ;;
esac

echo "$recipe" > "$dir/.built"
log "done: $("$py" -c 'import importlib.metadata as m
for d in ("mindspore", "mindformers"):
    try:
        print(f"{d}=={m.version(d)}", end=" ")
    except m.PackageNotFoundError:
        print(f"{d}: not installed", end=" ")')"
