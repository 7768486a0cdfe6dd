//! What a reader of a store may conclude, checked against the `fence` binary: a listing it
//! could not read is never an empty store.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{fence_bin, output, run_args, Store};

/// The unprivileged user the permission tests run `fence` as (`nobody`).
const NOBODY: &str = "65534";

/// A command running `bin ARGS` as [`NOBODY`] with no supplementary groups, or why that
/// cannot be had here (no `setpriv`, or not root: only root can switch users).
fn as_nobody(bin: &Path, args: &[&str]) -> Result<Command, String> {
    let root = nix::unistd::geteuid().is_root();
    let setpriv = Command::new("setpriv").arg("--version").output();
    match (root, setpriv) {
        (false, _) => Err("not root: cannot run a command as another user".into()),
        (true, Err(e)) => Err(format!("setpriv (util-linux) is missing: {e}")),
        (true, Ok(_)) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"]);
            c.arg(bin).args(args);
            Ok(c)
        }
    }
}

/// This build's `fence`, where [`NOBODY`] can run it: in place when every directory on its
/// path lets others through, else a copy in `dir`.
fn fence_for_nobody(dir: &Path) -> PathBuf {
    let bin = Path::new(fence_bin());
    let open = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    if bin.ancestors().all(open) {
        return bin.to_owned();
    }
    let copy = dir.join("fence");
    std::fs::copy(bin, &copy).expect("copy fence");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

fn text(out: &Output) -> (String, String) {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (s(&out.stdout), s(&out.stderr))
}

/// Issue 35, item 3: on a store root made (its `cells/` and `nodes/` are 0700, fence's
/// default), `fence status` (table and `--json`) and `fence check` run as another user fail
/// with the store-error code (69), naming the directory they could not read. On main they
/// printed `CELLS (none)` / `"cells": []` and "0 record(s) checked", exit 0: fence-fs's
/// listing skipped every directory it could not open.
#[test]
fn a_listing_it_cannot_read_is_an_error_never_an_empty_store() {
    let store = Store::new();
    let made = output(&run_args(&store, "held", &["--", "true"]));
    assert_eq!(made.status.code(), Some(0), "{:?}", text(&made));
    // The root itself may be entered by anyone (as a shared store's root is); what lies
    // below is root's alone.
    std::fs::set_permissions(store.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bins = tempfile::tempdir().unwrap();
    let bin = fence_for_nobody(bins.path());
    for args in [
        &["status", "--store", &store.url][..],
        &["status", "--store", &store.url, "--json"],
        &["check", "--store", &store.url],
    ] {
        let cmd = match as_nobody(&bin, args) {
            Ok(cmd) => cmd,
            Err(why) => return eprintln!("SKIPPED: {why}"),
        };
        let out = { cmd }.output().expect("run fence as nobody");
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {stdout}\n{stderr}");
        assert!(
            !stdout.contains("(none)") && !stdout.contains("\"cells\""),
            "{stdout}"
        );
        let cells = store.path("cells").display().to_string();
        let nodes = store.path("nodes").display().to_string();
        assert!(
            stderr.contains(&cells) || stderr.contains(&nodes),
            "{args:?} names the directory it could not read: {stderr}"
        );
    }
}
