//! docs/design.md's layer map against the workspace: every crate, every module of
//! fence-core, every module of a `decide/` or `runtime/` folder (fence-core's and any other
//! crate's) and every command of the `fence` binary must be named in it, and a `decide/` or
//! `runtime/` module it names must exist. The map cannot drift silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced block under `## Layers` in docs/design.md.
fn layer_map() -> String {
    let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let from = design
        .find("## Layers")
        .expect("docs/design.md has a Layers section");
    let rest = &design[from..];
    let open = rest.find("```\n").expect("the Layers section has a block") + 4;
    let close = open + rest[open..].find("```").expect("the block is closed");
    rest[open..close].to_owned()
}

/// The lines of `krate`'s entry: its own line (at column 0) and the indented ones below it.
fn entry<'m>(map: &'m str, krate: &str) -> Vec<&'m str> {
    let mut lines = map
        .lines()
        .skip_while(|l| l.split_whitespace().next() != Some(krate));
    let Some(first) = lines.next() else {
        return Vec::new();
    };
    let rest = lines.take_while(|l| l.starts_with(' '));
    std::iter::once(first).chain(rest).collect()
}

/// The modules an entry names at `indent` spaces: the first word of each line indented by
/// exactly that much.
fn named_at(lines: &[&str], indent: usize) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| {
            let (lead, rest) = (l.get(..indent)?, l.get(indent..)?);
            (lead.trim().is_empty() && !rest.starts_with(' ')).then_some(rest)
        })
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The submodules the entry names under its module `parent` (the lines from `parent`'s to
/// the next module of the same level).
fn named_under(lines: &[&str], parent: &str) -> BTreeSet<String> {
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("  {parent} ")));
    let Some(start) = start else {
        return BTreeSet::new();
    };
    let body: Vec<&str> = lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with("   "))
        .copied()
        .collect();
    named_at(&body, 12)
}

/// The modules of a source folder: its files (without `mod.rs` and `lib.rs`) and its
/// folders.
fn modules(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            if p.is_dir() {
                return Some(name);
            }
            let stem = name.strip_suffix(".rs")?;
            (stem != "mod" && stem != "lib").then(|| stem.to_owned())
        })
        .collect()
}

fn crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_crate_has_an_entry() {
    let map = layer_map();
    let missing: Vec<String> = crates()
        .into_iter()
        .filter(|c| entry(&map, c).is_empty())
        .collect();
    assert!(
        missing.is_empty(),
        "crates missing from docs/design.md's layer map: {missing:?}"
    );
}

#[test]
fn every_module_of_the_core_is_named() {
    let map = layer_map();
    let core = entry(&map, "fence-core");
    let named = named_at(&core, 2);
    let src = modules(&root().join("crates/fence-core/src"));
    let missing: Vec<&String> = src.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "fence-core modules missing from the layer map: {missing:?}"
    );
    let gone: Vec<&String> = named.difference(&src).collect();
    assert!(
        gone.is_empty(),
        "the layer map names fence-core modules that are gone: {gone:?}"
    );
}

/// Every `decide/` and `runtime/` folder of every crate, named module for module.
#[test]
fn every_decide_and_runtime_module_is_named() {
    let map = layer_map();
    let mut checked = 0;
    for krate in crates() {
        for folder in ["decide", "runtime"] {
            let dir = root().join("crates").join(&krate).join("src").join(folder);
            if !dir.is_dir() {
                continue;
            }
            checked += 1;
            let named = named_under(&entry(&map, &krate), folder);
            let src = modules(&dir);
            assert_eq!(
                named, src,
                "docs/design.md's layer map names {krate}'s {folder} modules {named:?}; the crate has {src:?}"
            );
        }
    }
    assert!(
        checked >= 2,
        "fence-core's decide and runtime folders were not found"
    );
}

#[test]
fn every_command_is_named() {
    let help = Command::new(env!("CARGO_BIN_EXE_fence"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "fence --help lists {commands:?}");
    let cli = entry(&layer_map(), "fence-cli").join(" ");
    let words: BTreeSet<&str> = cli
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
        .collect();
    let missing: Vec<&&str> = commands.iter().filter(|c| !words.contains(**c)).collect();
    assert!(
        missing.is_empty(),
        "commands missing from the layer map's fence-cli entry: {missing:?}"
    );
}

/// The binary is the top floor: no crate depends on fence-cli, as a library or for its tests
/// (fence-py and the fleet's examples open stores through the `fence` library).
#[test]
fn nothing_depends_on_the_binary() {
    let dependents: Vec<String> = crates()
        .into_iter()
        .filter(|c| c != "fence-cli")
        .filter(|c| {
            let manifest = root().join("crates").join(c).join("Cargo.toml");
            let text = std::fs::read_to_string(manifest).unwrap();
            text.lines()
                .map(str::trim_start)
                .any(|l| l.starts_with("fence-cli ") || l.starts_with("fence-cli."))
        })
        .collect();
    assert!(
        dependents.is_empty(),
        "crates that depend on fence-cli: {dependents:?}"
    );
}

/// The source files allowed over 800 lines, each one concept: the holder's lease machine
/// (827 lines of code, the rest its unit tests), the simulation's world, and fence-fs's
/// object (777 lines of code).
const LONG_FILES: [&str; 3] = [
    "crates/fence-core/src/decide/lease.rs",
    "crates/fence-testkit/src/sim/mod.rs",
    "crates/fence-fs/src/object.rs",
];

/// The `.rs` files under `dir`, recursively, relative to the workspace root.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// No file under a crate's `src/` grows past 800 lines unless it is named above.
#[test]
fn no_source_file_is_over_800_lines_unless_named() {
    let mut files = Vec::new();
    for krate in crates() {
        sources(&root().join("crates").join(&krate).join("src"), &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().lines().count() > 800)
        .map(|f| {
            let rel = f.strip_prefix(root()).unwrap_or(f);
            rel.to_string_lossy().replace("../../", "")
        })
        .filter(|f| !LONG_FILES.iter().any(|allowed| f.ends_with(allowed)))
        .collect();
    assert!(long.is_empty(), "source files over 800 lines: {long:?}");
}
