//! weir's load generator (`weir bench`): HTTP/1.1 over TCP or TLS (`https://` URLs: rustls
//! with the aws-lc-rs provider, full and resumed handshakes counted), or L4 against a TCP echo server
//! (`tcp://` URLs: connections per second, or request/response on persistent connections),
//! closed loop at a concurrency or
//! open loop at a rate, latency measured from the intended send time (correct under
//! coordinated omission, like wrk2) with the uncorrected service time beside it, and reports
//! as text (with a siege-style summary block) or as the `weir-bench/1` JSON document.
//!
//! The run goes through one pipeline:
//!
//! ```text
//! plan → schedule (closed loop, or open loop at a rate) → issue → record → merge → report
//! plan.rs   schedule.rs                          http1.rs / l4.rs record.rs          report.rs, render.rs
//!           └──────────── driver.rs: one loop per connection slot ─────────┘
//! ```
//!
//! Stop condition (duration or count), pacing (closed or open), connection mode
//! (keep-alive or a new connection per request) and protocol (HTTP/1.1 or L4 echo) are
//! independent values of one [`Plan`], read by the one driver.
//!
//! [`crypto`] (`weir bench crypto`) measures the TLS cryptography of aws-lc-rs on one core,
//! like `openssl speed`, and derives the ceiling of full TLS 1.3 handshakes per core.
//!
//! [`suite`] (`weir bench suite`) runs the Zeus matrix — a table of row specs — as short runs
//! through the same driver, against one target or two in interleaved slices.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_bench::{ConnectionMode, L4Mode, Plan, Settings, Stop, TlsSettings, UrlOrder};
//!
//! let plan = Plan::new(Settings {
//!     urls: vec!["http://127.0.0.1:8081/".into()],
//!     method: "GET".into(),
//!     headers: vec![],
//!     body: vec![],
//!     order: UrlOrder::Sequential,
//!     connections: 10,
//!     threads: Some(1),
//!     stop: Stop::Count(1000),
//!     rate: None,
//!     mode: ConnectionMode::KeepAlive,
//!     timeout: Duration::from_secs(5),
//!     progress: false,
//!     // Used only for tcp:// URLs.
//!     l4_mode: L4Mode::RequestResponse,
//!     l4_size: None,
//!     // Used only for https:// URLs.
//!     tls: TlsSettings::default(),
//!     // Some(streams per connection) for HTTP/2 (h2c for http://, ALPN h2 for https://).
//!     http2_streams: None,
//! })?;
//! let report = weir_bench::run(&plan)?;
//! println!("{}", weir_bench::render::text(&report));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cpu;
pub mod crypto;
mod driver;
mod http1;
mod http2;
mod l4;
mod plan;
mod progress;
mod record;
pub mod render;
pub mod report;
mod schedule;
pub mod selftest;
pub mod suite;
pub mod tls;

pub use plan::{
    ConnectionMode, DEFAULT_L4_SIZE, L4Mode, Pacing, Plan, PlanError, Protocol, Settings, Stop,
    Target, UrlOrder, parse_duration, parse_tcp_url, parse_url, read_url_file,
};
pub use report::{Report, SCHEMA};
pub use tls::{ResumptionViolation, TlsSettings, TlsSetupError, TlsVersions, check_resumption};

/// Runs `plan` (blocking, on its own threads) and reports what it measured.
pub fn run(plan: &Plan) -> std::io::Result<Report> {
    let outcome = driver::execute(plan)?;
    Ok(Report::new(plan, &outcome))
}
