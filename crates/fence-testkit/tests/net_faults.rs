//! Faults on the wire between each real adapter and its real server: the fault proxy of
//! `fence_testkit::wire` sits between fence-s3 and SeaweedFS / moto, between fence-gcs and
//! fake-gcs-server, between fence-azure and Azurite, and between fence-dynamodb and moto's
//! DynamoDB; and between fence-opendal (OpenDAL's s3 and azblob services) and SeaweedFS, moto
//! and Azurite. Every answer of the adapter is
//! checked against what the server applied, and the lease/claim/write runtime runs through the
//! same faults.
//!
//! Prints per server `net-faults <server>: N ops, F faults injected, V violations`.
//! Servers come from the environment (`scripts/servers/*.sh` write it); without it the tests
//! skip with a notice, or fail when `FENCE_REQUIRE_SERVERS=1`.
//!
//! Adding a backend is one more entry in [`servers`]: its name, its server's address, and a
//! function building the adapter for an endpoint and a prefix.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, Entropy, Key};
use fence_testkit::sabotage::{Misclassification, Misclassifying};
use fence_testkit::scenarios::wire::{outcomes, runtime, RuntimeWorkload, Workload};
use fence_testkit::wire::{FaultMix, FaultProxy, Schedule, WireFault};
use fence_testkit::CountingStore;

/// The lease TTL of every adapter here: conditional writes are bounded by TTL / 3.
const TTL: Duration = Duration::from_secs(3);

/// The bound of one conditional write of the adapters below.
fn write_deadline() -> Duration {
    TTL / 3
}

type Adapter = Box<dyn Fn(&str, &str) -> Arc<dyn ConditionalStore> + Send + Sync>;

/// One backend: where its server listens, and its adapter for an endpoint and a key prefix.
struct Server {
    name: &'static str,
    endpoint: String,
    adapter: Adapter,
}

impl Server {
    fn upstream(&self) -> SocketAddr {
        let addr = self.endpoint.trim_start_matches("http://");
        addr.parse().expect("an http://IP:PORT endpoint")
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn s3(name: &'static str, endpoint: String) -> Option<Server> {
    let (bucket, key, secret) = (
        var("FENCE_S3_BUCKET")?,
        var("FENCE_S3_ACCESS_KEY_ID")?,
        var("FENCE_S3_SECRET_ACCESS_KEY")?,
    );
    let region = var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into());
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let store = fence_s3::S3Store::builder()
            .with_bucket(&bucket)
            .with_prefix(prefix)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region(&region)
            .with_credentials(&key, &secret)
            .with_lease_ttl(TTL)
            .with_read_policy(Duration::from_secs(2), 3)
            .build()
            .expect("valid S3 configuration");
        Arc::new(store)
    });
    Some(Server {
        name,
        endpoint,
        adapter,
    })
}

fn gcs() -> Option<Server> {
    let bucket = var("FENCE_GCS_BUCKET")?;
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let store = fence_gcs::GcsStore::builder()
            .with_url(format!("gs://{bucket}/{prefix}"))
            .with_endpoint(endpoint)
            .with_anonymous()
            .with_lease_ttl(TTL)
            .build()
            .expect("valid GCS configuration");
        Arc::new(store)
    });
    Some(Server {
        name: "fake-gcs-server",
        endpoint: var("FENCE_GCS_ENDPOINT")?,
        adapter,
    })
}

fn azure() -> Option<Server> {
    let container = var("FENCE_AZURE_CONTAINER")?;
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let store = fence_azure::AzureStore::builder()
            .with_emulator(endpoint)
            .with_container(&container)
            .with_prefix(prefix)
            .with_lease_ttl(TTL)
            .build()
            .expect("valid Azure configuration");
        Arc::new(store)
    });
    Some(Server {
        name: "azurite",
        endpoint: var("FENCE_AZURE_ENDPOINT")?,
        adapter,
    })
}

/// fence-opendal over OpenDAL's s3 service.
fn opendal_s3(name: &'static str, endpoint: String) -> Option<Server> {
    let server = fence_opendal::emulator::S3Server {
        endpoint: endpoint.clone(),
        bucket: var("FENCE_S3_BUCKET")?,
        region: var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
        access_key_id: var("FENCE_S3_ACCESS_KEY_ID")?,
        secret_access_key: var("FENCE_S3_SECRET_ACCESS_KEY")?,
    };
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let at = fence_opendal::emulator::S3Server {
            endpoint: endpoint.to_string(),
            ..server.clone()
        };
        opendal_store(fence_opendal::emulator::s3(&at, &format!("/{prefix}")))
    });
    Some(Server {
        name,
        endpoint,
        adapter,
    })
}

/// fence-opendal over OpenDAL's azblob service.
fn opendal_azblob() -> Option<Server> {
    let container = var("FENCE_AZURE_CONTAINER")?;
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let root = format!("/{prefix}");
        opendal_store(fence_opendal::emulator::azurite(
            endpoint, &container, &root,
        ))
    });
    Some(Server {
        name: "opendal-azurite",
        endpoint: var("FENCE_AZURE_ENDPOINT")?,
        adapter,
    })
}

fn opendal_store(op: opendal::Result<opendal::Operator>) -> Arc<dyn ConditionalStore> {
    let op = op.expect("valid OpenDAL configuration");
    let store = fence_opendal::OpendalStore::builder(op)
        .with_lease_ttl(TTL)
        .build()
        .expect("a compare-and-swap service");
    Arc::new(store)
}

/// fence-dynamodb and moto's DynamoDB.
fn dynamodb() -> Option<Server> {
    let (table, key, secret) = (
        var("FENCE_DYNAMODB_TABLE")?,
        var("FENCE_DYNAMODB_ACCESS_KEY_ID")?,
        var("FENCE_DYNAMODB_SECRET_ACCESS_KEY")?,
    );
    let region = var("FENCE_DYNAMODB_REGION").unwrap_or_else(|| "us-east-1".into());
    let adapter: Adapter = Box::new(move |endpoint: &str, prefix: &str| {
        let store = fence_dynamodb::DynamoDbStore::builder()
            .with_table(&table)
            .with_prefix(prefix)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region(&region)
            .with_credentials(&key, &secret)
            .with_lease_ttl(TTL)
            .with_read_policy(Duration::from_secs(2), 3)
            .build()
            .expect("valid DynamoDB configuration");
        Arc::new(store)
    });
    Some(Server {
        name: "dynamodb",
        endpoint: var("FENCE_DYNAMODB_ENDPOINT")?,
        adapter,
    })
}

/// The backend named `name`, from the environment.
fn servers(name: &str) -> Option<Server> {
    let found = match name {
        "seaweedfs" => var("FENCE_S3_SEAWEED_ENDPOINT").and_then(|e| s3("seaweedfs", e)),
        "moto" => var("FENCE_S3_MOTO_ENDPOINT").and_then(|e| s3("moto", e)),
        "fake-gcs-server" => gcs(),
        "azurite" => azure(),
        "opendal-seaweedfs" => {
            var("FENCE_S3_SEAWEED_ENDPOINT").and_then(|e| opendal_s3("opendal-seaweedfs", e))
        }
        "opendal-moto" => var("FENCE_S3_MOTO_ENDPOINT").and_then(|e| opendal_s3("opendal-moto", e)),
        "opendal-azurite" => opendal_azblob(),
        "dynamodb" => dynamodb(),
        _ => None,
    };
    if found.is_none() {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{name}: its server is not in the environment but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED net-faults {name}: no server (run scripts/servers/*.sh start)");
    }
    found
}

fn fresh_prefix(name: &str) -> String {
    format!(
        "fence-net-faults/{name}-{:016x}",
        Entropy::from_os().next_u64()
    )
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

async fn proxy(server: &Server, writes: FaultMix, reads: FaultMix, seed: u64) -> FaultProxy {
    let schedule = Schedule::seeded(seed).with_writes(writes).with_reads(reads);
    FaultProxy::start(server.upstream(), schedule)
        .await
        .expect("the proxy starts")
}

/// Conditional writes and then the runtime, through the proxy, on one server.
async fn net_faults(name: &str, seed: u64) {
    let Some(server) = servers(name) else { return };
    let name = server.name;
    let prefix = fresh_prefix(name);
    let writes = FaultMix::writes(write_deadline());
    let proxy = proxy(&server, writes.clone(), FaultMix::reads(), seed).await;
    let counted = Arc::new(CountingStore::new((server.adapter)(
        &proxy.endpoint(),
        &prefix,
    )));
    let workload = Workload {
        seed,
        ..Workload::default()
    };
    let mut report = outcomes(counted.clone(), proxy.ledger(), &key("outcomes"), &workload).await;
    println!("net-faults {name} outcomes: {report}");
    // Fewer faults for the runtime, so leases are held long enough to claim and write.
    proxy.schedule().set_writes(writes.scaled(0.25));
    proxy.schedule().set_reads(FaultMix::reads().scaled(0.5));
    let direct = (server.adapter)(&server.endpoint, &prefix);
    let cfg = RuntimeWorkload {
        ttl: TTL,
        seed,
        ..RuntimeWorkload::default()
    };
    let ran = runtime(counted.clone(), direct, &key("runtime"), &cfg).await;
    println!("net-faults {name} runtime: {ran}");
    report.absorb(ran);
    let stats = proxy.stats();
    let ops = counted.counts().total();
    println!("net-faults {name} faults: {:?}", stats.by_fault);
    println!(
        "net-faults {name}: {ops} ops, {} faults injected, {} violations",
        stats.faults,
        report.violations.len()
    );
    assert!(ops >= 1_000 && stats.faults >= 100, "too little was tried");
    assert!(report.violations.is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_seaweedfs() {
    net_faults("seaweedfs", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_moto() {
    net_faults("moto", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_fake_gcs_server() {
    net_faults("fake-gcs-server", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_azurite() {
    net_faults("azurite", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_opendal_seaweedfs() {
    net_faults("opendal-seaweedfs", 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_opendal_moto() {
    net_faults("opendal-moto", 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_opendal_azurite() {
    net_faults("opendal-azurite", 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_faults_dynamodb() {
    net_faults("dynamodb", 8).await;
}

/// A deliberately mis-classifying adapter over the real one must be caught over the proxy:
/// some violation names every part of `says`.
async fn assert_caught(name: &str, how: Misclassification, writes: FaultMix, says: &[&str]) {
    let Some(server) = servers(name) else { return };
    let prefix = fresh_prefix(&format!("{name}-misclassified"));
    let proxy = proxy(&server, writes, FaultMix::none(), 9).await;
    let honest = (server.adapter)(&proxy.endpoint(), &prefix);
    let liar = Arc::new(Misclassifying::new(honest, how));
    let workload = Workload {
        writes: 300,
        ..Workload::default()
    };
    let report = outcomes(liar, proxy.ledger(), &key("outcomes"), &workload).await;
    println!("{report}");
    let named = |v: &String| says.iter().all(|s| v.contains(s));
    assert!(
        report.violations.iter().any(named),
        "{how:?} not caught: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_calling_every_error_not_committed_is_caught_over_the_proxy() {
    let how = Misclassification::EveryErrorNotCommitted;
    let writes = FaultMix::writes(write_deadline());
    assert_caught("seaweedfs", how, writes, &["said NotCommitted"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_calling_a_reset_after_sending_not_committed_is_caught_over_the_proxy() {
    let how = Misclassification::ResetNotCommitted;
    let writes = FaultMix::none().with(0.2, WireFault::ResetAfterForward);
    let says = [
        "said NotCommitted (Unavailable), but PUT",
        "reset after the server answered",
    ];
    assert_caught("seaweedfs", how, writes, &says).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_retrying_its_writes_is_caught_over_the_proxy() {
    let how = Misclassification::RetriesWrites;
    let writes = FaultMix::none()
        .with(0.1, WireFault::DropAnswer)
        .with(0.1, WireFault::AnswerAfter(503));
    assert_caught("seaweedfs", how, writes, &["a hidden retry"]).await;
}
