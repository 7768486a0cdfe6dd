//! `opendal+<service>://` stores through the real `fence` binary and the store-opening
//! function: OpenDAL's s3 service on the SeaweedFS of `scripts/servers/s3.sh` and its azblob
//! service on the Azurite of `scripts/servers/azure.sh` (skipped without them, failing when
//! `FENCE_REQUIRE_SERVERS=1`). Every run passes explicit credentials and turns OpenDAL's
//! config loading and metadata lookups off.
#![cfg(feature = "opendal")]

mod common;

use common::fence;
use serde_json::Value;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(test: &str, found: bool) -> bool {
    if !found {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: server variables missing but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED {test}: no test server (run scripts/servers/*.sh start)");
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
fn malformed_and_non_cas_opendal_urls_are_usage_errors() {
    for url in [
        "opendal+",
        "opendal+s3",
        "opendal+s3://",
        "opendal+s3:///p",
        "opendal+fs://root/p",
        "opendal+memory://x",
        "opendal+webdav://host/p",
    ] {
        let err = fence_cli::stores::open(url, None).unwrap_err();
        assert_eq!(err.code, 2, "{url}: {}", err.message);
    }
}

/// With a custom endpoint and no credentials, OpenDAL would ask an EC2 metadata service.
#[test]
fn a_custom_s3_endpoint_without_credentials_is_refused() {
    let mut c = fence(&["probe", "opendal+s3://b/p", "--rounds", "1"]);
    c.env("OPENDAL_S3_ENDPOINT", "http://127.0.0.1:9")
        .env("OPENDAL_S3_REGION", "us-east-1");
    for v in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "OPENDAL_S3_ACCESS_KEY_ID",
    ] {
        c.env_remove(v);
    }
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("OPENDAL_S3_ACCESS_KEY_ID"), "{stderr}");
}

fn seaweed(c: &mut std::process::Command) -> bool {
    let (Some(endpoint), Some(key), Some(secret)) = (
        var("FENCE_S3_SEAWEED_ENDPOINT"),
        var("FENCE_S3_ACCESS_KEY_ID"),
        var("FENCE_S3_SECRET_ACCESS_KEY"),
    ) else {
        return false;
    };
    c.env("OPENDAL_S3_ENDPOINT", endpoint)
        .env(
            "OPENDAL_S3_REGION",
            var("FENCE_S3_REGION").unwrap_or("us-east-1".into()),
        )
        .env("OPENDAL_S3_ACCESS_KEY_ID", key)
        .env("OPENDAL_S3_SECRET_ACCESS_KEY", secret)
        .env("OPENDAL_S3_DISABLE_CONFIG_LOAD", "true")
        .env("OPENDAL_S3_DISABLE_EC2_METADATA", "true");
    true
}

fn azurite(c: &mut std::process::Command) -> bool {
    let Some(endpoint) = var("FENCE_AZURE_ENDPOINT") else {
        return false;
    };
    let account = fence_opendal::emulator::AZURITE_ACCOUNT;
    c.env("OPENDAL_AZBLOB_ENDPOINT", format!("{endpoint}/{account}"))
        .env("OPENDAL_AZBLOB_ACCOUNT_NAME", account)
        .env(
            "OPENDAL_AZBLOB_ACCOUNT_KEY",
            fence_opendal::emulator::AZURITE_KEY,
        );
    true
}

#[test]
fn probe_through_opendal_is_honest_on_seaweedfs_and_azurite() {
    let test = "probe_through_opendal_is_honest_on_seaweedfs_and_azurite";
    let servers = [
        ("s3", var("FENCE_S3_BUCKET"), seaweed as fn(&mut _) -> bool),
        ("azblob", var("FENCE_AZURE_CONTAINER"), azurite),
    ];
    for (service, bucket, configure) in servers {
        let url = format!(
            "opendal+{service}://{}/{}",
            bucket.unwrap_or_default(),
            fresh("probe")
        );
        let mut c = fence(&["probe", &url, "--rounds", "2", "--json"]);
        if !required(test, configure(&mut c)) {
            continue;
        }
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{url}: {stdout}{stderr}");
        let json: Value = serde_json::from_str(&stdout).expect("probe --json parses");
        assert_eq!(json["verdict"], "honest", "{stdout}");
        println!("fence probe {url}: {}", json["verdict"]);
    }
}

#[test]
fn a_fenced_run_put_and_get_through_opendal_on_seaweedfs() {
    let test = "a_fenced_run_put_and_get_through_opendal_on_seaweedfs";
    let Some(bucket) = var("FENCE_S3_BUCKET") else {
        required(test, false);
        return;
    };
    let url = format!("opendal+s3://{bucket}/{}", fresh("run"));
    let script = "\"$FENCE_BIN\" put last-run --value \"epoch $FENCE_EPOCH\"";
    let mut run = fence(&[
        "run", "--store", &url, "--lease", "nightly", "--ttl", "6s", "--", "sh", "-c", script,
    ]);
    assert!(seaweed(&mut run));
    let run = run.env("FENCE_BIN", common::fence_bin()).output().unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut get = fence(&["get", "--store", &url, "--lease", "nightly", "last-run"]);
    assert!(seaweed(&mut get));
    let get = get.output().unwrap();
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
