#!/bin/sh
# Record three durable agents under pydantic-ai FROM and replay them under TO (issue 34): `make cross-release
# FROM=2.68.0 TO=2.78.0`. One venv per release under .xrel/ (git-ignored), made with uv as `make matrix` makes its
# own, with constraints.txt but pydantic-ai's pins. Fails when any step of the replay runs live.
set -eu
from=$1
to=$2
uv=${UV:-.tools/bin/uv}
python=${XREL_PYTHON:-python3}

venv() {
    folder=.xrel/pydantic-ai-$1
    if [ ! -f "$folder/.installed" ]; then
        "$uv" venv --quiet --clear --python "$python" "$folder"
        sed '/^pydantic-ai-slim==/d;/^pydantic-graph==/d;/^genai-prices==/d' constraints.txt >"$folder/constraints.txt"
        "$uv" pip install --quiet --python "$folder/bin/python" -c "$folder/constraints.txt" -e . \
            "pydantic-ai-slim==$1" "pydantic-graph==$1" "genai-prices>=0.2.5"
        touch "$folder/.installed"
    fi
    echo "$folder/bin/python"
}

recorder=$(venv "$from")
replayer=$(venv "$to")
cache=.xrel/cache-$from-to-$to
rm -rf "$cache"
"$recorder" scripts/cross_release.py record "$cache"
"$replayer" scripts/cross_release.py replay "$cache"
