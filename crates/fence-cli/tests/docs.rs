//! The documentation says what the binary does: docs/cli.md's walk-through runs as written
//! with the `fence` of `cargo build`, it asks only for features that are not on by default,
//! every flag of `fence run` is in it, and docs/backends.md's cost table renders.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fence_bin, output, wait_bounded};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first ```sh block after `heading`.
fn sh_block(doc: &str, heading: &str) -> String {
    let after = &doc[doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"))..];
    let start = after.find("```sh\n").expect("an sh block") + 6;
    let len = after[start..].find("```").expect("closed block");
    after[start..start + len].to_owned()
}

/// The block's lines with `\`-continuations joined, grouped by the `# ...` comment above them.
fn sections(block: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if let Some(comment) = line.strip_prefix('#') {
            out.push((comment.trim().to_owned(), Vec::new()));
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line.trim_start());
        if let Some(last) = out.last_mut() {
            last.1.push(std::mem::take(&mut pending));
        }
    }
    out
}

fn section(all: &[(String, Vec<String>)], starts: &str) -> Vec<String> {
    all.iter()
        .filter(|(c, _)| c.starts_with(starts))
        .flat_map(|(_, l)| l.clone())
        .collect()
}

/// A checkout with `target/debug/fence` as `cargo build` leaves it.
fn checkout() -> tempfile::TempDir {
    let co = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(co.path().join("target/debug")).unwrap();
    std::os::unix::fs::symlink(fence_bin(), co.path().join("target/debug/fence")).unwrap();
    co
}

/// `setup` then `exec command` in a shell in `dir`, so the shell's pid is fence's.
fn terminal(dir: &Path, setup: &[String], command: &str, out: &Path, err: &Path) -> Child {
    let script = format!("{}\nexec {command}", setup.join("\n"));
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_remove("FENCE_STORE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .expect("spawn a terminal")
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn the_takeover_walk_through_in_cli_md_works_as_written() {
    let doc = repo_file("docs/cli.md");
    let all = sections(&sh_block(&doc, "## Watching a takeover by hand"));
    let tmp = tempfile::tempdir().unwrap();
    let locks = tmp.path().join("locks").display().to_string();
    let setup: Vec<String> = section(&all, "every terminal")
        .iter()
        .map(|l| l.replace("/tmp/locks", &locks))
        .collect();
    let (one, two) = (section(&all, "terminal 1"), section(&all, "terminal 2"));
    assert_eq!(
        (one.len(), two.len()),
        (1, 1),
        "one command per terminal: {all:?}"
    );
    let co = checkout();
    let file = |n: &str| -> PathBuf { tmp.path().join(n) };
    let mut t1 = terminal(co.path(), &setup, &one[0], &file("1.out"), &file("1.err"));
    let store = format!("file://{locks}");
    let beat = || output(&["get", "--store", &store, "--lease", "demo", "beat"]).stdout;
    wait_for("terminal 1's first beat", Duration::from_secs(10), || {
        beat().starts_with(b"1 ")
    });
    let mut t2 = terminal(co.path(), &setup, &two[0], &file("2.out"), &file("2.err"));
    wait_for(
        "terminal 2 saying that it waits",
        Duration::from_secs(10),
        || read(&file("2.err")).contains(&t1.id().to_string()),
    );
    // Ctrl-Z: the terminal sends SIGTSTP (here straight to fence, which passes it on).
    let t1_pid = Pid::from_raw(t1.id() as i32);
    kill(t1_pid, Signal::SIGTSTP).unwrap();
    wait_for(
        "terminal 2's `got epoch 2`",
        Duration::from_secs(20),
        || read(&file("2.out")).contains("got epoch 2"),
    );
    wait_for("epoch-2 beats", Duration::from_secs(5), || {
        beat().starts_with(b"2 ")
    });
    let status = output(&["status", "--store", &store, "demo", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["cells"][0]["holder"], "run.demo");
    assert_eq!(json["cells"][0]["epoch"], 2);
    // `fg`
    kill(t1_pid, Signal::SIGCONT).unwrap();
    let t1_status = wait_bounded(&mut t1, Duration::from_secs(10), "terminal 1");
    assert_eq!(t1_status.code(), Some(76), "{}", read(&file("1.err")));
    let said = read(&file("2.err"));
    let waits = said.lines().filter(|l| l.contains("waiting")).count();
    assert_eq!(waits, 1, "terminal 2 said it once: {said}");
    assert!(
        said.lines().last().is_some_and(|l| l.contains("epoch 2")),
        "and then which epoch it acquired: {said}"
    );
    kill(Pid::from_raw(t2.id() as i32), Signal::SIGTERM).unwrap();
    wait_bounded(&mut t2, Duration::from_secs(10), "terminal 2");
}

#[test]
fn cli_md_asks_only_for_features_that_are_not_on_by_default() {
    let manifest = repo_file("crates/fence-cli/Cargo.toml");
    let defaults = manifest
        .lines()
        .find_map(|l| l.strip_prefix("default = "))
        .expect("a default feature list");
    let doc = repo_file("docs/cli.md");
    for (i, _) in doc.match_indices("--features ") {
        let named: String = doc[i + 11..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == ',' || *c == '-')
            .collect();
        for feature in named.split(',') {
            assert!(
                !defaults.contains(&format!("\"{feature}\"")),
                "docs/cli.md asks for `--features {named}`, but {feature} is on by default"
            );
        }
    }
}

#[test]
fn every_flag_of_fence_run_is_in_cli_md() {
    let help = String::from_utf8(output(&["run", "--help"]).stdout).unwrap();
    let doc = repo_file("docs/cli.md");
    for flag in help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_alphanumeric()))
    {
        if flag != "--help" {
            assert!(doc.contains(flag), "{flag} is not in docs/cli.md");
        }
    }
}

#[test]
fn the_cost_table_in_backends_md_renders() {
    let doc = repo_file("docs/backends.md");
    let lines: Vec<&str> = doc.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("| backend | median |"))
        .expect("the cost table");
    let table: Vec<&str> = lines[header..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .copied()
        .collect();
    let columns = |l: &str| l.matches('|').count();
    assert!(
        table.iter().all(|l| columns(l) == columns(table[0])),
        "{table:#?}"
    );
    for row in [
        "S3Store on SeaweedFS",
        "S3Store on moto",
        "GcsStore on fake-gcs-server",
    ] {
        assert!(
            table.iter().any(|l| l.contains(row)),
            "{row} is not part of the rendered table"
        );
    }
}

/// The test servers' env files, if the servers are running (`FENCE_SERVERS_DIR`); a notice
/// (a failure with `FENCE_REQUIRE_SERVERS=1`) otherwise.
fn servers_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("FENCE_SERVERS_DIR").map(PathBuf::from);
    let found = dir.filter(|d| {
        ["s3.env", "gcs.env", "azure.env"]
            .iter()
            .all(|f| d.join(f).is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("FENCE_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "{test}: no test servers but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED {test}: no test servers (FENCE_SERVERS_DIR)");
    }
    found
}

/// docs/cli.md's walk over the test servers runs as written (under a fresh prefix, on the
/// servers already running), mapping their `FENCE_*` variables to the ones fence reads.
#[test]
fn the_test_servers_block_in_cli_md_works_as_written() {
    let test = "the_test_servers_block_in_cli_md_works_as_written";
    let Some(dir) = servers_dir(test) else {
        return;
    };
    let doc = repo_file("docs/cli.md");
    let all = sections(&sh_block(
        &doc,
        "## Trying the CLI against the test servers",
    ));
    let lines: Vec<String> = ["S3 ", "GCS ", "Azure "]
        .iter()
        .flat_map(|s| section(&all, s))
        .collect();
    assert!(lines.len() >= 8, "{all:?}");
    let fresh = format!("/try-{}-{}\"", std::process::id(), fence_core::now_ms());
    let script = lines.join("\n").replace("/try\"", &fresh);
    let bin_dir = Path::new(fence_bin()).parent().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-ec").arg(&script);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("AWS_") || k.starts_with("AZURE") || k.starts_with("FENCE_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .env("PATH", path)
        .env("FENCE_SERVERS_DIR", &dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for store in ["S3", "GCS", "Azure"] {
        assert!(said.contains(&format!("{store} epoch 1")), "{said}");
    }
}

/// README's `[dependencies]` snippet is one crate of this workspace, at its path, with
/// features that crate has.
#[test]
fn the_dependencies_snippet_in_readme_names_real_crates() {
    let readme = repo_file("README.md");
    let start = readme.find("```toml\n[dependencies]").expect("a snippet") + 8;
    let len = readme[start..].find("```").unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut crates = 0;
    for line in readme[start..start + len].lines() {
        let Some((name, rest)) = line.split_once(" = { path = \"../fence/") else {
            continue;
        };
        let path = rest.split('"').next().unwrap();
        let manifest = std::fs::read_to_string(root.join(path).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(manifest.contains(&format!("name = \"{name}\"")), "{line}");
        let features = rest.split_once("features = [").map_or("", |(_, f)| f);
        for feature in features.split(']').next().unwrap().split(',') {
            let feature = feature.trim().trim_matches('"');
            let declared = format!("\n{feature} = [");
            assert!(manifest.contains(&declared), "{line}: no feature {feature}");
        }
        crates += 1;
    }
    assert_eq!(crates, 1, "the snippet is one crate of this workspace");
}
