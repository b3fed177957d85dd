//! Runs one origin until Ctrl-C, for trying it by hand or loading it with wrk:
//! `cargo run --release -p weir-origin --example serve -- 127.0.0.1:8080 node-1 [worker-threads]`

use std::net::SocketAddr;

use weir_origin::{Origin, OriginOptions};

fn main() -> std::io::Result<()> {
    let mut arguments = std::env::args().skip(1);
    let listen: SocketAddr = arguments
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    let name = arguments.next().unwrap_or_else(|| "origin".to_owned());
    let threads = arguments
        .next()
        .and_then(|threads| threads.parse().ok())
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let origin = Origin::bind(OriginOptions::new(name, listen)).await?;
        println!(
            "origin {} listening on {}",
            origin.name(),
            origin.local_addr()
        );
        let (shutdown, signal) = weir_core::Shutdown::new();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            shutdown.trigger();
        });
        origin.run(signal).await
    })
}
