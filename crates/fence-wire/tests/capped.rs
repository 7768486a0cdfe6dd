//! The capped readers over a real connection: a canned server on 127.0.0.1 streams bodies of
//! a gigabyte from one small buffer, and the readers stop at their cap and hang up.

use fence_testkit::canned::{self, serve, Reply, GIB, HANG_UP_SLACK};
use fence_wire::body::{read_capped, read_prefix, reqwest_chunks, CappedError};

async fn gigabyte_answer(status: u16) -> (canned::Canned, reqwest::Response) {
    let server = serve(move |_| Reply::stream(status, "application/octet-stream", GIB, b'x')).await;
    let response = reqwest::get(server.endpoint()).await.unwrap();
    (server, response)
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused_after_the_cap_and_the_connection_dropped() {
    let (server, response) = gigabyte_answer(200).await;
    let got = read_capped(reqwest_chunks(response), 1 << 20).await;
    assert!(matches!(got, Err(CappedError::OverLimit { limit }) if limit == 1 << 20));
    assert!(
        server.streamed() < (1 << 20) + HANG_UP_SLACK,
        "the server wrote {} bytes",
        server.streamed()
    );
}

#[tokio::test]
async fn an_error_body_is_read_only_up_to_its_start() {
    let (server, response) = gigabyte_answer(500).await;
    let start = read_prefix(reqwest_chunks(response), 4096).await.unwrap();
    assert_eq!(start.len(), 4096);
    assert!(server.streamed() < 4096 + HANG_UP_SLACK);
}

#[tokio::test]
async fn a_body_within_the_cap_is_read_whole() {
    let server = serve(|_| Reply::stream(200, "text/plain", 300_000, b'y')).await;
    let response = reqwest::get(server.endpoint()).await.unwrap();
    let body = read_capped(reqwest_chunks(response), 300_000)
        .await
        .unwrap();
    assert_eq!(body.len(), 300_000);
    assert!(body.iter().all(|&b| b == b'y'));
}
