//! `az://` and `azure://` stores through the real `fence` binary and the store-opening
//! function, against the Azurite of `scripts/servers/azure.sh` (its address from
//! `$FENCE_SERVERS_DIR/azure.env`; skipped without it, failing when `FENCE_REQUIRE_SERVERS=1`).
#![cfg(feature = "azure")]

mod common;

use common::fence;
use serde_json::Value;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// (blob endpoint, container) of the test Azurite, or `None` with a notice.
fn azurite(test: &str) -> Option<(String, String)> {
    let found = var("FENCE_AZURE_ENDPOINT").zip(var("FENCE_AZURE_CONTAINER"));
    if found.is_none() {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: FENCE_AZURE_* variables missing but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED {test}: no Azurite (run scripts/servers/azure.sh start)");
    }
    found
}

fn fresh(test: &str) -> String {
    format!(
        "fence-cli-tests/{test}-{:016x}",
        fence_core::Entropy::from_os().next_u64()
    )
}

#[test]
fn probe_of_azurite_through_the_emulator_switch_is_honest() {
    let Some((endpoint, container)) = azurite("probe_of_azurite_is_honest") else {
        return;
    };
    for scheme in ["az", "azure"] {
        let url = format!("{scheme}://{container}/{}", fresh("probe"));
        let out = fence(&["probe", &url, "--rounds", "2", "--json"])
            .env("AZURE_STORAGE_USE_EMULATOR", "true")
            .env("AZURITE_BLOB_STORAGE_URL", &endpoint)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: Value = serde_json::from_str(&stdout).expect("probe --json parses");
        assert_eq!(json["verdict"], "honest", "{stdout}");
        println!("fence probe {url} on azurite: {}", json["verdict"]);
    }
}

#[test]
fn probe_of_an_unreachable_azure_endpoint_is_an_error_not_a_verdict() {
    let out = fence(&["probe", "az://fence-unreachable/p", "--rounds", "1"])
        .env("AZURE_STORAGE_USE_EMULATOR", "true")
        .env("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_malformed_azure_url_is_a_usage_error() {
    for url in ["az://", "az://UPPER/x", "azure:///p"] {
        let err = fence_cli::stores::open(url, None).unwrap_err();
        assert_eq!(err.code, 2, "{url}");
    }
}

#[test]
fn a_fenced_run_put_and_get_on_azurite() {
    let Some((endpoint, container)) = azurite("a_fenced_run_put_and_get_on_azurite") else {
        return;
    };
    let url = format!("az://{container}/{}", fresh("run"));
    let emulator = |mut c: std::process::Command| {
        c.env("AZURE_STORAGE_USE_EMULATOR", "true")
            .env("AZURITE_BLOB_STORAGE_URL", &endpoint);
        c
    };
    let script = "\"$FENCE_BIN\" put last-run --value \"epoch $FENCE_EPOCH\"";
    let run = emulator(fence(&[
        "run", "--store", &url, "--lease", "nightly", "--ttl", "6s", "--", "sh", "-c", script,
    ]))
    .env("FENCE_BIN", common::fence_bin())
    .output()
    .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let get = emulator(fence(&[
        "get", "--store", &url, "--lease", "nightly", "last-run",
    ]))
    .output()
    .unwrap();
    assert_eq!(
        (
            get.status.code(),
            String::from_utf8_lossy(&get.stdout).trim()
        ),
        (Some(0), "epoch 1"),
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
}
