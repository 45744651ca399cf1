//! Keeps the documentation facade-first: users depend on the `redisync`
//! crate only, and the facade's docs show the docs of the types it re-exports, so every
//! example written in the member crates must work for a user of the facade alone.
//!
//! # The rule
//!
//! The files checked are every `.rs` file under `src/` of the primitive crates (`redisync-lock`,
//! `-rwlock`, `-semaphore`, `-latch`, `-multilock`, `-election`, `-ratelimit`) and the files of `redisync-core` that
//! define its user-facing items ([`CORE_USER_FILES`]: `Client`, `ClientBuilder`, `Error`,
//! `Wait`, `Lease`, `Acquire`, `Held`, `DistributedPrimitive`, `WaitStrategy`, `Stats`,
//! `LocalState`). Core's other modules (the toolkit, scripts, keys, waiting, the watchdog...)
//! are for primitive authors, who depend on core, and are not checked; nor are examples on
//! `macro_rules!` items (`impl_held!`), which only primitive authors call.
//!
//! A doc example is a fenced code block in `///` or `//!` comments that rustdoc compiles: no
//! info string, or only rustdoc's own attributes (`no_run`, `should_panic`, ...). In each:
//!
//! 1. `use redisync::prelude::*;` appears (shown or hidden), and no other `use redisync...`
//!    line: the prelude is the only redisync import.
//! 2. No line, shown or hidden, names a member crate (`redisync_core`, `redisync_lock`, ...):
//!    even hidden lines are what a reader sees after "show hidden lines", and copies.
//! 3. `redisync_test_harness` (the throw-away Redis servers) appears only on hidden lines.
//! 4. No primitive is made with `Type::new(&client, ...)` where the facade has a constructor
//!    (`client.lock(...)`, `client.semaphore(...)`, ... from `ClientExt`).
//!
//! Besides, the items listed in [`MUST_HAVE_EXAMPLES`] (every guard and permit, the
//! primitives, `Error`, `ClientBuilder`, ...) each carry an example of their own, and
//! `Client`'s docs name `ClientExt` before their first heading.
//!
//! The self-tests at the end run the same checks on samples, so a rule that could never fire
//! would fail them.

use std::path::{Path, PathBuf};

/// The primitive crates, all of whose sources are checked.
const PRIMITIVE_CRATES: &[&str] = &[
    "redisync-lock",
    "redisync-rwlock",
    "redisync-semaphore",
    "redisync-latch",
    "redisync-multilock",
    "redisync-election",
    "redisync-ratelimit",
];

/// Core's user-facing files, each with a declaration it must contain: if an item moves, the
/// list must follow it (checked), rather than silently stop covering it.
const CORE_USER_FILES: &[(&str, &[&str])] = &[
    (
        "client.rs",
        &["pub struct Client {", "pub struct LocalState {"],
    ),
    ("builder.rs", &["pub struct ClientBuilder {"]),
    ("error.rs", &["pub enum Error {"]),
    (
        "primitive.rs",
        &[
            "pub enum Wait {",
            "pub enum Lease {",
            "pub trait Acquire:",
            "pub trait Held:",
            "pub trait DistributedPrimitive:",
        ],
    ),
    ("strategy.rs", &["pub enum WaitStrategy {"]),
    ("stats.rs", &["pub struct Stats {"]),
];

/// Items that must have a doc example of their own: (crate, file under `src/`, the start of
/// the item's declaration line).
const MUST_HAVE_EXAMPLES: &[(&str, &str, &str)] = &[
    ("redisync-core", "client.rs", "pub struct Client {"),
    ("redisync-core", "client.rs", "pub struct LocalState {"),
    ("redisync-core", "builder.rs", "pub struct ClientBuilder {"),
    ("redisync-core", "error.rs", "pub enum Error {"),
    ("redisync-core", "primitive.rs", "pub enum Wait {"),
    ("redisync-core", "primitive.rs", "pub enum Lease {"),
    ("redisync-core", "primitive.rs", "pub trait Acquire:"),
    ("redisync-core", "primitive.rs", "pub trait Held:"),
    ("redisync-core", "strategy.rs", "pub enum WaitStrategy {"),
    ("redisync-core", "stats.rs", "pub struct Stats {"),
    ("redisync-lock", "lock.rs", "pub struct ReentrantLock {"),
    ("redisync-lock", "fair.rs", "pub struct FairLock {"),
    ("redisync-lock", "guard.rs", "pub struct LockGuard {"),
    ("redisync-rwlock", "rwlock.rs", "pub struct ReadWriteLock {"),
    ("redisync-rwlock", "guard.rs", "pub struct ReadGuard {"),
    ("redisync-rwlock", "guard.rs", "pub struct WriteGuard {"),
    ("redisync-rwlock", "sides.rs", "pub struct ReadLock {"),
    ("redisync-rwlock", "sides.rs", "pub struct WriteLock {"),
    (
        "redisync-semaphore",
        "semaphore.rs",
        "pub struct Semaphore {",
    ),
    (
        "redisync-semaphore",
        "semaphore.rs",
        "pub struct SemaphorePermit {",
    ),
    (
        "redisync-semaphore",
        "expirable.rs",
        "pub struct ExpirableSemaphore {",
    ),
    (
        "redisync-semaphore",
        "expirable.rs",
        "pub struct ExpirablePermit {",
    ),
    ("redisync-latch", "latch.rs", "pub struct CountDownLatch {"),
    (
        "redisync-election",
        "election.rs",
        "pub struct LeaderElection {",
    ),
    (
        "redisync-election",
        "leadership.rs",
        "pub struct Leadership {",
    ),
    (
        "redisync-ratelimit",
        "limiter.rs",
        "pub struct RateLimiter {",
    ),
    ("redisync-ratelimit", "rate.rs", "pub struct Rate {"),
    ("redisync-multilock", "multi.rs", "pub struct MultiLock {"),
    (
        "redisync-multilock",
        "multi.rs",
        "pub struct MultiLockGuard {",
    ),
    ("redisync-multilock", "redlock.rs", "pub struct Redlock {"),
    (
        "redisync-multilock",
        "redlock.rs",
        "pub struct RedlockGuard {",
    ),
];

/// The workspace's member crates a facade user does not depend on, as Rust paths.
const MEMBER_CRATES: &[&str] = &[
    "redisync_core",
    "redisync_lock",
    "redisync_rwlock",
    "redisync_semaphore",
    "redisync_latch",
    "redisync_multilock",
    "redisync_election",
];

/// Primitives the facade makes with a `ClientExt` method, with that method.
const FACADE_CONSTRUCTORS: &[(&str, &str)] = &[
    ("ReentrantLock", "lock"),
    ("FairLock", "fair_lock"),
    ("ReadWriteLock", "read_write_lock"),
    ("Semaphore", "semaphore"),
    ("ExpirableSemaphore", "expirable_semaphore"),
    ("CountDownLatch", "count_down_latch"),
    ("MultiLock", "multi_lock"),
    ("LeaderElection", "leader_election"),
];

/// rustdoc's own code block attributes: a block whose info string has only these (or none)
/// is Rust, compiled as a doc test.
const RUSTDOC_ATTRIBUTES: &[&str] = &[
    "rust",
    "no_run",
    "ignore",
    "should_panic",
    "compile_fail",
    "test_harness",
    "standalone_crate",
    "edition2015",
    "edition2018",
    "edition2021",
    "edition2024",
];

/// One doc example: where it starts, the item it documents, and its lines (comment markers
/// removed) with whether each is hidden.
#[derive(Debug)]
struct Example {
    line: usize,
    item: String,
    code: Vec<(bool, String)>,
}

/// One run of doc comment lines (`///` or `//!`) with the item it documents.
#[derive(Debug)]
struct DocComment {
    item: String,
    lines: Vec<(usize, String)>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness lives in the workspace")
        .to_path_buf()
}

/// The doc comments of `source`: each run of `///` lines with the declaration that follows
/// it (attributes skipped), and each run of `//!` lines as the module's.
fn doc_comments(source: &str) -> Vec<DocComment> {
    let lines: Vec<&str> = source.lines().collect();
    let mut comments = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let marker = if trimmed.starts_with("///") {
            "///"
        } else if trimmed.starts_with("//!") {
            "//!"
        } else {
            i += 1;
            continue;
        };
        let mut run = Vec::new();
        while i < lines.len() && lines[i].trim_start().starts_with(marker) {
            let text = &lines[i].trim_start()[marker.len()..];
            run.push((i + 1, text.strip_prefix(' ').unwrap_or(text).to_owned()));
            i += 1;
        }
        let item = if marker == "//!" {
            "(module)".to_owned()
        } else {
            lines[i..]
                .iter()
                .map(|line| line.trim())
                .find(|line| !line.starts_with("#[") && !line.is_empty())
                .unwrap_or("(end of file)")
                .to_owned()
        };
        comments.push(DocComment { item, lines: run });
    }
    comments
}

/// Whether a code block's info string makes it a Rust doc test.
fn is_rust(info: &str) -> bool {
    info.split([',', ' '])
        .map(str::trim)
        .filter(|tag| !tag.is_empty())
        .all(|tag| RUSTDOC_ATTRIBUTES.contains(&tag))
}

/// The Rust examples of `source`, except those on `macro_rules!` items.
fn examples(source: &str) -> Vec<Example> {
    let mut found = Vec::new();
    for comment in doc_comments(source) {
        if comment.item.starts_with("macro_rules!") {
            continue;
        }
        let mut lines = comment.lines.iter();
        while let Some((line, text)) = lines.next() {
            let Some(info) = text.trim_start().strip_prefix("```") else {
                continue;
            };
            let rust = is_rust(info);
            let mut code = Vec::new();
            for (_, text) in lines.by_ref() {
                if text.trim_start().starts_with("```") {
                    break;
                }
                // rustdoc hides `# ` lines and a lone `#`; `#[...]` and `#!` are code.
                let trimmed = text.trim_start();
                let hidden = trimmed == "#" || trimmed.starts_with("# ");
                let shown = if hidden {
                    trimmed.trim_start_matches('#').trim_start()
                } else {
                    text.as_str()
                };
                code.push((hidden, shown.to_owned()));
            }
            if rust {
                found.push(Example {
                    line: *line,
                    item: comment.item.clone(),
                    code,
                });
            }
        }
    }
    found
}

/// Whether `text` names the crate `name` as a path (`name::` or `use name;`), not as part of a
/// longer identifier.
fn names_crate(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = &text[at + name.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

/// What is wrong with one example under the rule in this file's docs.
fn violations(example: &Example) -> Vec<String> {
    let mut found = Vec::new();
    let mut has_prelude = false;
    for (hidden, text) in &example.code {
        let code = text.trim();
        if code == "use redisync::prelude::*;" {
            has_prelude = true;
        } else if code.starts_with("use redisync::") || code.starts_with("use redisync;") {
            found.push(format!(
                "imports `{code}`: the prelude is the only redisync import"
            ));
        }
        for member in MEMBER_CRATES {
            if names_crate(code, member) {
                found.push(format!(
                    "names `{member}` (`{code}`): a facade user does not depend on it"
                ));
            }
        }
        if !hidden && names_crate(code, "redisync_test_harness") {
            found.push(format!(
                "uses the test harness on a shown line (`{code}`): hide the setup with `# `"
            ));
        }
        if !hidden {
            for (primitive, method) in FACADE_CONSTRUCTORS {
                if code.contains(&format!("{primitive}::new(")) {
                    found.push(format!(
                        "makes a {primitive} with `{primitive}::new` (`{code}`): use \
                         `client.{method}(...)`"
                    ));
                }
            }
        }
    }
    if !has_prelude {
        found.push("has no `use redisync::prelude::*;`".to_owned());
    }
    found
}

/// The files under `dir`, recursively, ending in `.rs`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn checked_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in PRIMITIVE_CRATES {
        files.extend(rust_files(&root.join("crates").join(krate).join("src")));
    }
    for (file, declarations) in CORE_USER_FILES {
        let path = root.join("crates/redisync-core/src").join(file);
        let source = read(&path);
        for declaration in *declarations {
            assert!(
                source
                    .lines()
                    .any(|line| line.trim().starts_with(declaration)),
                "{} no longer declares `{declaration}`: update CORE_USER_FILES",
                path.display()
            );
        }
        files.push(path);
    }
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn doc_examples_use_the_facade_prelude_only() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in checked_files() {
        let source = read(&path);
        // Code blocks only in `///`/`//!` comments: another form would escape the scan.
        let other_form = source.lines().map(str::trim_start).find(|line| {
            line.starts_with("/**") || line.starts_with("/*!") || line.starts_with("#[doc = \"")
        });
        assert!(
            other_form.is_none(),
            "{}: doc comments in a form this test does not read: {other_form:?}",
            path.display()
        );
        for example in examples(&source) {
            checked += 1;
            for problem in violations(&example) {
                problems.push(format!(
                    "{}:{} (on `{}`): {problem}",
                    path.strip_prefix(workspace_root())
                        .unwrap_or(&path)
                        .display(),
                    example.line,
                    example.item
                ));
            }
        }
    }
    // The files do hold examples: a scan that found none would pass for the wrong reason.
    assert!(checked >= 40, "only {checked} examples found");
    assert!(
        problems.is_empty(),
        "{} doc example problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn guards_permits_primitives_error_and_builder_have_examples() {
    let root = workspace_root();
    let mut missing = Vec::new();
    for (krate, file, declaration) in MUST_HAVE_EXAMPLES {
        let path = root.join("crates").join(krate).join("src").join(file);
        let source = read(&path);
        let comments = doc_comments(&source);
        let comment = comments
            .iter()
            .find(|comment| comment.item.starts_with(declaration))
            .unwrap_or_else(|| panic!("{krate}/src/{file}: no documented `{declaration}`"));
        let example = comment
            .lines
            .iter()
            .any(|(_, text)| text.trim_start().strip_prefix("```").is_some_and(is_rust));
        if !example {
            missing.push(format!("{krate}/src/{file}: `{declaration}`"));
        }
    }
    assert!(
        missing.is_empty(),
        "items without an example of their own:\n{}",
        missing.join("\n")
    );
}

#[test]
fn client_docs_name_client_ext_before_their_first_heading() {
    let source = read(&workspace_root().join("crates/redisync-core/src/client.rs"));
    let comments = doc_comments(&source);
    let client = comments
        .iter()
        .find(|comment| comment.item.starts_with("pub struct Client {"))
        .expect("Client is documented");
    let before_heading: Vec<&str> = client
        .lines
        .iter()
        .map(|(_, text)| text.as_str())
        .take_while(|text| !text.starts_with("# "))
        .collect();
    assert!(
        before_heading.iter().any(|text| text.contains("ClientExt")),
        "Client's docs should say, before their first heading, that the primitive \
         constructors come from redisync::ClientExt"
    );
}

// The rule, on samples: each kind of violation is found, and what is allowed passes.

fn sample_violations(doc: &str) -> Vec<String> {
    let found = examples(doc);
    assert_eq!(found.len(), 1, "one example in the sample: {found:?}");
    violations(&found[0])
}

#[test]
fn the_rule_accepts_a_facade_example_with_hidden_harness_setup() {
    let doc = r#"
/// A lock.
///
/// ```
/// use redisync::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redisync::Result<()> {
/// # let server = redisync_test_harness::RedisServer::start();
/// let client = Client::connect(server.url()).await?;
/// let lock = client.lock("x");
/// # Ok(())
/// # }
/// ```
pub struct Sample;
"#;
    assert_eq!(sample_violations(doc), Vec::<String>::new());
}

#[test]
fn the_rule_finds_member_crate_imports_shown_or_hidden() {
    let shown = "/// ```\n/// use redisync::prelude::*;\n/// use redisync_lock::ReentrantLock;\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(shown).len(), 1);
    let hidden = "/// ```\n/// use redisync::prelude::*;\n/// # let c = redisync_core::Client::connect(u);\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(hidden).len(), 1);
    let inner = "//! ```\n//! use redisync::prelude::*;\n//! fn f() -> redisync_core::Result<()> { Ok(()) }\n//! ```\n";
    assert_eq!(sample_violations(inner).len(), 1);
}

#[test]
fn the_rule_finds_a_missing_prelude_a_shown_harness_and_a_new_call() {
    let no_prelude = "/// ```no_run\n/// let x = 1;\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(no_prelude).len(), 1);
    let harness = "/// ```\n/// use redisync::prelude::*;\n/// let s = redisync_test_harness::RedisServer::start();\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(harness).len(), 1);
    let new = "/// ```\n/// use redisync::prelude::*;\n/// let l = ReentrantLock::new(&client, \"x\");\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(new).len(), 1);
    let other_import = "/// ```\n/// use redisync::prelude::*;\n/// use redisync::LocalState;\n/// ```\nfn f() {}\n";
    assert_eq!(sample_violations(other_import).len(), 1);
}

#[test]
fn the_rule_skips_text_blocks_and_macro_docs() {
    let text = "/// ```text\n/// redisync_core::whatever\n/// ```\nfn f() {}\n";
    assert!(examples(text).is_empty());
    let toml = "/// ```toml\n/// redisync_core = \"1\"\n/// ```\nfn f() {}\n";
    assert!(examples(toml).is_empty());
    let macro_doc = "/// ```\n/// redisync_core::impl_held!(G {});\n/// ```\n#[macro_export]\nmacro_rules! impl_held {\n";
    assert!(examples(macro_doc).is_empty());
    // A longer identifier is not the crate.
    assert!(!names_crate("my_redisync_core::x", "redisync_core"));
    assert!(names_crate("x(redisync_core::y)", "redisync_core"));
}
