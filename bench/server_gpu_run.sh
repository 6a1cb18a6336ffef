#!/usr/bin/env bash
# On the GPU machine, with dist-srv/ carried (stripped nextstat-server and backend_parity, the shared
# pyhf-ref and likelihoods, nextstat_tHu.json): the server GPU benchmark, then the CUDA parity arms.
set -u
export NEXTSTAT_PYHF_REF=$PWD/dist-srv/pyhf-ref NEXTSTAT_LIKELIHOODS=$PWD/dist-srv/likelihoods NEXTSTAT_KERNEL_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
timeout 280 python3 bench/server_gpu.py dist-srv/nextstat-server dist-srv/nextstat_tHu.json --requests 8 --toys 1000 --mu 0.3 > $OUT/server_gpu.json 2> $OUT/server_gpu.err; echo "bench rc $?"
(time timeout 280 dist-srv/backend_parity --include-ignored --test-threads 1 cuda) 2>&1 | grep -E "^test |result|panicked|real" > $OUT/parity.log
cat $OUT/server_gpu.json; tail -5 $OUT/server_gpu.err; cat $OUT/parity.log
