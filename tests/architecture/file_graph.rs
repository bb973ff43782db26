//! Which file of a crate uses which other file: the names a file takes by a path from its crate
//! (`crate::…`, `super::…`), each resolved to the one file under that path that defines it, or,
//! when none does, to the module's own file (which re-exports it). A name defined by several
//! files under the path is left out (an arrow missed, never one invented), and a module's
//! `mod.rs` re-exporting its files adds no arrow of its own (its `pub use` paths are relative).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{code, rust_files};

/// A file's module path in its crate: `domain/message/mod.rs` and `domain/message.rs` are
/// `domain::message`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|s| s.trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The items a file defines (at any depth of its non-test code), by name.
fn defined(code: &str) -> BTreeSet<String> {
    const KINDS: [&str; 8] = [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ",
    ];
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let mut rest = line.trim_start();
        for prefix in ["pub(crate) ", "pub(super) ", "pub ", "async ", "unsafe "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        for kind in KINDS {
            if let Some(after) = rest.strip_prefix(kind) {
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Parse a path tree at the start of `s` (after `crate::` or `super::`): `a::b::C`,
/// `a::{b::C, D as E, self}`; each leaf pushed as its segments after `base`.
fn tree(s: &str, base: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = base.to_vec();
    let mut i = 0;
    loop {
        if s[i..].starts_with('{') {
            i += 1;
            loop {
                while s[i..].starts_with([' ', '\n', ',']) {
                    i += 1;
                }
                if i >= s.len() || s[i..].starts_with('}') {
                    return i + 1;
                }
                i += tree(&s[i..], &path, out);
            }
        }
        let ident: String = s[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            return i.max(1);
        }
        i += ident.len();
        if ident != "self" {
            path.push(ident);
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(path);
        // A rename (`as E`) names nothing more.
        if let Some(renamed) = s[i..].strip_prefix(" as ") {
            i += 4 + renamed.chars().take_while(|c| c.is_alphanumeric() || *c == '_').count();
        }
        return i;
    }
}

/// Every path a file's code names from its crate, as absolute segments.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0 || !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
        if boundary && rest.starts_with("crate::") {
            i += "crate::".len() + tree(&rest["crate::".len()..], &[], &mut out);
        } else if boundary && rest.starts_with("super::") {
            // `super` is the parent of the file's module; `super::super::` one more up.
            let mut base: Vec<String> = module.to_vec();
            let mut j = 0;
            while rest[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
            i += j + tree(&rest[j..], &base, &mut out);
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// File -> the files of the same crate it takes names from.
pub fn file_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let files = rust_files(src);
    let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|f| (module_of(src, f), f.clone())).collect();
    let mut definers: BTreeMap<String, Vec<(Vec<String>, PathBuf)>> = BTreeMap::new();
    let codes: BTreeMap<PathBuf, String> = files.iter().map(|f| (f.clone(), code(f))).collect();
    for (f, c) in &codes {
        for name in defined(c) {
            definers.entry(name).or_default().push((module_of(src, f), f.clone()));
        }
    }
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (f, c) in &codes {
        let module = module_of(src, f);
        let edges = graph.entry(f.clone()).or_default();
        for path in named_paths(c, &module) {
            // The longest prefix of the path that is a module (the root always is), and the
            // name after it: a file of that module, or an item (a variant, an associated item
            // after it are the item's).
            let Some(j) = (0..=path.len()).rev().find(|&j| modules.contains_key(&path[..j])) else {
                continue;
            };
            let under = &path[..j];
            let target = match path.get(j) {
                None => modules.get(under).cloned(),
                Some(name) => {
                    let found: Vec<&PathBuf> = definers
                        .get(name)
                        .into_iter()
                        .flatten()
                        .filter(|(m, _)| m.starts_with(under))
                        .map(|(_, f)| f)
                        .collect();
                    match found.as_slice() {
                        [one] => Some((*one).clone()),
                        // Defined nowhere under it: re-exported by the module's own file.
                        [] => modules.get(under).cloned(),
                        _ => None,
                    }
                }
            };
            if let Some(t) = target.filter(|t| t != f) {
                edges.insert(t);
            }
        }
    }
    graph
}

/// A cycle of files, if there is one, named relative to `src`.
pub fn file_cycle(src: &Path) -> Option<Vec<String>> {
    let graph: BTreeMap<String, BTreeSet<String>> = file_graph(src)
        .into_iter()
        .map(|(f, to)| {
            let name = |p: &Path| p.strip_prefix(src).unwrap_or(p).display().to_string();
            (name(&f), to.iter().map(|t| name(t)).collect())
        })
        .collect();
    super::cycle(&graph)
}

#[test]
fn the_file_graph_reader_resolves_names_to_the_files_that_define_them() {
    // A crate of four files: a -> b (a name), b -> c (through super), c -> a (a grouped import).
    let dir = std::env::temp_dir().join(format!("file-graph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("m")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    write("lib.rs", "pub mod a;\npub mod m;\n");
    write("a.rs", "use crate::m::Thing;\npub fn alpha() {}\n");
    write("m/mod.rs", "mod b;\nmod c;\npub use b::Thing;\n");
    write("m/b.rs", "pub struct Thing;\nfn f() { super::c::gamma(); }\n");
    write(
        "m/c.rs",
        "use crate::{a::{alpha}, m::b as other};\npub fn gamma() { alpha() }\n",
    );
    let graph = file_graph(&src);
    let edges = |f: &str| -> Vec<String> {
        graph[&src.join(f)]
            .iter()
            .map(|t| t.strip_prefix(&src).unwrap().display().to_string())
            .collect()
    };
    assert_eq!(edges("a.rs"), ["m/b.rs"]);
    assert_eq!(edges("m/b.rs"), ["m/c.rs"]);
    assert_eq!(edges("m/c.rs"), ["a.rs", "m/b.rs"]);
    assert!(edges("m/mod.rs").is_empty(), "a re-export is no arrow");
    assert!(file_cycle(&src).is_some_and(|c| c.len() == 4), "{:?}", file_cycle(&src));
    // Without the arrow back, no cycle.
    write("m/c.rs", "pub fn gamma() {}\n");
    assert_eq!(file_cycle(&src), None);
    std::fs::remove_dir_all(&dir).ok();
}
