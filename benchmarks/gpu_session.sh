#!/usr/bin/env bash
# Every GPU measurement of the Atari recipe, as one command for a lent GPU machine (issue 12).
#
#   bash benchmarks/gpu_session.sh smoke   # ~3 min: GPU tests, update timings, short loop and sweep probes
#   bash benchmarks/gpu_session.sh final   # ~9.5 min: GPU tests, loop benchmark vs CleanRL, the Atari sweep
#   bash benchmarks/gpu_session.sh replay  # ~6 min: the replay on the device, and its share of the DQN loop (issue 23)
#   bash benchmarks/gpu_session.sh apex    # ~8 min: Ape-X's learner on the GPU, actors on the CPU cores
#                                          #   (issue 25): 1, 2, 4, 8, 14 actors; needs ray (gpu_wheels.sh ray)
#   bash benchmarks/gpu_session.sh device  # ~9.5 min: priorities on the device (issue 24): CUDA tests under
#                                          #   sync-debug mode, the captured replay step, every arm of the loop, CleanRL
#
# Needs the git-ignored .whl/ (gymnasium, ale-py, tyro, ... for Python 3.12) and .peer/cleanrl/
# (CleanRL's dqn_atari.py, see benchmarks/cleanrl_dqn.py) carried along; writes under $OUT.
set -u
stage=${1:-smoke}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "$stage" = apex ]; then  # ray travels in two halves (benchmarks/gpu_wheels.sh ray)
  cat .whl-ray/a .whl-ray/b > .whl/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl || { echo "ray halves missing"; exit 1; }
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
nproc
log() { echo "=== $(date +%T) $*"; }

if [ "$stage" = smoke ]; then
  log tests
  timeout 120 python3 -m pytest tests/test_dqn_update.py -q -p no:cacheprovider -x 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
  log update timings
  timeout 90 python3 -m benchmarks.gpu_update --block 20 --repeats 5 --out "$OUT/gpu_update.json" 2>&1 | tail -2
  log loop 16 envs overlap
  timeout 120 python3 -m benchmarks.atari_loop --device cuda --arms proportional --acting_steps 2000 --updates 1500 \
    --set num_envs=16 --set env_threads=8 --set overlap_env=true --out "$OUT/loop_probe.json" 2>&1 | tail -3
  log together probe
  timeout 150 python3 -m recipes.dqn together --env ALE/Breakout-v5 --arms uniform,proportional,rank --seeds 3 \
    --protocol atari100k --progress 0 --set device=cuda --set env_threads=4 --set total_steps=5600 \
    --set eval_envs=2 --set eval_steps=3000 --out "$OUT/together_probe.json" 2>&1 | tail -3
  log done
  exit 0
fi

if [ "$stage" = final ]; then
  log GPU tests
  timeout 90 python3 -m pytest tests/test_dqn_update.py -k cuda -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/gpu_tests.txt"
  log loop benchmark, every arm, and CleanRL
  timeout 200 python3 -m benchmarks.atari_loop_gpu --updates 2000 --out "$OUT/atari_loop_gpu.json" \
    --loop_out "$OUT/atari_loop_cuda.json" --cleanrl_out "$OUT/cleanrl_dqn.json" 2>&1 | grep -v "^ " | tail -6
  log sweep
  timeout 400 python3 -m recipes.dqn atari-sweep --games ALE/Pong-v5,ALE/Breakout-v5,ALE/Boxing-v5 \
    --arms uniform,proportional,rank --seeds 3 --protocol atari100k --device cuda --set env_threads=4 \
    --set time_budget_s=${SWEEP_TRAIN_S:-300} --out "$OUT/atari_sweep.json" 2>&1 | grep -v "^start" | tail -8
  log done
fi

if [ "$stage" = replay ]; then
  log replay step on the device, 10^6 transitions
  timeout 240 python3 -m benchmarks.replay_device --out "$OUT/replay_device.json" 2>&1 | tail -4
  log the replay share of the Double DQN loop, every arm, no CleanRL
  timeout 200 python3 -m benchmarks.atari_loop_gpu --updates 2000 --cleanrl_seconds 0 \
    --out "$OUT/atari_loop_gpu.json" --loop_out "$OUT/atari_loop_cuda.json" 2>&1 | grep -v "^ " | tail -6
  log done
fi

if [ "$stage" = device ]; then
  log device replay tests, sync debug mode
  timeout 150 python3 -m pytest tests/test_device_replay_cuda.py tests/test_device_sampler.py tests/test_device_tree.py \
    -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/gpu_device_tests.txt"
  log the replay step with the priorities on the device: eager, and sample+update captured as one graph
  timeout 90 python3 -m benchmarks.replay_device --backend device_proportional --n 262144 --steps 2000 \
    --out "$OUT/replay_device_graph.json" 2>&1 | tail -12
  log the loop, every arm, priorities on the device, and CleanRL
  timeout 320 python3 -m benchmarks.atari_loop_gpu --updates 2000 --arms uniform,proportional,rank \
    --out "$OUT/atari_loop_gpu.json" --loop_out "$OUT/atari_loop_cuda.json" --cleanrl_out "$OUT/cleanrl_dqn.json" \
    2>&1 | grep -v "^ " | tail -6
  log done
fi

if [ "$stage" = apex ]; then
  log Ape-X scaling, learner on the GPU, 60 s per actor count
  timeout 520 python3 -m recipes.apex scaling --env CartPole-v1 --actors 1,2,4,8,14 --seconds 60 --device cuda \
    --out "$OUT/apex_scaling_gpu" 2>&1 | tail -12
  log done
fi
