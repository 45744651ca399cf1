//! The scripts' headers against their declarations: each script in `lua/` says in its header
//! which preludes it is sent after ("(Prefixed with a.lua and b.lua.)"), and that must be what
//! every `lua_script!` declaring it lists in its `after [...]`, in the same order. A reader of
//! the script looks up the helpers it calls in those files; a header that drifted from the
//! declaration sends them to the wrong ones. No Redis is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness lives in the repository")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, without following links (the crates' `lua` links) or
/// entering build output.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable directory") {
        let entry = entry.expect("directory entry");
        let kind = entry.file_type().expect("file type");
        let path = entry.path();
        if kind.is_dir() && entry.file_name() != "target" {
            rust_files(&path, found);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// One `lua_script!` declaration: the script's file (without `.lua`) and the preludes listed
/// in its `after [...]`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Declaration {
    file: String,
    preludes: Vec<String>,
}

/// The string literals of `text`, in order (declarations use no escapes).
fn literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The `lua_script! { ... }` declarations of one Rust source, read off its text: after the
/// `=` comes `new` or `read_only`, the file, `for` and the kind, then optionally `after [...]`,
/// up to the `{` of the typed call or the `;` of a plain static. Comment lines (the macro's
/// own documentation shows declarations) are not code.
fn declarations(source: &str) -> Vec<Declaration> {
    let code: String = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .flat_map(|line| [line, "\n"])
        .collect();
    let mut found = Vec::new();
    for part in code.split("lua_script! {").skip(1) {
        let Some((_, rest)) = part.split_once('=') else {
            continue;
        };
        let head = rest.split(['{', ';']).next().unwrap_or("");
        let mut names = literals(head).into_iter();
        let (Some(file), Some(_kind)) = (names.next(), names.next()) else {
            continue;
        };
        let preludes: Vec<String> = names.collect();
        assert_eq!(
            head.contains("after"),
            !preludes.is_empty(),
            "declaration of {file}: read `{head}` wrongly"
        );
        found.push(Declaration { file, preludes });
    }
    found
}

/// The preludes a script's header names, in order: the `.lua` files in its
/// "(Prefixed with ...)" sentence; empty without one. The header is the comment block the
/// file starts with. `Err` when the header mentions being prefixed in another form, which
/// this check could not read.
fn header_preludes(source: &str) -> Result<Vec<String>, String> {
    let header: Vec<&str> = source
        .lines()
        .map_while(|line| line.strip_prefix("--"))
        .map(str::trim)
        .collect();
    let header = header.join(" ");
    let sentences = header.matches("(Prefixed with ").count();
    if header.to_lowercase().matches("prefixed with").count() != sentences || sentences > 1 {
        return Err(format!(
            "its header names its preludes other than in one \"(Prefixed with ...)\": {header}"
        ));
    }
    let Some((_, sentence)) = header.split_once("(Prefixed with ") else {
        return Ok(Vec::new());
    };
    let Some((sentence, _)) = sentence.split_once(')') else {
        return Err(format!("its \"(Prefixed with\" is not closed: {header}"));
    };
    Ok(sentence
        .split_whitespace()
        .map(|word| word.trim_end_matches([',', '.', ':', ';']))
        .filter_map(|word| word.strip_suffix(".lua"))
        .map(str::to_owned)
        .collect())
}

#[test]
fn every_scripts_header_names_the_preludes_it_is_declared_with() {
    let root = root();
    let mut sources = Vec::new();
    rust_files(&root.join("crates"), &mut sources);
    // Every declaration of each script (the bench declares some of the lock's again).
    let mut declared: BTreeMap<String, Vec<(PathBuf, Vec<String>)>> = BTreeMap::new();
    for path in &sources {
        let source = std::fs::read_to_string(path).expect("readable source");
        for declaration in declarations(&source) {
            let relative = path.strip_prefix(&root).unwrap_or(path).to_path_buf();
            declared
                .entry(declaration.file)
                .or_default()
                .push((relative, declaration.preludes));
        }
    }
    let count: usize = declared.values().map(Vec::len).sum();
    assert!(count > 50, "found only {count} declarations");

    let mut wrong = Vec::new();
    let mut scripts = 0;
    for entry in std::fs::read_dir(root.join("lua")).expect("lua directory") {
        let path = entry.expect("lua file").path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lua"))
        else {
            continue;
        };
        if name.ends_with("_prelude") {
            continue;
        }
        scripts += 1;
        let source = std::fs::read_to_string(&path).expect("lua source");
        let Some(declarations) = declared.remove(name) else {
            wrong.push(format!("{name}: no lua_script! declares it"));
            continue;
        };
        let (first_at, preludes) = &declarations[0];
        for (at, other) in &declarations[1..] {
            if other != preludes {
                wrong.push(format!(
                    "{name}: declared after {preludes:?} in {} but after {other:?} in {}",
                    first_at.display(),
                    at.display()
                ));
            }
        }
        match header_preludes(&source) {
            Ok(named) if &named == preludes => {}
            Ok(named) => wrong.push(format!(
                "{name}: its header names {named:?}, its declaration (in {}) lists {preludes:?}",
                first_at.display()
            )),
            Err(problem) => wrong.push(format!("{name}: {problem}")),
        }
    }
    for (name, declarations) in &declared {
        wrong.push(format!(
            "{name}: declared in {} but not a script in lua/",
            declarations[0].0.display()
        ));
    }
    assert!(scripts > 50, "found only {scripts} scripts");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_declaration_and_a_header_are_read_as_written() {
    let source = r#"
/// Docs show `lua_script! { pub struct X = new "doc" for "k" after ["no"] { .. } }`.
redisync_core::toolkit::lua_script! {
    /// A typed call.
    pub(crate) struct Acquire = new "lock_acquire" for "lock"
        after ["publish_prelude", "lock_prelude"] {
        keys { hash }
        args { owner: &'a str }
    }
}
redisync_core::toolkit::lua_script! {
    pub(crate) static RENEW = read_only "lock_renew" for "lock";
}
"#;
    assert_eq!(
        declarations(source),
        [
            Declaration {
                file: "lock_acquire".into(),
                preludes: vec!["publish_prelude".into(), "lock_prelude".into()],
            },
            Declaration {
                file: "lock_renew".into(),
                preludes: vec![],
            },
        ]
    );
    let header = "-- x: does it. (Prefixed with a_prelude.lua,\n-- b_prelude.lua and \
                  c_prelude.lua: it publishes.)\n--\n-- KEYS[1]  k\n\nreturn 1\n";
    assert_eq!(
        header_preludes(header).unwrap(),
        ["a_prelude", "b_prelude", "c_prelude"]
    );
    assert_eq!(
        header_preludes("-- x: does it.\n-- (see a_prelude.lua)\nreturn 1\n").unwrap(),
        Vec::<String>::new()
    );
    // Past the header, the text is the script's own.
    assert!(
        header_preludes("-- x\nlocal y = 1\n-- (Prefixed with a.lua.)\n")
            .unwrap()
            .is_empty()
    );
    assert!(header_preludes("-- x: prefixed with a.lua\nreturn 1\n").is_err());
}
