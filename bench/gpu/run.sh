#!/usr/bin/env bash
# The GPU check (bench/gpu/README.md), one prepared script for the device machine: run from the repository
# root there, with the packed SmolLM2 shape in .gpu/smollm2 and TRL's wheels in .whl (both carried).
# Writes its JSON results and log under $OUT (or var/gpu-check).
set -uo pipefail
out="${OUT:-var/gpu-check}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH="/tmp/site:$PWD"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, transformers, peft, trl; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'peft', peft.__version__, 'trl', trl.__version__, 'cuda', torch.cuda.is_available())"
    python3 bench/gpu/shape.py --like .gpu/smollm2 --out /tmp/smollm2-shape
    echo "== workers.engines.distributed under torchrun (FSDP2, NCCL), SFT"
    timeout 180 python3 bench/gpu/distributed.py --model /tmp/smollm2-shape --steps 20 --batch-size 32 \
        --out "$out/distributed-cuda.json"
    echo "== the trainer benchmark on the GPU: SmolLM2-135M's shape, full and LoRA, ours vs TRL"
    timeout 300 python3 bench/training/run.py --model smollm2 --model-dir /tmp/smollm2-shape --device cuda \
        --mode both --rounds "${GPU_ROUNDS:-2}" --steps 5 --group-size "${GPU_GROUP:-32}" --no-variants \
        --ours-python python3 --trl-python python3 --out "$out/training-smollm2-cuda.json"
    if [ -n "${GPU_LAYOUTS:-}" ]; then
        # Our trainer alone, full fine-tuning, one process per layout: where the GPU gap to TRL comes from.
        for layout in prefix padded; do
            echo "== ours, full, layout $layout"
            timeout 120 python3 bench/training/ours.py --model /tmp/smollm2-shape --device cuda --layout "$layout" \
                --steps 5 --group-size "${GPU_GROUP:-32}" --completion-tokens 32 > "$out/ours-$layout.json"
            python3 -c "import json, statistics as s, sys; r = json.load(open(sys.argv[1])); \
print(r['layout'], 'train tokens/s', round(sum(r['tokens']) / sum(r['train_seconds'])), \
'median step s', round(s.median(r['train_seconds']), 3), 'peak GPU MB', round(r['peak_gpu_mb']))" "$out/ours-$layout.json"
        done
    fi
} 2>&1 | tee "$out/gpu-check.log"
