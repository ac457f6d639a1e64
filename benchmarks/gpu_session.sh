#!/usr/bin/env bash
# Every GPU measurement of the Atari recipe, as one command for a lent GPU machine.
#
#   bash benchmarks/gpu_session.sh smoke   # ~3 min: GPU tests, update timings, short loop and sweep probes
#   bash benchmarks/gpu_session.sh final   # ~4 min: GPU tests, loop benchmark vs CleanRL
#   bash benchmarks/gpu_session.sh sweep   # ~7 min: the Atari 100k sweep (300 s of training)
#   bash benchmarks/gpu_session.sh replay  # ~6 min: the replay on the device, the sequence replay's device
#                                          #   tests on CUDA, and the replay's share of the DQN loop
#   bash benchmarks/gpu_session.sh apex    # at most 7.5 min: Ape-X's learner on the GPU, actors on the CPU cores
#                                          #   (the scaling study): 1, 2, 4, 8, 14 actors; needs ray (gpu_wheels.sh ray)
#   bash benchmarks/gpu_session.sh device  # at most 7.5 min (limits 60+120+60+200 s): priorities on the device:
#                                          #   the diagnosis of a first run (benchmarks/gpu_diagnose.py),
#                                          #   the device tests under sync-debug mode, the captured replay step
#                                          #   at 10^6 (fused kernels against tensor operations in the diagnosis),
#                                          #   the loop's arms and CleanRL
#   SOURCE_COMMIT=<sha> SOURCE_CLEAN=1 bash benchmarks/gpu_session.sh pong
#                                          # at most 450 s: the next run of the registered 10M-frame Pong
#                                          #   study (recipes/studies/atari_pong.py): a probe, then the run
#                                          #   if the loop meets the gate; merge its JSON here afterwards
#   DRY_RUN=1 bash benchmarks/gpu_session.sh device  # list the stage's steps and limits, run nothing
#
# Needs the git-ignored .whl/ (gymnasium, ale-py, tyro, ... for Python 3.12) and .peer/cleanrl/
# (CleanRL's dqn_atari.py, see benchmarks/cleanrl_dqn.py) carried along; writes under $OUT: each
# step's whole output in $OUT/<step>.log (printed in full, or its last lines, as the step ends),
# its exit status in $OUT/steps.txt, its JSON where it writes one.
set -u
stage=${1:-smoke}
OUT=${OUT:-/tmp/out}
DRY_RUN=${DRY_RUN:-0}
case "$stage" in
  smoke | final | sweep | replay | device | apex | pong) ;;
  *) echo "stage should be one of smoke, final, sweep, replay, device, apex, pong, but got stage=$stage"; exit 2 ;;
esac
mkdir -p "$OUT"
log() { echo "=== $(date +%T) $*"; }

# step NAME LIMIT SHOWN COMMAND...: COMMAND under `timeout LIMIT`, its output (stdout and stderr)
# kept whole in $OUT/NAME.log and shown as it comes (SHOWN=all) or its last SHOWN lines at the
# end; then its exit status (124: timed out).  DRY_RUN=1 only lists the step.
step() {
  local name=$1 limit=$2 shown=$3 rc
  shift 3
  if [ "$DRY_RUN" = 1 ]; then
    echo "step $name $limit $*"
    return 0
  fi
  log "$name (limit ${limit} s)"
  if [ "$shown" = all ]; then
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
  else
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    tail -n "$shown" "$OUT/$name.log"
  fi
  echo "$name $rc" >> "$OUT/steps.txt"
  log "$name rc=$rc$([ "$rc" = 124 ] && echo ' TIMED OUT')"
}

if [ "$DRY_RUN" != 1 ]; then
  if [ "$stage" = apex ]; then  # ray travels in two halves (benchmarks/gpu_wheels.sh ray)
    cat .whl-ray/a .whl-ray/b > .whl/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl || { echo "ray halves missing"; exit 1; }
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "=== WHEEL INSTALL FAILED: the steps that need gymnasium or ale-py will fail"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  nproc
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1

if [ "$stage" = smoke ]; then
  step gpu_tests 90 30 python3 -m pytest tests/test_dqn_update.py -q -rfE --tb=short -p no:cacheprovider -x
  step gpu_update 60 2 python3 -m benchmarks.gpu_update --block 20 --repeats 5 --out "$OUT/gpu_update.json"
  step loop_probe 120 3 python3 -m benchmarks.atari_loop --device cuda --arms proportional --acting_steps 2000 \
    --updates 1500 --set num_envs=16 --set env_threads=8 --set overlap_env=true --out "$OUT/loop_probe.json"
  step together_probe 150 3 python3 -m recipes.dqn together --env ALE/Breakout-v5 --arms uniform,proportional,rank \
    --seeds 3 --protocol atari100k --progress 0 --set device=cuda --set env_threads=4 --set total_steps=5600 \
    --set eval_envs=2 --set eval_steps=3000 --out "$OUT/together_probe.json"
  log done
  exit 0
fi

if [ "$stage" = final ]; then
  step gpu_tests 60 30 python3 -m pytest tests/test_dqn_update.py -k cuda -q -rfE --tb=short -p no:cacheprovider
  step atari_loop_gpu 170 6 python3 -m benchmarks.atari_loop_gpu --updates 2000 --out "$OUT/atari_loop_gpu.json" \
    --loop_out "$OUT/atari_loop_cuda.json" --cleanrl_out "$OUT/cleanrl_dqn.json"
  log done
fi

if [ "$stage" = sweep ]; then
  step atari_sweep 420 8 python3 -m recipes.dqn atari-sweep --games ALE/Pong-v5,ALE/Breakout-v5,ALE/Boxing-v5 \
    --arms uniform,proportional,rank --seeds 3 --protocol atari100k --device cuda --set env_threads=4 \
    --set time_budget_s=${SWEEP_TRAIN_S:-300} --out "$OUT/atari_sweep.json"
  log done
fi

if [ "$stage" = replay ]; then
  step replay_device 200 all python3 -m benchmarks.replay_device --out "$OUT/replay_device.json"
  # the sequence replay drawn and gathered on CUDA: batches equal the host's, no synchronisation
  step sequence_device_tests 40 20 python3 -m pytest tests/test_sequence_device.py -k cuda -q -rfE --tb=short \
    -p no:cacheprovider
  step atari_loop_gpu 200 6 python3 -m benchmarks.atari_loop_gpu --updates 2000 --cleanrl_seconds 0 \
    --out "$OUT/atari_loop_gpu.json" --loop_out "$OUT/atari_loop_cuda.json"
  log done
fi

if [ "$stage" = device ]; then
  # what a first run needs to tell: devices, the device update taken, 20 captured replays against
  # eager steps, CPU against CUDA draws (each phase a JSON line as it ends)
  step gpu_diagnose 60 all python3 -m benchmarks.gpu_diagnose --device cuda --out "$OUT/gpu_diagnose.json"
  step gpu_device_tests 120 40 python3 -m pytest tests/test_device_replay_cuda.py tests/test_gpu_diagnose.py \
    tests/test_replay_device_backend.py tests/test_replay_captured_step.py tests/test_device_sampler.py \
    tests/test_device_tree.py -q -rfE --tb=short --continue-on-collection-errors -p no:cacheprovider
  # the captured sample + update (CUDA events, target 0.1 ms) and eager steps at capacity 10^6: the
  # tree's cost is its capacity's, so 2^14 adds fill it enough
  step replay_device_graph 60 all python3 -m benchmarks.replay_device --backend device_proportional --n 1000000 \
    --fill 16384 --steps 500 --out "$OUT/replay_device_graph.json"
  step atari_loop_gpu 200 8 python3 -m benchmarks.atari_loop_gpu --updates 1000 --arms uniform,proportional,rank \
    --cleanrl_seconds 30 --out "$OUT/atari_loop_gpu.json" --loop_out "$OUT/atari_loop_cuda.json" \
    --cleanrl_out "$OUT/cleanrl_dqn.json"
  log done
fi

if [ "$stage" = pong ]; then
  # the GPU machine's copy has no git: the caller names the commit it sent (git rev-parse HEAD of a
  # clean tree); the run's JSON records it and `atari-pong merge` refuses a run without a clean one
  # the run directories (checkpoints, networks) stay on the machine; their CSVs and records come back
  step atari_pong 450 all python3 -m recipes.studies atari-pong next --out /tmp/atari_pong --time_budget_s 440 \
    --source_commit "${SOURCE_COMMIT:-unset}" --source_clean "${SOURCE_CLEAN:-0}"
  if [ "$DRY_RUN" != 1 ]; then
    cp /tmp/atari_pong/*.json "$OUT"/ 2>/dev/null
    (cd /tmp/atari_pong && find runs -name '*.csv' -o -name result.json -o -name source.json | tar czf "$OUT/atari_pong_runs.tgz" -T -)
  fi
  log done
fi

if [ "$stage" = apex ]; then
  step apex_scaling 450 12 python3 -m recipes.apex scaling --env CartPole-v1 --actors 1,2,4,8,14 --seconds 60 \
    --device cuda --out "$OUT/apex_scaling_gpu"
  log done
fi
