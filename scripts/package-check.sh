#!/usr/bin/env bash
# Packages every crate meant for crates.io, then compiles the README's quick start in a new
# project that takes redisync from those .crate files.
#
# `cargo package` also builds each crate alone from its .crate file (its verify step): that is
# what fails when a crate's package lacks a Lua script it includes, and what catches a crate
# that only compiles thanks to features a sibling switches on in the workspace. The quick start
# then checks what a user gets: the README's own dependencies and code, resolved the way
# `cargo add redisync` would, except that the redisync crates come from target/package (they
# are not on crates.io, and must not be taken from there). Everything after `cargo fetch` runs
# offline: what it needs from crates.io are the workspace's locked dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The verify builds and the quick start are workspaces of their own, so the workspace's lean
# debug-info profile (see Cargo.toml) does not reach them: the same disk saving by environment.
# Nobody debugs these builds, so they get no debug info at all.
export CARGO_PROFILE_DEV_DEBUG=false
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
# Verify builds get a target directory of their own: cargo takes packages from its temporary
# registry for immutable, so their build artifacts from an earlier run would be reused even
# when the package changed. Only this workspace's crates are removed from it before each run;
# the dependencies stay built.
verify_dir="$target_dir/package-check"
rm -rf "$verify_dir"/debug/.fingerprint/redisync* "$verify_dir"/debug/deps/*redisync* \
    "$verify_dir"/debug/build/redisync*
packages="$verify_dir/package"
# Only this run's packages below: no crate renamed or version bumped since an earlier run.
rm -f "$packages"/*.crate
cargo fetch --quiet

# cargo unpacks the packages it verifies against into $CARGO_HOME/registry/src, and reuses an
# unpacked copy of the same name and version from an earlier run even when the package changed
# (cargo 1.95 does: a module added to one crate is then missing in a dependent's verify build).
# They are this workspace's own unpublished crates, so dropping those copies costs nothing.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for crate in $(sed -n 's/^name = "\(redisync[a-z-]*\)"$/\1/p' Cargo.toml crates/*/Cargo.toml integration-tests/Cargo.toml); do
    rm -rf "$cargo_home"/registry/src/*/"$crate"-[0-9]* "$cargo_home"/registry/cache/*/"$crate"-[0-9]*.crate
done
# Every member, the bench too (it is `publish = false`, but cargo packages and verifies it all
# the same; it depends on the test harness, which is a crate of its own for that reason).
CARGO_TARGET_DIR="$verify_dir" cargo package --offline --allow-dirty --workspace

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Unpacked from the .crate files themselves, not from the verify step's copies.
patches=""
for crate in "$packages"/*.crate; do
    tar -xzf "$crate" -C "$work"
    dir=$(basename "$crate" .crate)
    name=${dir%-*}
    patches+="$name = { path = \"$work/$dir\" }"$'\n'
done

# The quick start as the README shows it: its first toml block (the dependencies) and its
# first rust block (main.rs), without the lines rustdoc hides (`# ...`: the doc test's own
# throw-away server).
quick_start() {
    awk -v lang="$1" '
        /^## Quick start/ { inside = 1; next }
        inside && /^## / { exit }
        inside && index($0, "```" lang) == 1 { block = 1; next }
        block && /^```/ { exit }
        block && /^[ \t]*#( |$)/ { next }
        block { print }
    ' README.md
}
project="$work/quick-start"
mkdir -p "$project/src"
{
    printf '[package]\nname = "quick-start"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
    quick_start toml
    printf '\n[patch.crates-io]\n%s' "$patches"
} >"$project/Cargo.toml"
quick_start rust >"$project/src/main.rs"
grep -q 'redisync' "$project/src/main.rs" || {
    echo "package-check: no quick start (a rust block using redisync) found in README.md" >&2
    exit 1
}
grep -q '^redisync = ' "$project/Cargo.toml" || {
    echo "package-check: the README's quick start does not depend on redisync" >&2
    exit 1
}
# The workspace's versions of everything else: they are the ones already downloaded.
cp Cargo.lock "$project/Cargo.lock"

# The workspace's target directory: dependencies already built there with the same features
# are not built again.
(cd "$project" && CARGO_TARGET_DIR="$target_dir" cargo build --offline --quiet)

# The redisync that was built is the packaged one.
source=$(cd "$project" && cargo pkgid --offline redisync)
case "$source" in
    "path+file://$work/redisync-"*) ;;
    *)
        echo "package-check: the quick start built redisync from $source, not from its package" >&2
        exit 1
        ;;
esac
echo "package-check: $(ls "$packages"/*.crate | wc -l) crates packaged; the README's quick start builds against them"
