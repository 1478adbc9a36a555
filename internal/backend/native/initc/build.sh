#!/bin/sh
# Builds the sandbox init for amd64 into ../init_amd64.bin. Run through
# `go generate ./internal/backend/native/`. The output is committed so that a
# plain `go build` needs no C compiler; CI rebuilds it and checks that the
# bytes match (the flags below keep the build reproducible).
set -eu
cd "$(dirname "$0")"
${CC:-gcc} -Os -static -nostdlib -ffreestanding -fno-builtin -fno-stack-protector \
	-fno-asynchronous-unwind-tables -fno-unwind-tables -fno-pie -no-pie -fno-ident \
	-fcf-protection=none -ffunction-sections -fdata-sections \
	-Wall -Wextra -Werror -Wno-unused-parameter \
	-Wl,--gc-sections -Wl,--build-id=none -Wl,-z,noexecstack -Wl,-z,norelro -s \
	-o ../init_amd64.bin.tmp init.c
mv ../init_amd64.bin.tmp ../init_amd64.bin
