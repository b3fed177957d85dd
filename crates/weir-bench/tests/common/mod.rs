//! Shared by the integration tests: an in-process origin and a plan builder.

#![allow(dead_code)]

pub mod schema;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_bench::{ConnectionMode, Plan, Settings, Stop, UrlOrder};
use weir_core::Shutdown;
use weir_origin::{Origin, OriginOptions, OriginStats};

/// `weir origin` on its own runtime, on a free loopback port.
pub struct TestOrigin {
    pub address: SocketAddr,
    pub stats: Arc<OriginStats>,
    shutdown: Shutdown,
    runtime: tokio::runtime::Runtime,
}

impl TestOrigin {
    pub fn start() -> TestOrigin {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let origin = runtime
            .block_on(Origin::bind(OriginOptions::new(
                "bench-test",
                "127.0.0.1:0".parse().expect("address"),
            )))
            .expect("bind a loopback port");
        let address = origin.local_addr();
        let stats = origin.stats();
        let (shutdown, signal) = Shutdown::new();
        runtime.spawn(origin.run(signal));
        TestOrigin {
            address,
            stats,
            shutdown,
            runtime,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn stop(self) {
        self.shutdown.trigger();
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

/// A plan with test defaults: 4 connections, 2 threads, keep-alive, closed loop, 5 s timeout.
pub fn settings(urls: Vec<String>, stop: Stop) -> Settings {
    Settings {
        urls,
        method: "GET".to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        order: UrlOrder::Sequential,
        connections: 4,
        threads: Some(2),
        stop,
        rate: None,
        mode: ConnectionMode::KeepAlive,
        timeout: Duration::from_secs(5),
        progress: false,
    }
}

pub fn plan(settings: Settings) -> Plan {
    Plan::new(settings).expect("valid test plan")
}
