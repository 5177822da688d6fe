#!/usr/bin/env bash
# Installs what ebb needs to build and test, only where it is missing: Debian/Ubuntu through
# apt-get, macOS through Homebrew. Safe to run repeatedly.
set -euo pipefail

deb_pkgs=(build-essential meson ninja-build pkg-config python3 python3-venv python3-pip
    libuv1-dev libmicrohttpd-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
    libzstd-dev libjansson-dev libgnutls28-dev libinih-dev libcmocka-dev curl wrk valgrind clang-format
    git ca-certificates nginx)
brew_pkgs=(meson ninja pkg-config libuv libmicrohttpd opencl-headers ocl-icd pocl zstd jansson
    gnutls inih cmocka python wrk clang-format nginx)

# nginx is for tests/integration/test_nginx.py only, which starts its own unprivileged instance
# (Debian's package may also enable a system nginx on port 80: `systemctl disable --now nginx`).

log() { printf 'setup: %s\n' "$*" >&2; }

case "$(uname -s)" in
Linux)
    if ! command -v dpkg-query >/dev/null 2>&1; then
        log "not a Debian/Ubuntu system: install the equivalents of: ${deb_pkgs[*]}"
        exit 1
    fi
    missing=()
    for p in "${deb_pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if ((${#missing[@]})); then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -q
        $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        log "all Debian packages present"
    fi
    ;;
Darwin)
    if ! command -v brew >/dev/null 2>&1; then
        log "Homebrew is required on macOS (https://brew.sh)"
        exit 1
    fi
    missing=()
    for p in "${brew_pkgs[@]}"; do
        brew list --versions "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "installing: ${missing[*]}"
        brew install "${missing[@]}"
    else
        log "all Homebrew packages present"
    fi
    ;;
*)
    log "unsupported system $(uname -s)"
    exit 1
    ;;
esac
