//! How a script's text is arranged before it is sent: which prelude functions it carries,
//! and where.
//!
//! A script is its preludes followed by its own file, and a prelude defines every helper its
//! primitive's scripts share: each script calls only some of them. Redis runs the whole text
//! on every call, and each `local function` it meets is a closure made anew, which costs
//! Redis time on every call (about 0.9 µs per script for the preludes' functions). So the
//! text sent to Redis:
//!
//! * keeps only the functions the script's own code calls, directly or through another kept
//!   function: the release of a lock, for one, would otherwise make thirteen to use five;
//! * and, in a script whose own file has a line starting with [`UNCOMMON`] at its top level,
//!   defines the functions that only the code after that line calls (directly or through
//!   another such function) there, after the common path has returned: a call that returns
//!   before it never makes them. Functions the code before it calls, and everything those
//!   call, stay in front.
//!
//! The preludes are written so that this can be read off their text: every helper is a
//! `local function NAME(` at the start of a line, ending at the first line that is `end`, with
//! its comment lines right above it (dropped or moved with it).

use std::collections::HashSet;

/// The line (a Lua comment) after which a script's own code runs only on its uncommon paths:
/// the prelude functions only that code needs are defined there (see the module docs). It
/// must be at the script's top level, not inside a block.
pub(crate) const UNCOMMON: &str = "-- @uncommon";

/// One top-level piece of a script's text.
struct Item<'a> {
    /// The piece's lines, with their line ends (and, for a function, its comment lines).
    text: &'a str,
    /// The function's name, for a `local function` definition; `None` for anything else,
    /// which is always kept.
    function: Option<&'a str>,
    /// Whether the piece comes after the [`UNCOMMON`] line (the line starts the first piece
    /// after it).
    uncommon: bool,
}

/// `source` as sent (see the module docs): without the top-level `local function`
/// definitions that nothing kept calls, each with the comment lines right above it, and with
/// those only the uncommon paths call moved to just before the [`UNCOMMON`] line; everything
/// else is kept, in order.
pub(crate) fn as_sent(source: &str) -> String {
    let items = items(source);
    let mentions: Vec<HashSet<&str>> = items.iter().map(|item| mentions(item.text)).collect();
    let items = &items;
    let rest = |uncommon_too: bool| {
        (0..items.len())
            .filter(move |&i| items[i].function.is_none() && (uncommon_too || !items[i].uncommon))
    };
    // What the whole text needs, and what the code before the uncommon paths needs.
    let kept = reached(items, &mentions, rest(true));
    let common = reached(items, &mentions, rest(false));
    let mut sent = String::with_capacity(source.len());
    let mut deferred_written = false;
    for (i, item) in items.iter().enumerate() {
        if item.uncommon && !deferred_written {
            // Functions only the uncommon paths need, in their order, ahead of those paths.
            for (j, deferred) in items.iter().enumerate() {
                if kept[j] && !common[j] && !deferred.uncommon {
                    sent.push_str(deferred.text);
                }
            }
            deferred_written = true;
        }
        let needed = match (item.function, item.uncommon) {
            (None, _) => true,
            (Some(_), true) => kept[i],
            (Some(_), false) => common[i],
        };
        if needed {
            sent.push_str(item.text);
        }
    }
    sent
}

/// The pieces `roots` need: themselves, and every function one of them mentions, directly or
/// through another function needed. A function's mention of itself needs nothing: it is
/// needed only when something else mentions it.
fn reached(
    items: &[Item<'_>],
    mentions: &[HashSet<&str>],
    roots: impl Iterator<Item = usize>,
) -> Vec<bool> {
    let mut needed = vec![false; items.len()];
    let mut wanted: Vec<&str> = Vec::new();
    for root in roots {
        needed[root] = true;
        wanted.extend(mentions[root].iter().copied());
    }
    while let Some(name) = wanted.pop() {
        for (i, item) in items.iter().enumerate() {
            if !needed[i] && item.function == Some(name) {
                needed[i] = true;
                wanted.extend(mentions[i].iter().copied());
            }
        }
    }
    needed
}

/// Splits `source` into functions (with the comment lines right above each) and the rest, the
/// first [`UNCOMMON`] line starting a piece.
fn items(source: &str) -> Vec<Item<'_>> {
    let mut items = Vec::new();
    // Where the current piece of "the rest" starts, and where its trailing comment lines
    // (which belong to a function if one follows at once) start.
    let mut rest = 0;
    let mut comments: Option<usize> = None;
    let mut function: Option<(usize, &str)> = None;
    let mut uncommon = false;
    let mut at = 0;
    for line in source.split_inclusive('\n') {
        let start = at;
        at += line.len();
        if let Some((begin, name)) = function {
            if line.trim_end() == "end" {
                items.push(Item {
                    text: &source[begin..at],
                    function: Some(name),
                    uncommon,
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
                    uncommon,
                });
            }
            function = Some((begin, name));
            comments = None;
        } else if !uncommon && line.starts_with(UNCOMMON) {
            if rest < start {
                items.push(Item {
                    text: &source[rest..start],
                    function: None,
                    uncommon,
                });
            }
            rest = start;
            uncommon = true;
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
            uncommon,
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
        let kept = as_sent(SCRIPT);
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
            // At most one uncommon line, in a script's own file (a prelude's would split
            // every script it is put in front of), outside every function, and never
            // indented (the script's top level).
            let marks: Vec<&str> = source
                .lines()
                .filter(|line| line.trim_start().starts_with(UNCOMMON))
                .collect();
            assert!(marks.len() <= 1, "{name}: {} uncommon lines", marks.len());
            if let Some(mark) = marks.first() {
                assert!(
                    mark.starts_with(UNCOMMON),
                    "{name}: an indented uncommon line"
                );
                assert!(
                    !path.to_string_lossy().contains("prelude"),
                    "{name}: a prelude with an uncommon line"
                );
                assert!(
                    items.iter().any(|item| item.function.is_none()
                        && item.uncommon
                        && item.text.starts_with(UNCOMMON)),
                    "{name}: the uncommon line inside a function"
                );
            }
        }
        assert!(files.len() > 50, "found {} scripts", files.len());
    }

    /// A prelude whose helpers the common path and the uncommon paths call in part, and a
    /// script whose common path returns before its uncommon line.
    const WITH_UNCOMMON_PATHS: &str = "\
-- prelude: helpers.

-- Called by both of the others.
local function shared(x)
    return x
end

-- Only the uncommon path calls it.
local function cold(x)
    return shared(x) + 1
end

-- The common path calls it.
local function hot(x)
    return shared(x)
end

-- Called by nobody.
local function unused()
    return 0
end
-- the script
if ARGV[1] == 'common' then
    return hot(1)
end

-- @uncommon: the rest.
return cold(2)
";

    #[test]
    fn functions_only_the_uncommon_paths_call_are_defined_where_those_paths_begin() {
        assert_eq!(
            as_sent(WITH_UNCOMMON_PATHS),
            "\
-- prelude: helpers.

-- Called by both of the others.
local function shared(x)
    return x
end


-- The common path calls it.
local function hot(x)
    return shared(x)
end

-- the script
if ARGV[1] == 'common' then
    return hot(1)
end

-- Only the uncommon path calls it.
local function cold(x)
    return shared(x) + 1
end
-- @uncommon: the rest.
return cold(2)
"
        );
    }

    #[test]
    fn a_function_both_paths_call_is_defined_in_front() {
        let text = WITH_UNCOMMON_PATHS.replace("return cold(2)", "return hot(2) + cold(2)");
        let sent = as_sent(&text);
        let (front, script) = sent.split_once("-- the script").unwrap_or_default();
        assert!(front.contains("local function hot(") && front.contains("local function shared("));
        assert!(!front.contains("local function cold("));
        let (common, uncommon) = script.split_once(UNCOMMON).unwrap_or_default();
        assert!(common.ends_with("local function cold(x)\n    return shared(x) + 1\nend\n"));
        assert!(!uncommon.contains("local function"));
    }

    #[test]
    fn a_text_without_functions_is_left_as_it_is() {
        for text in ["return 1", "-- a comment\nreturn 1\n", ""] {
            assert_eq!(as_sent(text), text);
        }
    }

    #[test]
    fn a_function_without_its_end_is_kept_whole() {
        let text = "local function broken()\n  return 1\nreturn broken()\n";
        assert_eq!(as_sent(text), text);
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
