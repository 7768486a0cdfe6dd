//! The test servers of the live tests, named by the variables `scripts/servers/*.sh` write.

/// The values of the variables `names` (a test server's address and credentials, as written
/// to `$FENCE_SERVERS_DIR/<name>.env`), or `None` with a notice when one is missing or
/// empty: the test then skips — or fails, when `FENCE_REQUIRE_SERVERS=1`.
///
/// ```
/// let found = fence_testkit::servers::from_env("doc", &["PATH"]);
/// assert!(found.is_some_and(|v| v.len() == 1));
/// ```
pub fn from_env(test: &str, names: &[&str]) -> Option<Vec<String>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let values: Option<Vec<String>> = names.iter().map(|n| var(n)).collect();
    if values.is_none() {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: {names:?} missing but FENCE_REQUIRE_SERVERS=1 (run \
             `bash scripts/servers/<name>.sh start` and source $FENCE_SERVERS_DIR/<name>.env)"
        );
        eprintln!("SKIPPED {test}: no test server (run scripts/servers/*.sh start)");
    }
    values
}
