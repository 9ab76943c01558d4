#!/bin/sh
# Records the Nsight Compute fixture (README.md): OUT=/dir sh tests/golden/ncu/record.sh (see record.py).
set -u
exec python3 "$(dirname "$0")/record.py" "${OUT:?set OUT to the output folder}"
