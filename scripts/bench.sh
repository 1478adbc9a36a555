#!/bin/sh
# Runs the benchmarks recorded in docs/benchmarks.md.
set -eu
cd "$(dirname "$0")/.."
. scripts/goenv.sh
./scripts/build.sh
CGO_ENABLED=0 go run ./bench/startup -pinfold bin/pinfold -rounds "${ROUNDS:-300}"
CGO_ENABLED=0 go run ./bench/workload -pinfold bin/pinfold -rounds "${WORKLOAD_ROUNDS:-10}"
CGO_ENABLED=0 go run ./bench/changeset -pinfold bin/pinfold
CGO_ENABLED=0 go run ./bench/network -pinfold bin/pinfold
CGO_ENABLED=0 go run ./bench/store -pinfold bin/pinfold
