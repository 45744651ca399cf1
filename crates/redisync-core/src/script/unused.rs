//! Leaving out the prelude functions a script never calls.
//!
//! A script is its preludes followed by its own file, and a prelude defines every helper its
//! primitive's scripts share: each script calls only some of them. Redis runs the whole text
//! on every call, and each `local function` it meets is a closure made anew; the release of a
//! lock, for one, made thirteen to use five. So the text sent to Redis keeps only the
//! functions the script's own code calls, directly or through another kept function.
//!
//! The preludes are written so that this can be read off their text: every helper is a
//! `local function NAME(` at the start of a line, ending at the first line that is `end`, with
//! its comment lines right above it (dropped with it).

use std::collections::HashSet;

/// One top-level piece of a script's text.
struct Item<'a> {
    /// The piece's lines, with their line ends (and, for a function, its comment lines).
    text: &'a str,
    /// The function's name, for a `local function` definition; `None` for anything else,
    /// which is always kept.
    function: Option<&'a str>,
}

/// `source` without the top-level `local function` definitions that nothing kept calls,
/// each with the comment lines right above it; everything else is kept, in order.
pub(crate) fn without_unused_functions(source: &str) -> String {
    let items = items(source);
    let mentions: Vec<HashSet<&str>> = items.iter().map(|item| mentions(item.text)).collect();
    let mut kept: Vec<bool> = items.iter().map(|item| item.function.is_none()).collect();
    // The names mentioned by kept pieces, to be looked up; each function kept for one adds
    // the names it mentions. A function's mention of itself keeps nothing: it is kept only
    // when it is added.
    let mut wanted: Vec<&str> = (0..items.len())
        .filter(|&i| kept[i])
        .flat_map(|i| mentions[i].iter().copied())
        .collect();
    while let Some(name) = wanted.pop() {
        for (i, item) in items.iter().enumerate() {
            if !kept[i] && item.function == Some(name) {
                kept[i] = true;
                wanted.extend(mentions[i].iter().copied());
            }
        }
    }
    items
        .iter()
        .zip(kept)
        .filter(|(_, kept)| *kept)
        .map(|(item, _)| item.text)
        .collect()
}

/// Splits `source` into functions (with the comment lines right above each) and the rest.
fn items(source: &str) -> Vec<Item<'_>> {
    let mut items = Vec::new();
    // Where the current piece of "the rest" starts, and where its trailing comment lines
    // (which belong to a function if one follows at once) start.
    let mut rest = 0;
    let mut comments: Option<usize> = None;
    let mut function: Option<(usize, &str)> = None;
    let mut at = 0;
    for line in source.split_inclusive('\n') {
        let start = at;
        at += line.len();
        if let Some((begin, name)) = function {
            if line.trim_end() == "end" {
                items.push(Item {
                    text: &source[begin..at],
                    function: Some(name),
                });
                function = None;
                rest = at;
            }
            continue;
        }
        if let Some(name) = function_name(line) {
            let begin = comments.unwrap_or(start);
            if rest < begin {
                items.push(Item {
                    text: &source[rest..begin],
                    function: None,
                });
            }
            function = Some((begin, name));
            comments = None;
        } else if line.starts_with("--") {
            comments.get_or_insert(start);
        } else {
            comments = None;
        }
    }
    // An unfinished definition (no `end` line) is kept as it is: Redis will say what is wrong.
    let tail = function.map_or(rest, |(begin, _)| begin);
    if tail < source.len() {
        items.push(Item {
            text: &source[tail..],
            function: None,
        });
    }
    items
}

/// The name a line defines, if it starts a top-level `local function NAME(`.
fn function_name(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("local function ")?;
    let name = &rest[..rest.find('(')?];
    (!name.is_empty() && name.bytes().all(is_identifier_byte)).then_some(name)
}

/// The whole identifiers `text` mentions outside comments: calls, and functions passed on as
/// values. A mention in a string counts too, which at worst keeps a function for nothing.
fn mentions(text: &str) -> HashSet<&str> {
    let mut names = HashSet::new();
    for line in text.lines() {
        let code = line.find("--").map_or(line, |comment| &line[..comment]);
        names.extend(
            code.split(|c: char| !c.is_ascii() || !is_identifier_byte(c as u8))
                .filter(|word| !word.is_empty()),
        );
    }
    names
}

/// Whether `text` mentions `name` as a whole identifier outside comments (see [`mentions`]).
#[cfg(test)]
fn calls(text: &str, name: &str) -> bool {
    mentions(text).contains(name)
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
-- prelude: helpers.

-- Used by the script.
-- Two comment lines.
local function used(x)
    return helper(x)
end

-- Used only by `used`.
local function helper(x)
    return x
end

-- Called by nobody; its name in a comment (unused) or as part of another name
-- (unused_too) does not keep it.
local function unused(x)
    return x
end

local function unused_too()
    return unused(1)
end
-- the script: unused is not called here
return used(KEYS[1])
";

    #[test]
    fn keeps_what_the_script_calls_directly_or_through_kept_functions() {
        let kept = without_unused_functions(SCRIPT);
        assert_eq!(
            kept,
            "\
-- prelude: helpers.

-- Used by the script.
-- Two comment lines.
local function used(x)
    return helper(x)
end

-- Used only by `used`.
local function helper(x)
    return x
end


-- the script: unused is not called here
return used(KEYS[1])
"
        );
    }

    /// The pass reads the form the preludes are written in (see the module docs); a file
    /// that strayed from it could lose or merge code without a word. Every file in `lua/`:
    /// its pieces put back together are the file, every `local function` at the start of a
    /// line is one piece of its own, and every line starting with `end` is just `end`.
    #[test]
    fn every_script_file_is_in_the_form_the_pass_reads() {
        let files = super::super::lua_files();
        for (path, source) in &files {
            let source = source.as_str();
            let name = path.display();
            let items = items(source);
            let joined: String = items.iter().map(|item| item.text).collect();
            assert_eq!(joined, source, "{name}: pieces lost or doubled");
            let definitions = source
                .lines()
                .filter(|line| function_name(line).is_some())
                .count();
            let functions = items.iter().filter(|item| item.function.is_some()).count();
            assert_eq!(
                functions, definitions,
                "{name}: a definition not closed by `end`"
            );
            for line in source.lines().filter(|line| line.starts_with("end")) {
                assert_eq!(
                    line.trim_end(),
                    "end",
                    "{name}: a top-level `end` with more"
                );
            }
        }
        assert!(files.len() > 50, "found {} scripts", files.len());
    }

    #[test]
    fn a_text_without_functions_is_left_as_it_is() {
        for text in ["return 1", "-- a comment\nreturn 1\n", ""] {
            assert_eq!(without_unused_functions(text), text);
        }
    }

    #[test]
    fn a_function_without_its_end_is_kept_whole() {
        let text = "local function broken()\n  return 1\nreturn broken()\n";
        assert_eq!(without_unused_functions(text), text);
    }

    #[test]
    fn a_call_is_found_only_as_a_whole_identifier_outside_comments() {
        assert!(calls("x = f(1)", "f"));
        assert!(calls("return g, f", "f"));
        assert!(!calls("x = ff(1)", "f"));
        assert!(!calls("x = f_(1)", "f"));
        assert!(!calls("x = 1 -- f(1)", "f"));
    }
}
