//! The HTTP/1 attack and edge-case corpus: request smuggling in its known
//! variants, response splitting, pool poisoning through every bodiless
//! status, upgrades, CONNECT, 1xx, trailers, pipelining after an error,
//! header limits and slow drips. Each case (in `cases/*.toml`, one file per
//! family) is raw bytes in, the answers expected, and the exact bytes the
//! node must see, checked against a recording origin.
//!
//! `cargo test -p weir-proxy --test corpus` runs every case against an
//! in-process weir (each case with its own proxy and origin) and fails
//! unless all pass. To point the same corpus at another proxy:
//!
//! ```sh
//! WEIR_CORPUS_TARGET=127.0.0.1:8080 WEIR_CORPUS_ORIGIN=127.0.0.1:9000 \
//!     cargo test -p weir-proxy --test corpus -- --nocapture
//! ```
//!
//! (the proxy forwards to the origin address; cases that need weir settings
//! are skipped; it prints one line per case and a summary, see
//! `bench/corpus/run`). A case is *exact* when every status, body and close
//! is as expected and the node saw the expected requests (byte for byte for
//! weir, by request line and body for other proxies, which rewrite heads
//! their own way); it is *safe* when the node agrees with the client on
//! request boundaries — it could read everything it got as requests and saw
//! no more requests than the client meant to send — and no answer reached
//! the wrong client or carried forbidden bytes. weir must be exact on every
//! case.

mod case;
mod client;
mod origin;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use case::{Case, bytes};
use origin::{Origin, Recorded};
use weir_http::{Limits, Parsed, parse_request};

/// Time for requests still in flight to reach the node after the client is done.
const SETTLE: Duration = Duration::from_millis(120);
/// Cases run at once against weir (each has its own proxy and origin).
const PARALLEL: usize = 12;

/// A case's outcome.
#[derive(Debug)]
struct Verdict {
    family: String,
    name: String,
    /// Every problem found; empty when the case passed.
    problems: Vec<String>,
    /// No boundary, wrong-client or forbidden-bytes problem.
    safe: bool,
}

fn load() -> Vec<(String, Case)> {
    let directory = Path::new(&manifest_dir()).join("tests/corpus/cases");
    let mut files: Vec<_> = std::fs::read_dir(&directory)
        .expect("the corpus directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let family = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("readable");
        let file: case::File =
            toml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        cases.extend(file.case.into_iter().map(|case| (family.clone(), case)));
    }
    cases
}

/// One virtual server and one pool over `origin`; forwarding headers off
/// (unless the case turns them on), so the node's bytes are the client's.
fn weir_config(origin: SocketAddr, case: &Case) -> String {
    let forwarded = match case.config.contains("forwarded_headers") {
        true => "",
        false => "forwarded_headers = false",
    };
    // The request id header is weir's own addition, like the forwarding headers: off
    // unless a case is about it, so cases compare the bytes HTTP itself asks for.
    let request_id = match case.config.contains("request_id") {
        true => "",
        false => "[virtual_servers.web.request_id]\nenabled = false",
    };
    format!(
        "[log]\naccess_log = false\nlevel = \"off\"\n\n\
         [pools.web]\nnodes = [{{ address = \"{origin}\" }}]\n{}\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         {forwarded}\n{}\n{request_id}\n",
        case.pool_config, case.config
    )
}

/// Runs one case against `target`, whose node is `origin`.
async fn run(
    family: String,
    case: Case,
    target: SocketAddr,
    origin: &Origin,
    exact_bytes: bool,
) -> Verdict {
    origin.reset(case.respond.iter().map(|reply| bytes(reply)).collect());
    let mut problems = Vec::new();
    let mut unsafe_problems = Vec::new();
    let first = client::exchange(
        target,
        &bytes(&case.send),
        case.drip,
        case.expect.len(),
        case.expect_close,
    )
    .await;
    if first.statuses != case.expect {
        problems.push(format!(
            "statuses {:?}, expected {:?}",
            first.statuses, case.expect
        ));
    }
    if case.expect_close && !first.closed {
        problems.push("not closed after the last answer".to_owned());
    }
    if let Some(body) = &case.body
        && first.last_body != bytes(body)
    {
        problems.push(format!(
            "body {:?}",
            String::from_utf8_lossy(&first.last_body)
        ));
    }
    let finals = |statuses: &[u16]| statuses.iter().filter(|&&s| s >= 200 || s == 101).count();
    // The requests the clients mean to send: a node that sees more saw a smuggled one.
    let intended = case.requests.unwrap_or(finals(&case.expect)) + finals(&case.then_expect);
    let mut received = first.raw;
    if let Some(then) = &case.then_send {
        let second =
            client::exchange(target, &bytes(then), false, case.then_expect.len(), false).await;
        if second.statuses != case.then_expect {
            problems.push(format!(
                "second client: statuses {:?}, expected {:?}",
                second.statuses, case.then_expect
            ));
        }
        // A success with another body is someone else's response; an error is not.
        let succeeded = second.statuses.iter().any(|s| (200..300).contains(s));
        if let Some(body) = &case.then_body
            && second.last_body != bytes(body)
        {
            let problem = format!(
                "second client got the body {:?}",
                String::from_utf8_lossy(&second.last_body)
            );
            match succeeded {
                true => unsafe_problems.push(problem),
                false => problems.push(problem),
            }
        }
        received.extend_from_slice(&second.raw);
    }
    for forbidden in &case.forbid {
        let forbidden = bytes(forbidden);
        if received
            .windows(forbidden.len())
            .any(|w| w == forbidden.as_slice())
        {
            unsafe_problems.push(format!(
                "the client received {:?}",
                String::from_utf8_lossy(&forbidden)
            ));
        }
    }
    tokio::time::sleep(SETTLE).await;
    let seen = origin.recorded();
    if let Some(problem) = desync(&seen, intended) {
        unsafe_problems.push(problem);
    }
    if let Some(expected) = &case.node
        && let Some(problem) = compare_node(&seen, expected, exact_bytes && !case.loose)
    {
        problems.push(problem);
    }
    let safe = unsafe_problems.is_empty();
    problems.extend(unsafe_problems);
    let about = &case.about;
    Verdict {
        family,
        name: format!("{} ({about})", case.name),
        problems,
        safe,
    }
}

/// Whether the node and the client disagree on where requests end: bytes
/// the node cannot read as a request (or frame unambiguously), or more
/// requests at the node than the clients meant to send (a smuggled request).
fn desync(seen: &[Recorded], intended: usize) -> Option<String> {
    if let Some(bad) = seen.iter().find(|r| !r.valid) {
        let text = String::from_utf8_lossy(&bad.raw);
        let text: String = text.chars().take(200).collect();
        return Some(format!(
            "the node got bytes it cannot read as a request: {text:?}"
        ));
    }
    (seen.len() > intended).then(|| {
        format!(
            "the node saw {} requests where the client sent {intended} (a smuggled request)",
            seen.len()
        )
    })
}

/// The node's requests against the expected ones: byte for byte (weir), or
/// by request line and body (another proxy rewrites heads its own way).
fn compare_node(seen: &[Recorded], expected: &[String], exact_bytes: bool) -> Option<String> {
    let show = |raw: &[u8]| {
        let text = format!("{:?}", String::from_utf8_lossy(raw));
        match text.char_indices().nth(240) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    };
    if seen.len() != expected.len() {
        let lines: Vec<String> = seen.iter().map(|r| show(&r.line)).collect();
        return Some(format!(
            "the node saw {} requests, expected {}: [{}]",
            seen.len(),
            expected.len(),
            lines.join(", ")
        ));
    }
    for (index, (seen, expected)) in seen.iter().zip(expected).enumerate() {
        let expected = bytes(expected);
        if exact_bytes {
            if seen.raw != expected {
                return Some(format!(
                    "request {index} reached the node as {}, expected {}",
                    show(&seen.raw),
                    show(&expected)
                ));
            }
            continue;
        }
        let Ok(Parsed::Complete(head, used)) = parse_request(
            &expected,
            &Limits {
                max_head_bytes: 1 << 20,
                max_headers: 1000,
            },
        ) else {
            return Some(format!("expected request {index} does not parse"));
        };
        let line = head.raw().split(|&b| b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line).replace(" HTTP/1.0", " HTTP/1.1");
        let seen_line = String::from_utf8_lossy(&seen.line).replace(" HTTP/1.0", " HTTP/1.1");
        let body = decoded(&head, &expected[used..]);
        if seen_line != line || seen.body != body {
            return Some(format!(
                "request {index} boundary differs: {} {} vs {line:?} {}",
                show(&seen.line),
                show(&seen.body),
                show(&body)
            ));
        }
    }
    None
}

/// The body of an expected request as a node decodes it.
fn decoded(head: &weir_http::RequestHead, rest: &[u8]) -> Vec<u8> {
    if head.framing() != weir_http::BodyFraming::Chunked {
        return rest.to_vec();
    }
    let mut decoder = weir_http::ChunkedDecoder::new(64 * 1024);
    let mut input = bytes::BytesMut::from(rest);
    let mut body = Vec::new();
    while let Ok(weir_http::Decoded::Data(data)) = decoder.decode(&mut input) {
        body.extend_from_slice(&data);
    }
    body
}

/// Every case against an in-process weir; all must pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_passes_the_whole_corpus() {
    if std::env::var_os("WEIR_CORPUS_TARGET").is_some() {
        return peer_mode().await;
    }
    let cases = load();
    let names: HashSet<(&str, &str)> = cases
        .iter()
        .map(|(family, case)| (family.as_str(), case.name.as_str()))
        .collect();
    assert_eq!(
        names.len(),
        cases.len(),
        "case names are unique in a family"
    );
    assert!(cases.len() >= 150, "the corpus has {} cases", cases.len());
    let permits = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut tasks = tokio::task::JoinSet::new();
    for (family, case) in cases {
        let permit = Arc::clone(&permits).acquire_owned().await.expect("open");
        tasks.spawn(async move {
            let origin = Origin::start("127.0.0.1:0".parse().expect("address")).await;
            let proxy = weir_testkit::TestProxy::start(&weir_config(origin.addr, &case)).await;
            let verdict = run(family, case, proxy.addr, &origin, true).await;
            proxy.stop().await;
            drop(permit);
            verdict
        });
    }
    let mut failures = Vec::new();
    let mut passed = 0;
    while let Some(verdict) = tasks.join_next().await {
        let verdict = verdict.expect("case task");
        if verdict.problems.is_empty() {
            passed += 1;
        } else {
            failures.push(format!(
                "{}/{}: {}",
                verdict.family,
                verdict.name,
                verdict.problems.join("; ")
            ));
        }
    }
    failures.sort();
    println!("corpus: {passed} passed, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The corpus against another proxy (see the module doc).
async fn peer_mode() {
    let target: SocketAddr = std::env::var("WEIR_CORPUS_TARGET")
        .unwrap()
        .parse()
        .expect("WEIR_CORPUS_TARGET=ip:port");
    let bind: SocketAddr = std::env::var("WEIR_CORPUS_ORIGIN")
        .expect("WEIR_CORPUS_ORIGIN=ip:port")
        .parse()
        .expect("ip:port");
    let origin = Origin::start(bind).await;
    let (mut run_cases, mut exact, mut safe, mut skipped) = (0, 0, 0, 0);
    for (family, case) in load() {
        if case.weir_only() {
            skipped += 1;
            println!("case {family}/{} skipped (needs weir settings)", case.name);
            continue;
        }
        let verdict = run(family, case, target, &origin, false).await;
        run_cases += 1;
        exact += usize::from(verdict.problems.is_empty());
        safe += usize::from(verdict.safe);
        let outcome = match (verdict.problems.is_empty(), verdict.safe) {
            (true, _) => "exact".to_owned(),
            (false, true) => format!("safe ({})", verdict.problems.join("; ")),
            (false, false) => format!("UNSAFE ({})", verdict.problems.join("; ")),
        };
        println!("case {}/{} {outcome}", verdict.family, verdict.name);
    }
    println!(
        "summary: {run_cases} run, {exact} exact, {safe} safe, {} unsafe, {skipped} skipped",
        run_cases - safe
    );
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}
