//! Core's modules form layers without import circles: each module uses only modules of its
//! own layer or of layers below it, and no two modules use each other, directly or not.
//!
//! The check reads `src/` and collects, per top-level module, every `crate::` path outside
//! comments (a name re-exported at the crate root counts as the module it comes from). A
//! module missing from [`LAYERS`] fails the test, so a new module must be placed in a layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first, and their modules.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaf",
        &[
            "error",
            "locking",
            "signal",
            "in_flight",
            "duration",
            "keys",
            "script",
            "stats",
            "metrics",
            "abandon",
            "primitive",
            "cells",
            "strategy",
            "server_version",
        ],
    ),
    ("transport", &["transport"]),
    ("runtime", &["pubsub", "watchdog", "retry", "wait"]),
    ("client", &["client"]),
    ("builder", &["builder"]),
    ("toolkit", &["toolkit"]),
];

/// Uses that still go against the layers, each to be removed; the test fails once one is
/// gone, so that the list only shrinks.
const KNOWN: &[(&str, &str)] = &[];

/// Names reachable from the crate root that are not modules of this crate.
const EXTERNAL: &[&str] = &["async_trait"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// `name` -> module, for every `pub use module::...` of `lib.rs`.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let code = strip_comments(lib);
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .lines()
            .map(str::trim)
            .filter(|line| !line.starts_with("#["))
            .collect::<Vec<_>>()
            .join(" ")
            .strip_prefix("pub use ")
            .map(str::to_owned)
        else {
            continue;
        };
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        // `pub use a::b::{C, D}`: the names are those in the braces.
        let rest = rest
            .rsplit('{')
            .next()
            .unwrap_or(rest)
            .trim_end_matches('}');
        for item in rest.split(',') {
            let item = item.trim();
            if let Some(name) = item.split("::").last() {
                if !name.is_empty() {
                    names.insert(name.to_owned(), module.to_owned());
                }
            }
        }
    }
    names
}

fn strip_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.trim_start().starts_with("//") {
            true => "",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segments after each `crate::` in `code` (`crate::{a, b::c}` gives a and b).
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("");
                found.push(first.trim_start_matches("self").to_owned());
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            found.push(rest[..end].to_owned());
        }
    }
    found.retain(|name| !name.is_empty());
    found
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("src is readable").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module -> the modules it uses.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs is readable");
    let roots = root_names(&lib);
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative
            .components()
            .next()
            .expect("a file")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if first == "lib" {
            continue;
        }
        let code = strip_comments(&std::fs::read_to_string(&file).expect("readable"));
        let entry = graph.entry(first.clone()).or_default();
        for name in crate_paths(&code) {
            let target = if layer_of(&name).is_some() {
                name
            } else if let Some(module) = roots.get(&name) {
                module.clone()
            } else if EXTERNAL.contains(&name.as_str()) {
                continue;
            } else if let Some(module) = macro_home(&name) {
                module.to_owned()
            } else {
                panic!(
                    "{}: `crate::{name}` is neither a module nor a root name",
                    relative.display()
                );
            };
            if target != first {
                entry.insert(target);
            }
        }
    }
    graph
}

/// The module defining an exported macro.
fn macro_home(name: &str) -> Option<&'static str> {
    match name {
        "lua_script" => Some("script"),
        "impl_held" => Some("primitive"),
        _ => None,
    }
}

#[test]
fn every_module_has_a_layer() {
    for module in uses().keys() {
        assert!(
            layer_of(module).is_some(),
            "module `{module}` is in no layer"
        );
    }
}

#[test]
fn modules_use_only_their_layer_and_the_ones_below() {
    let mut against = BTreeSet::new();
    for (module, used) in uses() {
        let Some(layer) = layer_of(&module) else {
            continue;
        };
        for target in used {
            if layer_of(&target).is_some_and(|l| l > layer) {
                against.insert((module.clone(), target));
            }
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = against.difference(&known).collect();
    assert!(new.is_empty(), "uses against the layers: {new:?}");
    let gone: Vec<_> = known.difference(&against).collect();
    assert!(gone.is_empty(), "fixed, remove from KNOWN: {gone:?}");
}

#[test]
fn no_import_circles() {
    let graph = uses();
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    // Depth-first search for a back edge, ignoring the known uses against the layers.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        known: &BTreeSet<(String, String)>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if known.contains(&(node.to_owned(), next.clone())) {
                continue;
            }
            if let Some(circle) = visit(next, graph, known, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        let circle = visit(node, &graph, &known, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "import circle: {}",
            circle.unwrap_or_default().join(" -> ")
        );
    }
}

#[test]
fn the_check_sees_uses() {
    // A check that parses nothing passes everything: make sure it sees known uses.
    let graph = uses();
    assert!(graph["client"].contains("transport"));
    assert!(graph["toolkit"].contains("client"));
    assert!(graph["builder"].contains("transport"));
}
