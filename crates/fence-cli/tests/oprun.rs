//! `fence` for operators, part two (issue 29): one-shot runs after a crash (cron), breaking a
//! lease, semaphores, holding a lease across a script, "acquired" once a wait ends, `--probe`,
//! continuing cells no `fence run` holds, and parallel puts of one holder.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{fence, fence_bin, output, run_args, Store};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_hundred_parallel_puts_of_one_holder_all_land() {
    let store = Store::new();
    let fails = store.path("fails");
    let script = format!(
        "for i in $(seq 1 100); do ( \"$FENCE_BIN\" put k$i --value v$i 2>>{err} || echo $? >> {fails} ) & done; wait",
        err = store.path("put.err").display(),
        fails = fails.display(),
    );
    let out = fence(&run_args(
        &store,
        "jobs",
        &["--ttl", "30s", "--", "sh", "-c", &script],
    ))
    .env("FENCE_BIN", fence_bin())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let failed = std::fs::read_to_string(&fails).unwrap_or_default();
    let why = std::fs::read_to_string(store.path("put.err")).unwrap_or_default();
    assert!(failed.is_empty(), "exit codes {failed:?}: {why}");
    for i in [1, 50, 100] {
        let get = output(&[
            "get",
            "--store",
            &store.url,
            "--lease",
            "jobs",
            &format!("k{i}"),
        ]);
        assert_eq!(get.stdout, format!("v{i}").as_bytes(), "{}", stderr(&get));
    }
}
