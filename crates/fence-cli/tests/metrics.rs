//! `fence run --metrics ADDR` serves the documented metrics in the Prometheus text format.
// Tests bound their waits with wall time; the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::{fence, run_args, Store};

fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn a_scrape_returns_the_documented_names() {
    let store = Store::new();
    let addr = free_addr();
    let mut child = fence(&run_args(
        &store,
        "jobs",
        &["--ttl", "3s", "--metrics", &addr, "--", "sleep", "30"],
    ))
    .spawn()
    .unwrap();
    let mut text = String::new();
    // Until the first renewal (TTL/3) shows, or 10 s of wall time on a loaded machine.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(t) = scrape(&addr) {
            if t.contains("fence_lease_renewed_total") {
                text = t;
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    for name in [
        "fence_lease_acquired_total",
        "fence_lease_renewed_total",
        "fence_claims_total",
        // A histogram (buckets), as docs/cli.md says, not a summary (quantiles).
        "fence_store_request_seconds_bucket{",
    ] {
        assert!(
            text.contains(name),
            "{name} missing from the scrape:\n{text}"
        );
    }
}

#[test]
fn an_address_that_cannot_be_served_is_a_usage_error() {
    let store = Store::new();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = fence(&run_args(
        &store,
        "jobs",
        &["--metrics", &addr, "--", "true"],
    ))
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
